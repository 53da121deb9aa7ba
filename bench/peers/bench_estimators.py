"""The 2025-26 estimators (GDPO, KRPO, SPO, GiGPO, MT-GRPO, entropy shaping): cost and speed, side by side.

Usage:
    .venv/bin/python -m bench.peers.bench_estimators                 # 256 prompts x 8 samples, up to 4 turns of <= 256
    .venv/bin/python -m bench.peers.bench_estimators --prompts 128 --samples 8 --turns 8 --threads 1

On one multi-turn batch (ragged turns with environment gaps, per-turn rewards,
anchor keys that recur within a group, 3 reward components, entropies, prompt
keys) it prints, per stage:

* `pipeline`: the best time of `PPOActor(preset).compute_advantages` with the
  stage, and the ratio to the GRPO preset's pipeline on the same batch (what the
  stage adds to a step);
* `reference loops`: the plain-loop reference of the stage's definition alone
  (tests/trainer/ppo/estimators_reference.py; per sample / step, per token for
  entropy shaping) on the same data, for scale: our column is the whole
  pipeline (validation, alignment, placement, estimator, output), theirs only
  the stage's arithmetic.

Times are process CPU time (best of interleaved rounds, one torch thread), so
other processes on a shared machine disturb them less than wall time would.

Results and the command go in docs/performance.md.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench import use_test_helpers

ROOT = Path(__file__).resolve().parents[2]
use_test_helpers("trainer/ppo")

import estimators_reference as eref  # noqa: E402
from episode_factory import batch_of, make_episode_groups  # noqa: E402

from areal_adv.api.cli_args import load_config  # noqa: E402
from areal_adv.trainer.ppo.actor import PPOActor  # noqa: E402

PRESETS = ROOT / "examples" / "presets"


def cpu_time(fn: Callable[[], object]) -> float:
    """Process CPU seconds of one call: robust to other processes on a shared machine (use --threads 1)."""
    start = time.process_time()
    fn()
    return time.process_time() - start


def interleaved_best(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """The smallest CPU time of each function over `rounds` round-robin passes (no drift between them)."""
    out = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            out[name] = min(out[name], cpu_time(fn))
    return out


def make(prompts: int, samples: int, max_turns: int, turn_len: int, seed: int = 0):
    groups = make_episode_groups(
        seed,
        [samples] * prompts,
        max_turns=max_turns,
        n_components=3,
        max_turn_len=turn_len,
        prompt_keys=[p % max(prompts // 2, 1) for p in range(prompts)],
    )
    by_row = batch_of(groups, split=False, names=("a", "b", "c"))
    return groups, by_row


def stage_configs() -> dict[str, tuple[str, list[str]]]:
    base = ["actor.kl_ctl=0.0"]
    return {
        "grpo (baseline)": ("grpo", base),
        "gdpo": ("gdpo", base),
        "krpo": ("krpo", base),
        "spo": ("spo", base),
        "gigpo": (
            "grpo",
            [
                *base,
                "actor.reward_norm=null",
                "actor.token_rewards_as_adv=false",
                "actor.advantage.estimator={implementation: gigpo, kwargs: {step_discount: 0.95}}",
            ],
        ),
        "mt_grpo": ("../guess_mt_grpo", base),
        "gigpo (guess)": ("../guess_gigpo", base),
        "entropy": ("grpo_entropy", base),
    }


def references(groups, batch, meta) -> dict[str, Callable[[], object]]:
    """The plain loops over the same data (outcome references on per-rollout values)."""
    index = meta.row_group_index().tolist()
    comps = batch["rewards"].double().tolist()
    lengths = batch["loss_mask"].sum(-1).tolist()
    outcome = [ep.outcome for eps in groups for ep in eps]
    per_group = [[ep.outcome for ep in eps] for eps in groups]
    gigpo_in = [
        [
            {
                "rewards": [t.reward for t in ep.turns[:-1]] + [ep.turns[-1].reward + ep.outcome],
                "anchors": [t.anchor for t in ep.turns],
            }
            for ep in eps
        ]
        for eps in groups
    ]
    mt_in = [[{"outcome": ep.outcome, "turn_rewards": [t.reward for t in ep.turns]} for ep in eps] for eps in groups]
    keys = [eps[0].prompt for eps in groups]
    adv = torch.randn(batch["loss_mask"].shape).tolist()
    ent = batch["token_entropy"].tolist()
    mask = batch["loss_mask"].tolist()

    def entropy() -> None:
        for a_row, h_row, m_row in zip(adv, ent, mask):
            [eref.entropy_shaped(a, h, 0.4, 2.0) for a, h, m in zip(a_row, h_row, m_row) if m]

    return {
        "grpo (baseline)": lambda: eref.grpo_scalar(outcome, index),
        "gdpo": lambda: eref.gdpo_verl(comps, [1.0, 1.0, 1.0], index, lengths),
        "krpo": lambda: eref.PersistentKRPO().step(list(zip(keys, per_group))),
        "spo": lambda: eref.SPOTracker().step(
            [k for k, g in zip(keys, per_group) for _ in g], outcome, [0.875] * len(outcome)
        ),
        "gigpo": lambda: eref.gigpo(gigpo_in, 0.95),
        "mt_grpo": lambda: eref.mt_grpo(mt_in),
        "entropy": entropy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--turn-len", type=int, default=256, help="tokens per turn: 1..turn_len")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    groups, (batch, meta) = make(args.prompts, args.samples, args.turns, args.turn_len)
    outcomes = torch.tensor([ep.outcome for eps in groups for ep in eps], dtype=torch.float32)
    scalar = dict(batch, rewards=outcomes)  # the other stages read the outcome reward
    from areal_adv.utils.batch_meta import TrajBatchMeta

    scalar_meta = TrajBatchMeta(n_trajs=meta.n_trajs, traj_group_sizes=meta.traj_group_sizes)
    print(
        f"batch: {batch['input_ids'].shape[0]} rows x {batch['input_ids'].shape[1]} positions, "
        f"{int(batch['loss_mask'].sum())} generated tokens, {meta.n_trajs} prompts, torch threads "
        f"{torch.get_num_threads()}, numpy {np.__version__}"
    )
    refs = references(groups, batch, meta)
    pipelines = {}
    for name, (preset, overrides) in stage_configs().items():
        actor = PPOActor(load_config(PRESETS / f"{preset}.yaml", overrides).actor)
        data, m = (batch, meta) if name == "gdpo" else (scalar, scalar_meta)
        actor.compute_advantages(data, m)  # warm-up (numba, allocations)
        pipelines[name] = lambda a=actor, d=data, mm=m: a.compute_advantages(d, mm)
    ours = interleaved_best(pipelines, args.rounds)
    loops = interleaved_best(refs, max(args.rounds // 4, 2))
    baseline = ours["grpo (baseline)"]
    print(f"{'stage':18s} {'pipeline ms':>12s} {'x grpo pipeline':>16s} {'reference loops ms':>19s}   (CPU time)")
    for name in pipelines:
        ref = loops.get(name, loops.get(name.split()[0]))  # "gigpo (guess)": the same definition as "gigpo"
        print(f"{name:18s} {ours[name] * 1e3:12.2f} {ours[name] / baseline:16.2f} {ref * 1e3:19.1f}")


if __name__ == "__main__":
    main()
