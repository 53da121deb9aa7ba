"""Several reward functions in the trainer: rewards [B, K] named by `reward_keys`, end to end.

* the rollout exports each component and its weight (the task's score and every
  reward function), a single component stays a plain [B] reward;
* identity shaping + reward scaling (the GRPO preset) give exactly the advantages
  of today's [B] batch holding the weighted sum;
* the GDPO preset trains two steps with two reward functions, and its advantages
  equal verl's definition (tests/trainer/ppo/estimators_reference.gdpo_verl) on
  the step's components and weights; with 2 gloo ranks (torchrun) it trains with
  the ranks' parameters checked equal after every update.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import torch
from dist_launch import clean_env, run_bounded, warm_torchrun

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT / "tests" / "trainer" / "ppo") not in sys.path:  # the plain-loop references
    sys.path.insert(0, str(ROOT / "tests" / "trainer" / "ppo"))
import tiny_run  # noqa: E402
from estimators_reference import gdpo_verl  # noqa: E402

PRESETS = ROOT / "examples" / "presets"
TINY = [
    "rollout.batch_size=3",
    "rollout.n_samples=4",
    *tiny_run.TINY_MODEL,
    *tiny_run.QUIET,
    "train.num_threads=1",
    "actor.max_new_tokens=4",
    "eval.every=null",
]
# Two reward functions on top of the arithmetic task's own score: three named components.
TWO_FUNCTIONS = (
    "reward=[{implementation: plugins.graded_rewards.char_length, weight: 0.5},"
    " {implementation: plugins.graded_rewards.digit_share, weight: 2.0}]"
)


def _recording_trainer(cfg) -> tuple[Trainer, dict]:
    trainer, seen = Trainer(cfg), {}
    compute = trainer.compute_advantages

    def record(batch, meta):
        seen["batch"], seen["meta"] = dict(batch), meta
        return compute(batch, meta)

    trainer.compute_advantages = record
    return trainer, seen


def test_one_component_keeps_a_plain_reward(tmp_path):
    trainer = Trainer(load_config(PRESETS / "grpo.yaml", [*TINY, f"output.dir={tmp_path}"]))
    batch = trainer.step(0).batch
    assert batch["rewards"].shape == (12,) and "reward_keys" not in batch


def test_identity_shaping_sees_the_weighted_sum_exactly(tmp_path):
    cfg = load_config(PRESETS / "grpo.yaml", [*TINY, f"output.dir={tmp_path}", TWO_FUNCTIONS])
    trainer, seen = _recording_trainer(cfg)
    out = trainer.step(0)
    names, weights = trainer.task.rewards.names, trainer.task.rewards.weights
    assert len(names) == 3 and out.batch["rewards"].shape == (12, 3)
    assert seen["meta"].reward_keys == names and seen["meta"].reward_weights == weights
    for rec, row in zip(out.records, out.batch["rewards"].tolist()):
        assert row == [rec.rewards[n] for n in names]
    # today's [B] batch: the weighted sum, no names
    total = (out.batch["rewards"].double() @ torch.tensor(weights, dtype=torch.float64)).float()
    scalar = {**seen["batch"], "rewards": total}
    scalar.pop("reward_keys", None)
    scalar.pop("reward_weights", None)
    meta = dataclasses.replace(seen["meta"], reward_keys=None, reward_weights=None)
    want = PPOActor(cfg.actor).compute_advantages(scalar, meta)
    torch.testing.assert_close(out.data["rewards"], want["rewards"], rtol=0, atol=1e-6)
    torch.testing.assert_close(out.data["advantages"], want["advantages"], rtol=0, atol=1e-6)


def test_gdpo_preset_with_two_reward_functions_trains_and_equals_verls_definition(tmp_path):
    # 8 prompts x 4 samples, so that the seeded step's completions differ in both graded components
    # (checked below: the comparison with the blind advantage needs it)
    overrides = [*TINY, "rollout.batch_size=8", f"output.dir={tmp_path}", "train.steps=2", TWO_FUNCTIONS]
    cfg = load_config(PRESETS / "gdpo.yaml", overrides)
    trainer, seen = _recording_trainer(cfg)
    result = trainer.run()
    rows = read_metrics(result.metrics_path)
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert math.isfinite(r["policy_loss"]) and math.isfinite(r["adv_mean"])
        assert {"reward/char_length", "reward/digit_share"} <= set(r)
    out = trainer.step(2)
    comps = out.batch["rewards"].double().tolist()
    weights = list(trainer.task.rewards.weights)
    index = seen["meta"].row_group_index().tolist()
    mask = out.data["loss_mask"].bool()
    lengths = mask.sum(-1).tolist()
    want_rows = gdpo_verl(comps, weights, index, lengths, eps=1e-6)
    want = torch.zeros(mask.shape, dtype=torch.float64)
    for b, values in enumerate(want_rows):
        want[b, mask[b]] = torch.tensor(values, dtype=torch.float64)
    torch.testing.assert_close(out.data["advantages"].double(), want, rtol=1e-5, atol=1e-5)
    # the components matter: GRPO on the weighted sum, then whitened, is a different advantage
    total = [sum(w * c for w, c in zip(weights, row)) for row in comps]
    blind = torch.zeros_like(want)
    for b, values in enumerate(gdpo_verl([[t] for t in total], [1.0], index, lengths, eps=1e-6)):
        blind[b, mask[b]] = torch.tensor(values, dtype=torch.float64)
    assert len({tuple(r[1:]) for r in comps}) > 2  # the seeded step's graded components differ between samples
    assert not torch.allclose(blind, want, atol=1e-4)


def test_gdpo_with_two_reward_functions_on_two_ranks(tmp_path):
    cmd = [
        *warm_torchrun(),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(PRESETS / "gdpo.yaml"),
        *TINY,
        "rollout.batch_size=4",
        "train.steps=2",
        "train.dist_timeout_s=60",
        "train.debug_param_checksum=true",
        TWO_FUNCTIONS,
        f"output.dir={tmp_path}",
    ]
    [(code, out, err)] = run_bounded([cmd], [clean_env()], 150, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    rows = read_metrics(tmp_path / "gdpo" / "trial0" / "metrics.jsonl")  # a file that names no run: its stem
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert math.isfinite(r["adv_mean"]) and {"reward/char_length", "reward/digit_share"} <= set(r)
