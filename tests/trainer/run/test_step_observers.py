"""Step observers: a feature added at a phase without editing the loop, and what their declarations decide.

* an observer registered from a test module runs at its phase, sees the batch, its meta and the pipeline's
  output there, adds metrics to the row, and leaves training bit for bit unchanged;
* one that declares it reads `prox_logp` brings back the pass before the update (the update's forward no
  longer supplies them); one that changes the batch replaces what the update trains on;
* the built-in features are observers of the phases their docs name, and the registry refuses duplicates;
* with `rollout.weights_dtype` and diagnostics both on, the diagnostics' Σπ² is the sampling copy's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiny_run
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.rollout.stage_fields import behaviour_token_stats
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.trainer.run.step_observers import (
    Observation,
    Phase,
    StepObserver,
    StepServices,
    StepView,
    enabled_observers,
    logprobs_read_before_update,
    step_observer,
    unregister_step_observer,
)
from areal_adv.trainer.run.training_logprobs import logprobs_in_update
from areal_adv.utils.data import concat_batch

SMALL = ["rollout.batch_size=4", "rollout.n_samples=4", *tiny_run.TINY_MODEL, *tiny_run.QUIET, "seed=5"]
#: the update's forward supplies the proximal log-probs unless something reads them before the update
IN_UPDATE = ["actor.use_decoupled_loss=true", "actor.ppo_n_minibatches=1"]
SEEN: list[dict[str, Any]] = []


def _cfg(out: Path, *extra: str) -> ExperimentConfig:
    return load_config("preset:grpo_arith", [*SMALL, f"output.dir={out}", *extra])


class BatchWatcher(StepObserver):
    """A feature written outside the trainer: it records what it sees after the advantages."""

    name = "batch watcher (test)"
    phase = Phase.ADVANTAGES
    reads = frozenset({"advantages", "loss_mask"})

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        self.seed = cfg.seed

    def observe(self, view: StepView) -> Observation:
        SEEN.append(
            {
                "step": view.step,
                "rows": view.batch["input_ids"].shape[0],
                "groups": list(view.meta.traj_group_sizes),
                "advantages": view.data["advantages"].clone(),
                "active": view.data["loss_mask"].bool().clone(),
                "has_prox": "prox_logp" in view.batch,
            }
        )
        active = view.data["loss_mask"].bool()
        return Observation({"watched/adv_abs_mean": float(view.data["advantages"][active].abs().mean())})


class ProxReader(BatchWatcher):
    name = "prox reader (test)"
    reads = frozenset({"prox_logp"})


class HalfBatch(StepObserver):
    """Changes the batch: the update trains on the first group only."""

    name = "half batch (test)"
    phase = Phase.ADVANTAGES
    changes_batch = True

    def observe(self, view: StepView) -> Observation:
        rows = view.meta.traj_group_sizes[0]
        n = view.data["input_ids"].shape[0]
        kept = {k: v[:rows] if torch.is_tensor(v) and v.dim() and v.shape[0] == n else v for k, v in view.data.items()}
        return Observation({"half/rows": float(rows)}, data=kept)


@pytest.fixture
def registered() -> Iterator[None]:
    SEEN.clear()
    step_observer(enabled=lambda cfg: cfg.experiment_name.endswith("watched"))(BatchWatcher)
    step_observer(enabled=lambda cfg: cfg.experiment_name.endswith("prox"))(ProxReader)
    step_observer(enabled=lambda cfg: cfg.experiment_name.endswith("half"))(HalfBatch)
    try:
        yield
    finally:
        for cls in (BatchWatcher, ProxReader, HalfBatch):
            unregister_step_observer(cls.name)


def test_an_observer_added_outside_the_loop_sees_the_batch_at_its_phase(tmp_path: Path, registered: None) -> None:
    plain = Trainer(_cfg(tmp_path / "plain", "train.steps=2")).run()
    watched = Trainer(_cfg(tmp_path / "w", "train.steps=2", "experiment_name=run_watched")).run()
    assert [s["step"] for s in SEEN] == [0, 1]
    assert all(s["rows"] == 16 and s["groups"] == [4, 4, 4, 4] and not s["has_prox"] for s in SEEN)
    off, on = read_metrics(plain.metrics_path), read_metrics(watched.metrics_path)
    for a, b, seen in zip(off, on, SEEN):
        assert {k: v for k, v in a.items() if not is_wall_clock(k)} == {
            k: v for k, v in b.items() if not is_wall_clock(k) and not k.startswith("watched/")
        }
        assert b["watched/adv_abs_mean"] == pytest.approx(float(seen["advantages"][seen["active"]].abs().mean()))


def test_declared_reads_decide_where_the_proximal_log_probs_come_from(tmp_path: Path, registered: None) -> None:
    watched = _cfg(tmp_path, *IN_UPDATE, "experiment_name=x_watched")
    reader = _cfg(tmp_path, *IN_UPDATE, "experiment_name=x_prox")
    changer = _cfg(tmp_path, *IN_UPDATE, "experiment_name=x_half")
    assert BatchWatcher in enabled_observers(watched) and logprobs_in_update(watched)
    assert logprobs_read_before_update(enabled_observers(reader)) == ["prox reader (test)"]
    assert not logprobs_in_update(reader) and not logprobs_in_update(changer)
    trainer = Trainer(reader)
    assert not trainer.logprobs_in_update
    trainer.step(0)
    assert SEEN[-1]["has_prox"], "the proximal log-probs were not computed before the update"


def test_an_observer_that_changes_the_batch_replaces_what_the_update_trains_on(
    tmp_path: Path, registered: None
) -> None:
    trainer = Trainer(_cfg(tmp_path, "train.steps=1", "experiment_name=run_half"))
    out = trainer.step(0)
    assert out.data["input_ids"].shape[0] == 4 and out.metrics["half/rows"] == 4.0
    assert out.batch["input_ids"].shape[0] == 16


def test_the_registry_refuses_a_second_observer_under_a_taken_name(registered: None) -> None:
    class Other(BatchWatcher):
        pass

    with pytest.raises(ValueError, match=r"step observer 'batch watcher \(test\)' is already registered"):
        step_observer(enabled=lambda cfg: False)(Other)

    class Nameless(StepObserver):
        phase = Phase.LOGGED

    with pytest.raises(TypeError, match="expected class attributes name"):
        step_observer(enabled=lambda cfg: False)(Nameless)


def test_the_built_in_features_are_observers_of_their_phases(tmp_path: Path) -> None:
    cfg = _cfg(
        tmp_path,
        "diagnostics.estimators=[rloo]",
        "output.save_rollouts=true",
        "rollout.filter_zero_advantage=true",
        "train.debug_param_checksum=true",
    )
    found = {cls.name: cls for cls in enabled_observers(cfg)}
    assert list(found) == ["diagnostics", "saved rollouts", "zero-advantage filter", "parameter checksums"]
    assert [found[n].phase for n in found] == [Phase.ADVANTAGES] * 3 + [Phase.LOGGED]
    assert logprobs_read_before_update(list(found.values())) == [
        "diagnostics",
        "saved rollouts",
        "zero-advantage filter",
    ]
    assert enabled_observers(_cfg(tmp_path)) == []


def test_with_the_bf16_copy_the_diagnostics_sum_pi_squared_is_the_sampling_copy_s(tmp_path: Path) -> None:
    trainer = Trainer(_cfg(tmp_path, "rollout.weights_dtype=bfloat16", "diagnostics.estimators=[rloo]"))
    dicts, _ = trainer.rollout()
    batch, _ = concat_batch(dicts)
    batch = trainer.prepare(batch)
    batch.pop("sum_pi_squared", None)
    observer = trainer.observers.find("diagnostics")
    got = observer.diagnostics.computed_fields(batch)["sum_pi_squared"]  # type: ignore[union-attr]
    ids, mask, temp = batch["input_ids"], batch["attention_mask"], trainer.cfg.sampling_temperature

    def spp(model: torch.nn.Module) -> torch.Tensor:
        with trainer.engine.autocast():
            return behaviour_token_stats(model, ids, mask, temp, ("sum_pi_squared",), rows_per_chunk=16)[
                "sum_pi_squared"
            ]

    assert trainer.engine.sampled_by is trainer.sampler and trainer.sampler is not trainer.engine.model
    assert torch.equal(got, spp(trainer.sampler))
    assert not torch.equal(got, spp(trainer.engine.model)), "the bf16 copy and float32 give the same Σπ²"
