"""What a checkpoint holds: RNG round trips, exact weight loading, and the checks made on resume."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_adv.api.cli_args import PPOActorConfig, load_config
from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_critic, build_policy
from areal_adv.trainer.main import main
from areal_adv.trainer.parallel.checksum import module_checksum
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.trainer_state import capture_rng, load_module, restore_rng, save_module
from areal_adv.utils.checkpoint_folders import CheckpointError

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.steps=2",
    "output.loggers=[jsonl]",
]
SPECIAL = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}


def _draws(holder: SimpleNamespace, n: int) -> tuple:
    return (
        random.random(),
        np.random.rand(n).tolist(),
        torch.rand(n).tolist(),
        torch.rand(n, generator=holder.generator).tolist(),
        holder.rng.random(),
    )


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 20), burn=st.integers(0, 50))
def test_rng_states_round_trip(seed: int, n: int, burn: int) -> None:
    holder = SimpleNamespace(generator=torch.Generator().manual_seed(seed), rng=random.Random(seed + 1))
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    for _ in range(burn):
        _draws(holder, 1)
    np.random.randn()  # a cached Gaussian is part of numpy's state
    state = capture_rng(holder)
    first = _draws(holder, n)
    _draws(holder, 3)  # move every generator on
    restore_rng(holder, state)
    assert _draws(holder, n) == first


@pytest.mark.parametrize("tied", [False, True])
def test_modules_load_back_exactly_into_a_fresh_model(tmp_path: Path, tied: bool) -> None:
    cfg = ModelConfig(hidden_size=32, num_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    policy = build_policy(cfg, 20, SPECIAL)
    if tied:
        policy.config.tie_word_embeddings = True
        policy.tie_weights()
    critic = build_critic(cfg, 20, SPECIAL)
    with torch.no_grad():
        critic.value_head.weight.normal_()
    save_module(policy, tmp_path / "policy")
    save_module(critic, tmp_path / "critic")
    torch.manual_seed(1)  # a differently initialised model to load into
    other_policy, other_critic = build_policy(cfg, 20, SPECIAL), build_critic(cfg, 20, SPECIAL)
    if tied:
        other_policy.config.tie_word_embeddings = True
        other_policy.tie_weights()
    assert module_checksum(other_policy) != module_checksum(policy)
    load_module(other_policy, tmp_path / "policy")
    load_module(other_critic, tmp_path / "critic")
    assert module_checksum(other_policy) == module_checksum(policy)
    assert module_checksum(other_critic) == module_checksum(critic)


def test_a_checkpoint_of_another_architecture_is_refused(tmp_path: Path) -> None:
    small = build_policy(ModelConfig(hidden_size=32, num_heads=2, intermediate_size=64, num_layers=1), 20, SPECIAL)
    save_module(small, tmp_path / "policy")
    big = build_policy(ModelConfig(hidden_size=32, num_heads=2, intermediate_size=64, num_layers=2), 20, SPECIAL)
    with pytest.raises(CheckpointError, match=r"lacks weights \['model\.layers\.1\."):
        load_module(big, tmp_path / "policy")


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, inputs, *, factor: float = 1.0):
        from areal_adv.trainer.ppo.advantage import OutcomeResult

        self.n += 1
        return OutcomeResult(rewards=inputs.data["rewards"] * factor)

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]


counter = _Counter()


def test_actor_state_holds_the_stateful_stages_only() -> None:
    assert PPOActor(PPOActorConfig()).state_dict() == {"stages": {}}
    path = f"{__name__}.counter"
    actor = PPOActor(
        load_config(
            {"advantage": {"outcome_reward_shaping": {"implementation": path, "kwargs": {"factor": 2.0}}}},
            schema=PPOActorConfig,
        )
    )
    counter.n = 5
    state = actor.state_dict()
    assert state == {"stages": {"outcome_reward_shaping": {"n": 5}}}
    counter.n = 0
    actor.load_state_dict(state)
    assert counter.n == 5
    with pytest.raises(
        ValueError,
        match=r"holds state for stages \[\], but the configured stages with state are "
        r"\['outcome_reward_shaping'\]",
    ):
        actor.load_state_dict({"stages": {}})


# -- checks made on resume ----------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ckpt")
    result = Trainer(load_config(DEFAULT, [*TINY, f"output.dir={out}", "experiment_name=src"])).run()
    return result.checkpoint


def _resume_trainer(tmp_path: Path, checkpoint: Path, *extra: str) -> Trainer:
    return Trainer(
        load_config(
            DEFAULT, [*TINY, f"output.dir={tmp_path}", "experiment_name=dst", f"train.resume={checkpoint}", *extra]
        )
    )


def test_a_checkpoint_of_the_previous_format_is_refused_in_one_line_saying_what_to_do(
    tmp_path: Path, checkpoint: Path
) -> None:
    import json
    import shutil

    from areal_adv.trainer.run.run_dir import RunDirectoryError

    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    manifest = json.loads((copy / "areal_checkpoint.json").read_text())
    (copy / "areal_checkpoint.json").write_text(json.dumps({**manifest, "format": 1}))
    with pytest.raises(RunDirectoryError) as caught:
        _resume_trainer(tmp_path, copy).run()
    message = str(caught.value)
    assert "\n" not in message and f"train.resume: checkpoint {copy}: format 1 " in message
    assert "continue it with areal-adv 0.3.0, or start a new run from its policy with " in message
    assert f"model.path={copy / 'policy'}" in message


def test_another_initial_policy_is_refused(tmp_path: Path, checkpoint: Path) -> None:
    with pytest.raises(CheckpointError, match="the KL reference rebuilt for this run .* is not the initial policy"):
        _resume_trainer(tmp_path, checkpoint, "seed=2").run()


def test_a_critic_mismatch_is_refused(tmp_path: Path, checkpoint: Path) -> None:
    with pytest.raises(CheckpointError, match="written with critic.enabled=False; set critic.enabled=false"):
        _resume_trainer(tmp_path, checkpoint, "critic.enabled=true").run()


def test_changed_config_is_named_in_a_warning(
    tmp_path: Path, checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="areal_adv.checkpoint"):
        result = _resume_trainer(tmp_path, checkpoint, "train.lr=0.01", "train.steps=3").run()
    assert result.steps_done == 3 and result.resumed_from == checkpoint
    assert "with a changed config (experiment_name, train.lr)" in caplog.text


def test_resuming_past_train_steps_is_refused_on_the_command_line(
    tmp_path: Path, checkpoint: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        ["--config", str(DEFAULT), *TINY, f"output.dir={tmp_path}", f"train.resume={checkpoint}", "train.steps=1"]
    )
    assert code == 1
    assert "train.steps: got 1, but the checkpoint" in capsys.readouterr().err


def test_a_finished_run_resumes_to_nothing_to_do(tmp_path: Path, checkpoint: Path) -> None:
    result = _resume_trainer(tmp_path, checkpoint).run()
    assert result.steps_done == 2 and result.checkpoint is None
    assert [r["step"] for r in result_rows(result.metrics_path)] == [0, 1]


def result_rows(path: Path) -> list[dict]:
    from areal_adv.trainer.run.metrics import read_metrics

    return read_metrics(path)
