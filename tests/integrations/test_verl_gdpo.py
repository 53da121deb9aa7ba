"""Our GDPO preset equals the real verl 0.9.1 `compute_gdpo_outcome_advantage`, with the same keys and weights.

verl reads each component from `non_tensor_batch[key]` (one score per sample, as
its GDPO reward manager stores `reward_extra_info`), normalises it per `uid`
group with `compute_grpo_outcome_advantage`, sums with
`algorithm.gdpo_reward_weights` and applies `masked_whiten`. The same rollouts
go through our pipeline as padded prompt+response rows with `rewards` [B, K] and
`reward_keys`, grouped by prompt; advantages are compared on verl's response
mask (max |difference| <= 1e-5). Groups have >= 2 responses and batches whose
token variance is below 1e-3 are skipped (the deliberate singleton and
whitening-eps differences, docs/algorithms.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import verl_batches as vb
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import TrajBatchMeta

PRESET = Path(__file__).resolve().parents[2] / "examples" / "presets" / "gdpo.yaml"
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = ("accuracy", "format", "length", "tool")


def verl_gdpo(batch: vb.VerlBatch, scores: np.ndarray, keys: list[str], weights: list[float] | None) -> torch.Tensor:
    t = batch.tensors
    cfg = OmegaConf.create({"gdpo_reward_keys": keys, "gdpo_reward_weights": weights, "norm_adv_by_std_in_grpo": True})
    prompts = torch.zeros(t["responses"].shape[0], vb.PROMPT, dtype=torch.long)
    non_tensor = {"uid": batch.uid, **{k: scores[:, i] for i, k in enumerate(KEYS[: scores.shape[1]])}}
    adv, _ = core_algos.compute_gdpo_outcome_advantage(
        token_level_rewards=t["token_level_rewards"],
        response_mask=t["response_mask"],
        index=batch.uid,
        config=cfg,
        non_tensor_batch=non_tensor,
        batch={"prompts": prompts, "attention_mask": t["attention_mask"]},
    )
    return adv


def ours(batch: vb.VerlBatch, scores: np.ndarray, overrides: list[str]) -> torch.Tensor:
    """The rollouts as our rows (prompt, then the response; grouped by uid), back in verl's order."""
    t = batch.tensors
    B, R = t["response_mask"].shape
    groups = list(dict.fromkeys(batch.uid))
    order = sorted(range(B), key=lambda i: (groups.index(batch.uid[i]), i))
    P = vb.PROMPT
    attention = torch.zeros(B, P + R, dtype=torch.long)
    loss_mask = torch.zeros(B, P + R, dtype=torch.long)
    for row, i in enumerate(order):
        attention[row] = t["attention_mask"][i]
        loss_mask[row, P:] = t["response_mask"][i].long()
    data = {
        "input_ids": torch.randint(3, 50, (B, P + R)) * attention,
        "attention_mask": attention,
        "loss_mask": loss_mask,
        "logprobs": torch.zeros(B, P + R),
        "rewards": torch.tensor(scores[order], dtype=torch.float32),
    }
    meta = TrajBatchMeta(
        n_trajs=len(groups),
        traj_group_sizes=tuple(int((batch.uid == u).sum()) for u in groups),
        reward_keys=KEYS[: scores.shape[1]],
    )
    out = PPOActor(load_config(PRESET, overrides).actor).compute_advantages(data, meta)["advantages"]
    back = torch.zeros(B, R)
    for row, i in enumerate(order):
        back[i] = out[row, P - 1 : P - 1 + R]
    return back


def scores_for(batch: vb.VerlBatch, k: int, seed: int, binary: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = batch.uid.shape[0]
    return rng.integers(0, 2, (n, k)).astype(np.float32) if binary else rng.normal(size=(n, k)).astype(np.float32)


def whitenable(adv: torch.Tensor, mask: torch.Tensor) -> bool:
    picked = adv[mask.bool()].double()
    var = float(picked.var()) if picked.numel() > 1 else 0.0
    return var == 0.0 or var >= 1e-3


@SETTINGS
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    seed=st.integers(0, 10_000),
    k=st.integers(1, 4),
    binary=st.booleans(),
    weighted=st.booleans(),
)
def test_gdpo_preset_equals_verl_gdpo(sizes, seed, k, binary, weighted):
    batch = vb.make_batch(seed, sizes, binary=binary)
    scores = scores_for(batch, k, seed, binary)
    weights = [1.0 + 0.5 * i for i in range(k)] if weighted else None
    keys = list(KEYS[:k])
    overrides = ["actor.adv_norm=null"]
    if weighted:
        overrides.append(f"actor.advantage.outcome_reward_shaping.kwargs.weights={weights}")
    assume(whitenable(ours(batch, scores, overrides), batch.tensors["response_mask"]))
    mask = batch.tensors["response_mask"]
    theirs = verl_gdpo(batch, scores, keys, weights)
    mine = ours(batch, scores, overrides[1:])
    assert float(((mine.double() - theirs.double()) * mask).abs().max()) <= 1e-5
    assert float((mine * (1 - mask)).abs().max()) == 0.0


def test_gdpo_key_subset_equals_verl_with_those_keys():
    batch = vb.make_batch(7, [3, 4, 2], binary=False)
    scores = scores_for(batch, 3, 7, False)
    theirs = verl_gdpo(batch, scores, ["accuracy", "length"], [2.0, 0.5])
    mine = ours(
        batch,
        scores,
        [
            "actor.advantage.outcome_reward_shaping.kwargs.keys=[accuracy,length]",
            "actor.advantage.outcome_reward_shaping.kwargs.weights=[2.0,0.5]",
        ],
    )
    mask = batch.tensors["response_mask"]
    assert float(((mine.double() - theirs.double()) * mask).abs().max()) <= 1e-5


@pytest.mark.parametrize("seed", range(3))
def test_verl_keeps_a_singletons_raw_reward_we_refuse(seed):
    """The deliberate difference: verl's GRPO normalisation gives a lone sample mean 0 / std 1."""
    batch = vb.make_batch(seed, [1, 3], binary=False)
    scores = scores_for(batch, 2, seed, False)
    verl_gdpo(batch, scores, ["accuracy", "format"], None)  # verl accepts it
    with pytest.raises(ValueError, match="has 1 logical rollout"):
        ours(batch, scores, [])
