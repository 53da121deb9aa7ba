"""Exact resume with stateful stages: KRPO's filters and SPO's tracker come back from the checkpoint.

Each preset runs 6 steps uninterrupted (checkpoints every 2), then again from its
step-2 checkpoint in a fresh Trainer (fresh stage state, as a new process has).
The resumed run must give the same per-step metrics, bitwise the same final
weights and the same stage state; and a resume that drops the stage state (the
control) must not, so the comparison does see the state. The KRPO reference and
step-2 runs are made once for the module (the resume and the control both start
from them); each test resumes in a copy of the step-2 run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics

ROOT = Path(__file__).resolve().parents[3]
PRESETS = ROOT / "examples" / "presets"
STEPS = 6
TINY = [
    "rollout.batch_size=3",
    "rollout.n_samples=3",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.save_every=2",
    "train.keep_last=null",
    f"train.steps={STEPS}",
    "task.kwargs={min_operand: 0, max_operand: 1, op: add}",
]  # 4 prompts: every step revisits some
#: one KRPO reference (the `krpo_runs` fixture) for the module: its tests stay on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("resume_stateful")


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


def _policy(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    folder = run_dir / "checkpoints" / f"step_{STEPS}" / "policy"
    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def _state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / f"step_{STEPS}" / "trainer_state.pt", weights_only=True)["actor"]


def _reference_and_first(preset: str, out: Path) -> tuple[Path, Path]:
    """(run dir of the uninterrupted run, run dir of the same run stopped after its step-2 checkpoint)."""
    common = [*TINY, f"output.dir={out}"]
    reference = Trainer(load_config(PRESETS / f"{preset}.yaml", [*common, "experiment_name=ref"])).run()
    first = Trainer(load_config(PRESETS / f"{preset}.yaml", [*common, "experiment_name=run", "train.steps=2"])).run()
    return reference.run_dir, first.run_dir


def _resume_copy(preset: str, first: Path, out: Path, tmp_path: Path) -> Trainer:
    """A Trainer resuming a copy of the step-2 run `first` (made under `out`) from its step-2 checkpoint."""
    copy = tmp_path / first.relative_to(out)
    shutil.copytree(first, copy)
    return Trainer(
        load_config(
            PRESETS / f"{preset}.yaml",
            [*TINY, f"output.dir={tmp_path}", "experiment_name=run", f"train.resume={copy / 'checkpoints' / 'step_2'}"],
        )
    )


@pytest.fixture(scope="module")
def krpo_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(output dir, reference run dir, step-2 run dir) of KRPO, shared by the resume and the control."""
    out = tmp_path_factory.mktemp("krpo")
    return (out, *_reference_and_first("krpo", out))


@pytest.mark.parametrize("preset", ["krpo", "spo"])
def test_resume_restores_the_stage_state(tmp_path: Path, preset: str, request: pytest.FixtureRequest) -> None:
    if preset == "krpo":
        out, reference, first = request.getfixturevalue("krpo_runs")
    else:
        out = tmp_path / "first"
        reference, first = _reference_and_first(preset, out)
    state = _state(reference)["stages"]["outcome_reward_shaping"]
    assert state["implementation"] == preset and state["values"]["prompt_keys"].numel() == 4
    resumed = _resume_copy(preset, first, out, tmp_path).run()
    assert resumed.steps_done == STEPS
    assert _rows(resumed.run_dir) == _rows(reference)
    mine, theirs = _policy(resumed.run_dir), _policy(reference)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    saved, expected = _state(resumed.run_dir)["stages"], _state(reference)["stages"]
    for key, value in expected["outcome_reward_shaping"]["values"].items():
        assert torch.equal(saved["outcome_reward_shaping"]["values"][key], value), key


def test_dropping_the_stage_state_changes_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, krpo_runs: tuple[Path, Path, Path]
) -> None:
    """The control: the same resume with the KRPO state cleared after loading diverges from the reference."""
    out, reference, first = krpo_runs
    from areal_adv.trainer.ppo.actor import PPOActor

    load = PPOActor.load_state_dict

    def forget(self, state):
        load(self, state)
        for stage_state in self.stage_states.values():
            stage_state.clear()

    monkeypatch.setattr(PPOActor, "load_state_dict", forget)
    resumed = _resume_copy("krpo", first, out, tmp_path).run()
    assert _rows(resumed.run_dir) != _rows(reference)


@pytest.mark.parametrize(
    "config, stage",
    [
        (PRESETS / "running_norm.yaml", "reward_norm"),  # ROLL's running moments
        (ROOT / "examples" / "self_play" / "rae_nim.yaml", "outcome_reward_shaping"),  # RAE's (game, role) EMAs
    ],
)
def test_resume_restores_running_moments_and_role_baselines(tmp_path: Path, config: Path, stage: str) -> None:
    common = [*TINY, f"output.dir={tmp_path}", "eval.every=null"]
    if "self_play" in str(config):  # its own task: drop the arith kwargs
        common = [o for o in common if not o.startswith("task.")]
    reference = Trainer(load_config(config, [*common, "experiment_name=ref"])).run()
    first = Trainer(load_config(config, [*common, "experiment_name=run", "train.steps=2"])).run()
    resumed = Trainer(
        load_config(
            config, [*common, "experiment_name=run", f"train.resume={first.run_dir / 'checkpoints' / 'step_2'}"]
        )
    ).run()
    assert resumed.steps_done == STEPS
    assert _rows(resumed.run_dir) == _rows(reference.run_dir)
    mine, theirs = _policy(resumed.run_dir), _policy(reference.run_dir)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    saved, expected = (
        _state(resumed.run_dir)["stages"][stage]["values"],
        _state(reference.run_dir)["stages"][stage]["values"],
    )
    assert saved.keys() == expected.keys() and len(expected) > 0
    for key, value in expected.items():
        assert torch.equal(saved[key], value) if torch.is_tensor(value) else saved[key] == value, key
