"""`rollout.weights_dtype: bfloat16`: the sampling copy, its mismatch metrics and the decoupled correction.

* the engine's copy is a cast of the trained weights, and after every update equals a fresh cast;
* `rollout_mismatch/*` equal a plain per-token loop over the step's batch (verl's k1 and k3 KL, the
  largest behaviour weight, the share above `actor.behav_imp_weight_cap`);
* the decoupled loss's weights equal a plain loop written from AReaL's `ppo_actor_loss_fn`;
* checkpoints hold the trained (float32) weights, and a resumed run equals the uninterrupted one;
* without the option the rollout model is the trained module and no mismatch is logged.
The 2-rank (DDP, FSDP2) runs are in tests/trainer/parallel/test_distributed_rollout_dtype.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tiny_run
import torch

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.model import build_policy
from areal_adv.trainer.parallel.engine import PolicyEngine, cast_copy
from areal_adv.trainer.ppo.training.loss import ppo_policy_loss
from areal_adv.trainer.ppo.training.rollout_mismatch import mismatch_metrics, mismatch_sums
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
]
BF16 = ["rollout.weights_dtype=bfloat16"]
DECOUPLED = ["actor.use_decoupled_loss=true", "actor.behav_imp_weight_cap=1.001"]
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
MODEL = ModelConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64)
IDS = torch.tensor([[1, 5, 6, 7, 8], [1, 9, 10, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def _trainer(tmp_path: Path, *extra: str) -> Trainer:
    return Trainer(load_config(DEFAULT, [*TINY, f"output.dir={tmp_path}", *extra]))


def _is_fresh_cast(copy: torch.nn.Module, trained: torch.nn.Module) -> bool:
    pairs = list(zip(copy.parameters(), trained.parameters(), strict=True))
    return all(c.dtype == torch.bfloat16 and torch.equal(c, t.detach().to(torch.bfloat16)) for c, t in pairs)


def test_the_engine_copy_is_a_cast_refreshed_after_each_update() -> None:
    torch.manual_seed(0)
    eng = PolicyEngine(build_policy(MODEL, 24, SPECIAL), lr=1e-2, rollout_dtype=torch.bfloat16)
    assert eng.sampler is not eng.model and eng.policy is eng.model
    assert _is_fresh_cast(eng.sampler, eng.model)
    assert all(p.dtype == torch.float32 for p in eng.model.parameters())
    assert not any(p.requires_grad for p in eng.sampler.parameters())
    # buffers (rotary frequencies) keep their dtype: only the weights are rounded
    assert [b.dtype for b in eng.sampler.buffers()] == [b.dtype for b in eng.model.buffers()]
    before = [p.clone() for p in eng.sampler.parameters()]
    for _ in range(2):
        logp, _ = eng.forward_logprobs(IDS, MASK, 1.0)
        eng.optimizer_step(-(logp * MASK).sum() / MASK.sum())
        assert not _is_fresh_cast(eng.sampler, eng.model)  # stale until the refresh
        eng.sync_copies()
        assert _is_fresh_cast(eng.sampler, eng.model)
    assert any(not torch.equal(a, b) for a, b in zip(before, eng.sampler.parameters()))
    assert eng.checkpoint_model() is eng.model  # checkpoints hold the float32 weights


def test_cast_copy_leaves_the_model_and_its_gradients_alone() -> None:
    torch.manual_seed(0)
    model = build_policy(MODEL, 24, SPECIAL)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    copy = cast_copy(model, torch.bfloat16)
    assert all(torch.equal(state[k], v) and v.dtype == state[k].dtype for k, v in model.state_dict().items())
    assert all(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        logits = copy(input_ids=IDS, attention_mask=MASK).logits
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits).all()


def _plain_mismatch(behaviour: list[float], training: list[float], cap: float) -> dict[str, float]:
    """verl's compute_offpolicy_metrics (kl, k3_kl) and the weight statistics, one token at a time."""
    n, kl, k3, above, largest = 0, 0.0, 0.0, 0, 0.0
    for b, t in zip(behaviour, training):
        w = math.exp(t - b)
        n, kl, k3 = n + 1, kl + (b - t), k3 + (w - (t - b) - 1.0)
        above, largest = above + (w > cap), max(largest, w)
    return {"kl": kl / n, "k3_kl": k3 / n, "imp_weight_max": largest, "capped_frac": above / n}


def test_mismatch_metrics_equal_a_plain_loop_and_ignore_masked_positions() -> None:
    gen = torch.Generator().manual_seed(3)
    behaviour = -3.0 + torch.randn(4, 9, generator=gen)
    training = behaviour + 0.2 * torch.randn(4, 9, generator=gen)
    mask = (torch.rand(4, 9, generator=gen) < 0.6).long()
    training[mask == 0] = float("nan")  # never read
    got = mismatch_metrics(mismatch_sums(behaviour, training, mask, 1.1), 1.1)
    keep = mask.bool()
    expected = _plain_mismatch(behaviour[keep].tolist(), training[keep].tolist(), 1.1)
    assert got.keys() == {f"rollout_mismatch/{k}" for k in expected}
    for key, value in expected.items():
        assert got[f"rollout_mismatch/{key}"] == pytest.approx(value, rel=1e-6, abs=1e-9)
    assert 0.0 < got["rollout_mismatch/capped_frac"] < 1.0
    assert "rollout_mismatch/capped_frac" not in mismatch_metrics(mismatch_sums(behaviour, training, mask, None), None)


def _areal_decoupled_loss(logp, prox, old, adv, mask, eps_clip: float, cap: float) -> float:
    """AReaL's `ppo_actor_loss_fn` (areal/utils/functional.py) with proximal log-probs, one token at a time.

    ratio = exp(logp − prox); pg = max(−A·ratio, −A·clip(ratio, 1 ± ε)); behaviour weight
    w = exp(prox − old), 0 where w > cap; loss = Σ pg·w / (active tokens).
    """
    total, n = 0.0, 0
    for lp, px, od, a, m in zip(logp, prox, old, adv, mask):
        if not m:
            continue
        n += 1
        ratio = math.exp(lp - px)
        pg = max(-a * ratio, -a * min(max(ratio, 1.0 - eps_clip), 1.0 + eps_clip))
        w = math.exp(px - od)
        total += pg * (w if w <= cap else 0.0)
    return total / n


def test_decoupled_weights_equal_areal_formula() -> None:
    gen = torch.Generator().manual_seed(5)
    old = -2.0 + torch.randn(3, 12, generator=gen)
    prox = old + 0.3 * torch.randn(3, 12, generator=gen)
    logp = prox + 0.3 * torch.randn(3, 12, generator=gen)
    adv = torch.randn(3, 12, generator=gen)
    mask = (torch.rand(3, 12, generator=gen) < 0.7).long()
    loss, stats = ppo_policy_loss(logp, prox, old, adv, mask, eps_clip=0.2, behav_imp_weight_cap=1.2, decoupled=True)
    flat = [t.reshape(-1).tolist() for t in (logp, prox, old, adv, mask)]
    assert loss.item() == pytest.approx(_areal_decoupled_loss(*flat, eps_clip=0.2, cap=1.2), rel=1e-5)
    kept = ((prox - old).exp() <= 1.2) & mask.bool()
    assert stats.behav_mask_frac == pytest.approx(float(kept.sum() / mask.sum()))
    assert 0.0 < stats.behav_mask_frac < 1.0  # some tokens dropped, some kept


def test_a_step_logs_the_mismatch_of_its_batch_and_refreshes_the_copy(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "train.steps=2", *BF16, *DECOUPLED)
    assert trainer.sampler is trainer.engine.sampler and trainer.policy is trainer.engine.model
    for step in range(2):
        out = trainer.step(step)
        batch, row = out.batch, out.metrics
        assert _is_fresh_cast(trainer.sampler, trainer.policy)
        # aligned: the training log-prob of token t+1 sits at t; the rollout's at t+1
        sampled = batch["loss_mask"][:, 1:].bool()
        behaviour, training = batch["logprobs"][:, 1:][sampled], batch["prox_logp"][:, :-1][sampled]
        expected = _plain_mismatch(behaviour.tolist(), training.tolist(), 1.001)
        for key, value in expected.items():
            assert math.isfinite(row[f"rollout_mismatch/{key}"])
            assert row[f"rollout_mismatch/{key}"] == pytest.approx(value, rel=1e-6, abs=1e-9)
        assert row["rollout_mismatch/imp_weight_max"] != 1.0  # the bf16 copy does differ from the float32 policy
        assert math.isfinite(row["policy_loss"]) and math.isfinite(row["grad_norm"])


def test_without_the_correction_the_mismatch_is_measured_from_a_separate_pass(tmp_path: Path) -> None:
    out = _trainer(tmp_path, "train.steps=1", *BF16).step(0)
    assert "prox_logp" not in out.batch
    keys = {k for k in out.metrics if k.startswith("rollout_mismatch/")}
    assert keys == {"rollout_mismatch/kl", "rollout_mismatch/k3_kl", "rollout_mismatch/imp_weight_max"}
    assert all(math.isfinite(out.metrics[k]) for k in keys)


def test_off_by_default_the_trained_module_samples(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "train.steps=1")
    assert trainer.engine.rollout_dtype is None
    assert trainer.sampler is trainer.policy is trainer.engine.model is trainer.engine.sampler
    assert not any(k.startswith("rollout_mismatch/") for k in trainer.step(0).metrics)


def test_checkpoints_hold_float32_weights_and_resume_exactly(tmp_path: Path) -> None:
    common = [*BF16, *DECOUPLED, "train.save_every=1", "train.keep_last=null"]
    whole = _trainer(tmp_path / "a", "train.steps=3", *common).run()
    _trainer(tmp_path / "b", "train.steps=1", *common).run()
    resumed_trainer = _trainer(tmp_path / "b", "train.steps=3", "train.resume=auto", *common)
    resumed = resumed_trainer.run()
    assert _is_fresh_cast(resumed_trainer.sampler, resumed_trainer.policy)
    rows = [[(k, v) for k, v in r.items() if not is_wall_clock(k)] for r in read_metrics(resumed.metrics_path)]
    expected = [[(k, v) for k, v in r.items() if not is_wall_clock(k)] for r in read_metrics(whole.metrics_path)]
    assert rows == expected
    from safetensors.torch import load_file

    a, b = (load_file(str(r.checkpoint / "policy" / "model.safetensors")) for r in (whole, resumed))
    assert a.keys() == b.keys() and all(a[k].dtype == torch.float32 and torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "rollout.weights_dtype=float16",
            r"rollout\.weights_dtype: got 'float16', expected one of \[None, 'bfloat16'\]",
        ),
        ("model.dtype=bfloat16", r"rollout\.weights_dtype: got 'bfloat16', but model\.dtype is 'bfloat16' already"),
    ],
)
def test_config_errors_name_the_field(override: str, message: str) -> None:
    extra = [override] if override.startswith("rollout.") else [*BF16, override]
    with pytest.raises(ConfigError, match=message):
        load_config(DEFAULT, extra)


@pytest.mark.parametrize(
    "extra",
    [
        ("model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}", "train.lr=1e-2"),
        ("model.mixed_precision=bf16",),
    ],
    ids=["lora", "bf16-autocast"],
)
def test_the_copy_follows_a_lora_policy_and_bf16_autocast(tmp_path: Path, extra: tuple[str, ...]) -> None:
    trainer = _trainer(tmp_path, "train.steps=2", *BF16, *DECOUPLED, *extra)
    before = [p.clone() for p in trainer.sampler.parameters()]
    for step in range(2):
        row = trainer.step(step).metrics
        assert all(math.isfinite(row[f"rollout_mismatch/{k}"]) for k in ("kl", "k3_kl", "imp_weight_max"))
    assert _is_fresh_cast(trainer.sampler, trainer.policy)
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.sampler.parameters()))


def test_a_run_with_the_copy_exports_float32_weights_that_generate(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from areal_adv.trainer.run.export import export_run

    trainer = _trainer(tmp_path, "train.steps=1", *BF16, *DECOUPLED)
    result = trainer.run()
    export_run(result.run_dir, tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model", local_files_only=True)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    trained = trainer.policy.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in model.state_dict().items())  # the trained weights
    out = model.generate(input_ids=IDS[:1, :3], max_new_tokens=3, do_sample=False)
    assert out.shape[0] == 1 and out.shape[1] > 3  # generated at least one token


@pytest.mark.parametrize("correction", [DECOUPLED, []], ids=["decoupled", "metrics-only"])
def test_one_minibatch_takes_the_log_probs_from_the_update_forward(tmp_path: Path, correction: list[str]) -> None:
    """With one optimiser step per batch the pass before the update is skipped, and nothing else changes."""
    extra = ["train.steps=2", "actor.ppo_n_minibatches=1", *BF16, *correction]
    in_update, separate = _trainer(tmp_path / "a", *extra), _trainer(tmp_path / "b", *extra)
    assert in_update.logprobs_in_update
    initial = [p.detach().clone() for p in in_update.policy.parameters()]
    separate.logprobs_in_update = False  # the same run with the pass before the update
    passes = []
    in_update.engine.compute_logprobs = lambda *a, **k: passes.append(1)  # type: ignore[method-assign]
    for step in range(2):
        got, expected = in_update.step(step), separate.step(step)
        assert torch.equal(got.batch["input_ids"], expected.batch["input_ids"])  # the same rollout
        assert "prox_logp" not in got.batch
        assert ("prox_logp" in expected.batch) == bool(correction)
        assert got.metrics["grad_norm"] > 0
        for key, value in expected.metrics.items():
            if key.startswith(("rollout_mismatch/", "policy_loss", "grad_norm", "importance_weight")):
                assert got.metrics[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key
        assert {k for k in got.metrics if k.startswith("rollout_mismatch/")} == {
            k for k in expected.metrics if k.startswith("rollout_mismatch/")
        }
    assert passes == []  # no forward before the update
    worst = max((a - b).abs().max().item() for a, b in zip(in_update.policy.parameters(), separate.policy.parameters()))
    moved = max((a - b).abs().max().item() for a, b in zip(in_update.policy.parameters(), initial))
    assert worst <= 1e-3 * moved, (worst, moved)
    assert _is_fresh_cast(in_update.sampler, in_update.policy)
