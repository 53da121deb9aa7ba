"""Measured max differences of the 2025-26 estimators against their references (docs/algorithms.md).

Usage (needs the test set-up: verl for the GDPO and optimal-token-baseline comparisons):
    .venv/bin/python -m bench.peers.estimators_equality                 # 200 random cases per method, ~2-4 min
    .venv/bin/python -m bench.peers.estimators_equality --cases 50

For every method: random batches like the tests' (variable group sizes, ragged
multi-turn rows, recurring prompts and anchor states, one row per episode and one
row per turn), our pipeline output against the plain-loop reference of
tests/trainer/ppo/estimators_reference.py or peer_reference.py (and, for GDPO and
OTB / TIR-OTB, the real verl 0.9.1 functions through its `compute_advantage`); prints the largest |ours - reference| over
every compared value, and how many cases were skipped (whitening eps range).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from bench import use_test_helpers

ROOT = Path(__file__).resolve().parents[2]
use_test_helpers("trainer/ppo", "integrations")

import estimators_reference as eref  # noqa: E402
import numpy as np  # noqa: E402
import peer_reference as ref  # noqa: E402
import torch  # noqa: E402
from episode_factory import batch_of, make_episode_groups, token_positions  # noqa: E402

from areal_adv.api.cli_args import NormConfig, PPOActorConfig, load_config  # noqa: E402
from areal_adv.trainer.ppo.actor import PPOActor  # noqa: E402
from areal_adv.utils.data import concat_batch  # noqa: E402

PRESETS = ROOT / "examples" / "presets"


def _sizes(rng: random.Random, low: int = 2) -> list[int]:
    return [rng.randint(low, 8) for _ in range(rng.randint(1, 5))]


def gdpo_verl(cases: int) -> tuple[float, int]:
    """Our preset vs the real verl function (the integration test's layout)."""
    import test_verl_gdpo as tv
    import verl_batches as vb

    worst, skipped = 0.0, 0
    for seed in range(cases):
        rng = random.Random(seed)
        batch = vb.make_batch(seed, [rng.randint(2, 6) for _ in range(rng.randint(1, 4))], binary=rng.random() < 0.5)
        k = rng.randint(1, 4)
        scores = tv.scores_for(batch, k, seed, rng.random() < 0.5)
        mask = batch.tensors["response_mask"]
        if not tv.whitenable(tv.ours(batch, scores, ["actor.adv_norm=null"]), mask):
            skipped += 1
            continue
        theirs = tv.verl_gdpo(batch, scores, list(tv.KEYS[:k]), None)
        worst = max(worst, float(((tv.ours(batch, scores, []).double() - theirs.double()) * mask).abs().max()))
    return worst, skipped


def token_baseline_verl(cases: int, name: str) -> float:
    """OTB / TIR-OTB preset vs verl's own function (the integration test's layout), IS weights in every other case."""
    import test_verl_token_baseline as tv

    worst = 0.0
    for seed in range(cases):
        rng = random.Random(seed)
        groups = tv.otb_groups(seed, _sizes(rng, 1), binary=seed % 2 == 0, is_weights=seed % 4 < 2)
        worst = max(worst, tv.max_difference(name, groups))
    return worst


def maxrl(cases: int) -> tuple[float, float]:
    """The MaxRL preset vs SkyRL's definition, groups of 1-8 (singletons included).

    Returns the max |ours - reference| over 0/1-reward batches, and over
    Gaussian-reward batches the max |ours - reference| / max(1, |reference|):
    there a group mean near 0 makes the advantage large (float32 output).
    """
    actor = PPOActor(load_config(PRESETS / "maxrl.yaml").actor)
    worst_binary, worst_relative = 0.0, 0.0
    for seed in range(cases):
        rng = random.Random(seed)
        binary = seed % 2 == 0
        groups = ref.make_peer_groups(seed, _sizes(rng, 1), binary=binary)
        resp = ref.responses(*concat_batch(groups))
        out = actor.compute_advantages(groups)["advantages"].double()
        for b, value in enumerate(ref.maxrl(resp.scores, resp.index)):
            if not resp.actions[b]:
                continue
            diff = float((out[b, resp.actions[b]] - value).abs().max())
            if binary:
                worst_binary = max(worst_binary, diff)
            else:
                worst_relative = max(worst_relative, diff / max(1.0, abs(value)))
    return worst_binary, worst_relative


def _krpo(cases: int, carry_over: bool) -> float:
    worst = 0.0
    cfg = PPOActorConfig(
        kl_ctl=0.0,
        reward_clip=1e9,
        reward_norm=None,
        adv_norm=None,
        advantage={
            "outcome_reward_shaping": {"implementation": "krpo", "kwargs": {"carry_over": carry_over}},
            "estimator": {"implementation": "reinforce_return"},
        },
    )
    for seed in range(cases):
        rng = random.Random(seed)
        actor, persistent = PPOActor(cfg), eref.PersistentKRPO()
        for step in range(3 if carry_over else 1):
            sizes = _sizes(rng, 1)
            keys = [rng.randint(0, 3) for _ in sizes]
            groups = ref.make_peer_groups(
                1000 * seed + step, sizes, binary=rng.random() < 0.5, split=rng.random() < 0.5
            )
            for g, key in zip(groups, keys):
                g["prompt_keys"] = torch.full((g["input_ids"].shape[0],), key, dtype=torch.long)
            batch, meta = concat_batch(groups)
            r = ref.rollouts(batch, meta)
            per_group = [[] for _ in sizes]
            for gi, reward in zip(r.index, r.rewards):
                per_group[gi].append(reward)
            expected = (
                persistent.step(list(zip(keys, per_group)))
                if carry_over
                else [eref.krpo_group(p, eref.KalmanFilter()) for p in per_group]
            )
            out = actor.compute_advantages(batch, meta)["rewards"].double()
            flat = [v for p in expected for v in p]
            for value, rows in zip(flat, r.rows):
                worst = max(worst, float((out[rows] - value).abs().max()))
    return worst


def spo(cases: int) -> float:
    worst = 0.0
    for seed in range(cases):
        rng = random.Random(seed)
        kl = rng.random() < 0.5
        actor = PPOActor(
            load_config(
                PRESETS / "spo.yaml",
                ["actor.advantage.outcome_reward_shaping.kwargs.rho_mode=" + ("kl" if kl else "constant")],
            ).actor
        )
        tracker = eref.SPOTracker()
        for step in range(4):
            keys = [rng.randint(0, 5) for _ in range(rng.randint(1, 8))]
            groups = ref.make_peer_groups(1000 * seed + step, [1] * len(keys), binary=True)
            for g, key in zip(groups, keys):
                g["prompt_keys"] = torch.tensor([key])
            batch, meta = concat_batch(groups)
            drift = torch.tensor(np.random.default_rng(seed + step).random(len(keys)) * 0.2)
            if kl:
                batch["policy_drift"] = drift
            rhos = [eref.spo_rho_from_drift(float(d)) for d in drift] if kl else [0.875] * len(keys)
            expected = tracker.step(keys, [float(x) for x in batch["rewards"]], rhos)
            out = actor.compute_advantages(batch, meta)["rewards"].double()
            worst = max(worst, float((out - torch.tensor(expected, dtype=torch.float64)).abs().max()))
    return worst


def _turns(out: torch.Tensor, groups, expected, split: bool) -> float:
    worst = 0.0
    for g, per_group in enumerate(token_positions(groups, split=split)):
        for e, per_episode in enumerate(per_group):
            for k, tokens in enumerate(per_episode):
                for row, col in tokens:
                    worst = max(worst, abs(float(out[row, col]) - expected[g][e][k]))
    return worst


def step_credit(cases: int, estimator: str) -> float:
    worst = 0.0
    for seed in range(cases):
        rng = random.Random(seed)
        groups = make_episode_groups(seed, _sizes(rng), binary=rng.random() < 0.5, max_turns=4)
        split = rng.random() < 0.5
        batch, meta = batch_of(groups, split=split)
        if estimator == "gigpo":
            gamma, mode = rng.choice([1.0, 0.95, 0.5]), rng.choice(["mean_norm", "mean_std_norm"])
            stats = rng.choice(["steps", "episodes"])
            kwargs = {"step_discount": gamma, "mode": mode, "episode_stats": stats}
            expected = eref.gigpo(
                [
                    [
                        {
                            "rewards": [t.reward for t in ep.turns[:-1]] + [ep.turns[-1].reward + ep.outcome],
                            "anchors": [t.anchor for t in ep.turns],
                        }
                        for ep in eps
                    ]
                    for eps in groups
                ],
                gamma,
                1.0,
                mode,
                cross_steps=stats == "steps",
            )
        else:
            credit = rng.choice(["to_go", "own"])
            kwargs = {"turn_credit": credit}
            expected = eref.mt_grpo(
                [
                    [{"outcome": ep.outcome, "turn_rewards": [t.reward for t in ep.turns]} for ep in eps]
                    for eps in groups
                ],
                credit=credit,
            )
        cfg = PPOActorConfig(
            kl_ctl=0.0,
            reward_norm=None,
            adv_norm=None,
            token_rewards_as_adv=False,
            reward_clip=1e9,
            advantage={"estimator": {"implementation": estimator, "kwargs": kwargs}},
        )
        worst = max(worst, _turns(PPOActor(cfg).compute_advantages(batch, meta)["advantages"], groups, expected, split))
    return worst


def entropy(cases: int) -> float:
    worst = 0.0
    for seed in range(cases):
        rng = random.Random(seed)
        groups = make_episode_groups(seed, _sizes(rng), binary=False)
        batch, meta = batch_of(groups, split=rng.random() < 0.5)
        batch.pop("token_rewards")
        alpha, kappa = rng.choice([0.1, 0.4, 2.0]), rng.choice([1.0, 2.0, 5.0])
        norm = NormConfig(mean_level="group", std_level="group")
        base = PPOActor(
            PPOActorConfig(
                kl_ctl=0.0, reward_norm=norm, advantage={"estimator": {"implementation": "reinforce_return"}}
            )
        ).compute_advantages(batch, meta)
        shaped = PPOActor(
            PPOActorConfig(
                kl_ctl=0.0,
                reward_norm=norm,
                advantage={
                    "estimator": {"implementation": "reinforce_return"},
                    "process_adv_shaping": {
                        "implementation": "entropy_advantage",
                        "kwargs": {"alpha": alpha, "kappa": kappa},
                    },
                },
            )
        ).compute_advantages(batch, meta)
        a, h, m = base["advantages"].tolist(), batch["token_entropy"].tolist(), shaped["loss_mask"].tolist()
        got = shaped["advantages"].tolist()
        for b in range(len(a)):
            for t in range(len(a[b])):
                want = eref.entropy_shaped(a[b][t], h[b][t + 1], alpha, kappa) if m[b][t] else a[b][t]
                worst = max(worst, abs(got[b][t] - want))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.cases
    gdpo_worst, gdpo_skipped = gdpo_verl(n)
    maxrl_binary, maxrl_relative = maxrl(n)
    rows = [
        ("MaxRL preset vs SkyRL 0.3.0 compute_maxrl_advantage, 0/1 rewards", maxrl_binary, ""),
        (
            "OTB preset vs verl 0.9.1 compute_optimal_token_baseline_advantage",
            token_baseline_verl(n, "optimal_token_baseline"),
            "",
        ),
        (
            "TIR-OTB preset vs verl 0.9.1 compute_multi_turn_optimal_token_baseline_advantage",
            token_baseline_verl(n, "tir_optimal_token_baseline"),
            "",
        ),
        ("MaxRL preset vs SkyRL 0.3.0, Gaussian rewards (|diff| / max(1, |ref|))", maxrl_relative, ""),
        ("GDPO preset vs verl 0.9.1 compute_gdpo_outcome_advantage", gdpo_worst, f"{gdpo_skipped} skipped"),
        ("KRPO (carry_over: false) vs the authors' group_advantages", _krpo(n, False), ""),
        ("KRPO (carry_over: true) vs persistent per-prompt filters, 3 steps", _krpo(n // 2, True), ""),
        ("SPO vs the authors' tracker (constant / KL rho), 4 steps", spo(n // 2), ""),
        ("GiGPO vs verl-agent core_gigpo definitions", step_credit(n, "gigpo"), ""),
        ("MT-GRPO vs its turn-level definition (authors' trainer)", step_credit(n, "mt_grpo"), ""),
        ("entropy shaping vs psi = min(alpha H, |A| / kappa)", entropy(n // 4), ""),
    ]
    for name, worst, note in rows:
        print(f"{name:70s} max |diff| = {worst:.2e} {note}")


if __name__ == "__main__":
    main()
