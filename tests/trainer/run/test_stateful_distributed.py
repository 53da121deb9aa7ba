"""Stateful presets under data parallelism: 2 gloo ranks train KRPO with checkpoints.

Every checkpoint first compares the ranks' stage-state fingerprints (rank 0's
copy is stored for all ranks) and refuses to save when they differ; the runs
save twice, so both ranks agreed on the state after steps 2 and 4. The control
shows that check does fire on disagreeing ranks. (SPO's and KRPO's merges are
compared with one process bit for bit in tests/trainer/ppo/test_stage_state_distributed.py;
one trainer-level job keeps the suite short.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dist_launch import clean_env, run_bounded, warm_torchrun

ROOT = Path(__file__).resolve().parents[3]
JOB_TIMEOUT_S = 150
TINY = [
    "train.steps=4",
    "train.save_every=2",
    "rollout.batch_size=4",
    "rollout.n_samples=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.dist_timeout_s=60",
    "train.debug_param_checksum=true",
    "task.kwargs={min_operand: 0, max_operand: 1, op: add}",
]


@pytest.mark.parametrize("preset", ["krpo"])
def test_two_ranks_agree_on_the_stage_state(tmp_path: Path, preset: str) -> None:
    cmd = [
        *warm_torchrun(),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "presets" / f"{preset}.yaml"),
        *TINY,
        f"output.dir={tmp_path}",
    ]
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    run_dir = tmp_path / preset / "trial0"  # a config file is its run's name
    for step in (2, 4):
        state = torch.load(run_dir / "checkpoints" / f"step_{step}" / "trainer_state.pt", weights_only=True)
        saved = state["actor"]["stages"]["outcome_reward_shaping"]
        assert saved["implementation"] == preset and saved["values"]["prompt_keys"].numel() >= 1


def test_a_checkpoint_refuses_ranks_whose_stage_states_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    from areal_adv.trainer.run import trainer_state
    from areal_adv.utils.checkpoint_folders import CheckpointError

    class Actor:
        def state_fingerprints(self):
            return {"outcome_reward_shaping": "a"}

    class Fake:
        actor, ctx = Actor(), None

    monkeypatch.setattr(trainer_state, "all_gather_objects", lambda obj, ctx: [obj, {"outcome_reward_shaping": "b"}])
    with pytest.raises(CheckpointError, match=r"state of stage\(s\) \['outcome_reward_shaping'\] differs"):
        trainer_state._check_stage_states_agree(Fake())
