"""Measured max differences of every integration equality (docs/integrations.md).

Usage (needs the verl and trl extras, i.e. the test set-up):
    .venv/bin/python -m bench.peers.integrations_equality              # 200 verl batches, TRL runs; ~2-3 min
    .venv/bin/python -m bench.peers.integrations_equality --batches 50 --no-trl

verl: random DataProtos from tests/integrations/verl_batches.py (groups of 2-6,
multi-turn masks, interleaved uids), through verl 0.9.1's own `compute_advantage`;
the max |ours - verl| over every response token of every batch. Whitened
estimators skip batches whose token variance is below 1e-3 (the eps placements
differ there, docs/algorithms.md) and count them.
TRL: `AReaLGRPOTrainer` 2-step runs on the tiny local model of tests/integrations/trl_setup.py;
the max |ours - TRL's own| over the generated tokens of every generation batch.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from bench import use_test_helpers

ROOT = Path(__file__).resolve().parents[2]
use_test_helpers("integrations")

import torch  # noqa: E402
import verl_batches as vb  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402

from areal_adv.integrations import verl as areal_verl  # noqa: E402

PRESETS = ROOT / "examples" / "presets"
VERL = areal_verl.verl_compute_advantage()
CASES = {
    "grpo": ((), "grpo", {}, False),
    "dr_grpo": ((), "grpo", {"norm_adv_by_std_in_grpo": False}, False),
    "rloo": ((), "rloo", {}, False),
    "reinforce_plus_plus": (("actor.kl_ctl=0.0", "actor.adv_norm.std_unbiased=true"), "reinforce_plus_plus", {}, True),
    "reinforce_plus_plus_baseline": (("actor.adv_norm.std_unbiased=true",), "reinforce_plus_plus_baseline", {}, True),
    "opo": ((), "opo", {}, False),
    "remax": (("actor.kl_ctl=0.0",), "remax", {}, False),
}


def algo(preset: str, *overrides: str) -> object:
    return OmegaConf.create(
        {
            "gamma": 1.0,
            "lam": 1.0,
            "use_pf_ppo": False,
            "areal_config": str(PRESETS / f"{preset}.yaml"),
            "areal_overrides": list(overrides),
        }
    )


def masked_max(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a.double() - b.double()) * mask).abs().max())


def low_variance(values: torch.Tensor, mask: torch.Tensor) -> bool:
    var = float(values[mask.bool()].double().var())
    return 0 < var < 1e-3


def random_sizes(rng: random.Random) -> list[int]:
    return [rng.randint(2, 6) for _ in range(rng.randint(1, 4))]


def verl_registry(n: int) -> None:
    for preset, (overrides, builtin, kwargs, whitened) in CASES.items():
        rng, worst, skipped = random.Random(0), 0.0, 0
        for seed in range(n):
            batch = vb.make_batch(seed, random_sizes(rng), binary=seed % 2 == 0)
            keys = ["response_mask", "token_level_rewards"]
            if preset == "remax":
                batch.tensors["reward_baselines"] = torch.rand(batch.uid.shape[0])
                keys.append("reward_baselines")
            cfg = algo(preset, *overrides)
            theirs = VERL(batch.proto(*keys), adv_estimator=builtin, config=cfg, **kwargs).batch
            ours = VERL(batch.proto(*keys), adv_estimator="areal", config=cfg, **kwargs).batch
            mask = batch.tensors["response_mask"]
            if whitened and low_variance(ours["returns"], mask):
                skipped += 1
                continue
            worst = max(worst, masked_max(ours["advantages"], theirs["advantages"], mask))
        print(f"verl registry  areal[{preset}] vs {builtin:28s} max |diff| {worst:.3e}  ({n - skipped} batches)")


def verl_ppo(n: int) -> None:
    rng, worst_adv, worst_ret, skipped = random.Random(1), 0.0, 0.0, 0
    cfg = algo("ppo")
    for seed in range(n):
        batch = vb.make_batch(seed, random_sizes(rng))
        reference, _ = ray_trainer.apply_kl_penalty(batch.proto(), core_algos.FixedKLController(kl_coef=0.001), "kl")
        theirs = VERL(reference, adv_estimator="gae", gamma=1.0, lam=0.95, config=cfg).batch
        mask = batch.tensors["response_mask"]
        if low_variance(theirs["returns"] - batch.tensors["values"], mask):
            skipped += 1
            continue
        ours = areal_verl.compute_advantage(batch.proto(), adv_estimator="areal", config=cfg).batch
        worst_adv = max(worst_adv, masked_max(ours["advantages"], theirs["advantages"], mask))
        worst_ret = max(worst_ret, masked_max(ours["returns"], theirs["returns"], mask))
    print(
        f"verl wrapper   areal[ppo] vs gae + apply_kl_penalty       max |diff| advantages {worst_adv:.3e}, "
        f"returns {worst_ret:.3e}  ({n - skipped} batches)"
    )


def verl_token_baseline(n: int) -> None:
    """The wrapper on DataProtos with verl's sum_pi_squared (and rollout_is_weights) vs verl's own OTB / TIR-OTB."""
    import test_verl_token_baseline as tv

    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        rng, worst = random.Random(2), 0.0
        for seed in range(n):
            batch = tv.with_sum_pi_squared(
                vb.make_batch(seed, [rng.randint(1, 6) for _ in range(rng.randint(1, 4))]),
                seed,
                is_weights=seed % 2 == 0,
            )
            keys = [
                k
                for k in (
                    "response_mask",
                    "token_level_rewards",
                    "attention_mask",
                    "old_log_probs",
                    "sum_pi_squared",
                    "rollout_is_weights",
                )
                if k in batch.tensors
            ]
            theirs = VERL(batch.proto(*keys), adv_estimator=name, config=None).batch
            ours = areal_verl.compute_advantage(batch.proto(*keys), adv_estimator="areal", config=algo(name)).batch
            worst = max(worst, masked_max(ours["advantages"], theirs["advantages"], batch.tensors["response_mask"]))
        print(f"verl wrapper   areal[{name}] vs verl's own {'':4s} max |diff| {worst:.3e}  ({n} batches)")


def trl_runs() -> None:
    import trl_setup as ts

    yaml = Path(tempfile.mkdtemp()) / "batch.yaml"
    yaml.write_text("""
actor:
  kl_ctl: 0.0
  reward_norm: {mean_level: group, std_level: null}
  adv_norm: null
  advantage:
    outcome_reward_shaping: {implementation: areal_adv.integrations.trl.stages.batch_std_scale, kwargs: {eps: 1.0e-4}}
    estimator: {implementation: reinforce_return}
""")
    model = ts.build_model(Path(tempfile.mkdtemp()))
    modes = {
        "group": (PRESETS / "grpo.yaml", ("actor.reward_norm.eps=1.0e-4",)),
        "group (grpo preset as is, eps 1e-6)": (PRESETS / "grpo.yaml", ()),
        "none": (PRESETS / "dr_grpo.yaml", ()),
        "batch": (yaml, ()),
    }
    for label, (path, overrides) in modes.items():
        scale = label.split()[0]
        trainer = ts.make_trainer(model, Path(tempfile.mkdtemp()), str(path), overrides=overrides, scale_rewards=scale)
        trainer.train()
        worst = max(
            masked_max(r["ours"], r["trl"][:, None].expand_as(r["ours"]), r["completion_mask"]) for r in trainer.records
        )
        print(f"trl  scale_rewards={label:38s} max |ours - TRL| {worst:.3e}  ({len(trainer.records)} batches)")


def trl_token_baseline() -> None:
    """OTB / TIR-OTB through AReaLGRPOTrainer vs verl's own function on each gathered generation batch."""
    import trl_setup as ts

    model = ts.build_model(Path(tempfile.mkdtemp()))
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        trainer = ts.make_trainer(model, Path(tempfile.mkdtemp()), str(PRESETS / f"{name}.yaml"), steps=4)
        trainer.train()
        worst = 0.0
        for record in trainer.records:
            g = record["gathered"]
            keep = ~torch.isnan(g.rewards)
            mask = g.loss_mask[keep]
            rewards = torch.zeros_like(mask)
            rewards[torch.arange(mask.shape[0]), (mask * torch.arange(1, mask.shape[1] + 1)).argmax(dim=1)] = g.rewards[
                keep
            ]
            theirs, _ = core_algos.get_adv_estimator_fn(name)(
                token_level_rewards=rewards,
                response_mask=mask,
                index=(keep.nonzero()[:, 0] // g.num_generations).numpy(),
                old_log_probs=g.logprobs[keep],
                sum_pi_squared=g.sum_pi_squared[keep],
                rollout_is_weights=None,
            )
            worst = max(worst, masked_max(record["ours"][keep], theirs, mask))
        print(f"trl  {name:44s} max |ours - verl's function| {worst:.3e}  ({len(trainer.records)} batches)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--no-trl", action="store_true")
    args = parser.parse_args()
    verl_registry(args.batches)
    verl_ppo(args.batches)
    verl_token_baseline(args.batches)
    if not args.no_trl:
        trl_runs()
        trl_token_baseline()


if __name__ == "__main__":
    main()
