"""The AReaL hook's work on AReaL 2's batches, configs and λ functions, without AReaL installed.

`areal2_reference` is AReaL 2's advantage computation and batch layout written as plain loops
(from its source at cbff54d). Batches are built as AReaL 2's workflows build them: `turn_ids`
-1 on prompt and environment tokens and the turn index on generated ones, bool attention
masks, int32 ids, rows and groups joined by `concat_padded_tensors` (which pads every tensor,
`turn_ids` included, with 0). The hook's code path (`areal_bridge.compute_in_areal_layout` with
`areal_config_to_ours`) runs with the reference's `concat_batch` and `split_batch`, and every
tensor the reference returns is compared. The same comparisons against the real AReaL source
are the opt-in `AREAL_SOURCE` test (tests/integrations/test_areal_source.py).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib

import areal2_reference as ref
import pytest
import torch

from areal_adv.integrations.areal_bridge import SHARED_1_0_4, areal_config_to_ours, compute_in_areal_layout
from areal_adv.trainer.ppo.actor import PPOActor

#: float32 round-off between the reference's float loops and our kernels
TOL = 1e-5
VAPO, RELATIVE = ref.AREAL_VAPO, ref.AREAL_RELATIVE  # AReaL 2's paths; ours without AReaL
REF_FUNCTIONS = {VAPO: ref.vapo_length_adaptive_gae, RELATIVE: ref.relative_position_gae_lambda}


def _resolve(path: str):
    """AReaL's paths to the reference's functions; any other path is imported (AReaL's `import_from_string`)."""
    if path in REF_FUNCTIONS:
        return REF_FUNCTIONS[path]
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


CONFIGS = {
    name: (ref.actor_config(ref.ActorConfig, ref.NormConfig, fields), batch)
    for name, (fields, batch) in ref.CASES.items()
}


def batch(seed: int, sizes: list[int], turns: int, **fields: bool) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [ref.group(gen, n, turns=turns, **fields) for n in sizes]


def max_diff(ours: list[dict], theirs: list[dict]) -> dict[str, float]:
    """Largest |ours - theirs| per tensor key the reference returns (every one must be in ours)."""
    worst: dict[str, float] = {}
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        for key, expected in b.items():
            if not isinstance(expected, torch.Tensor):
                continue
            got = a[key]
            assert got.shape == expected.shape, (key, got.shape, expected.shape)
            diff = (got.double() - expected.double()).abs().max().item() if expected.numel() else 0.0
            worst[key] = max(worst.get(key, 0.0), diff)
    return worst


def hook(config: ref.ActorConfig, data: list[dict]) -> list[dict]:
    """What the installed hook computes for AReaL's actor with this config."""
    return compute_in_areal_layout(
        PPOActor(areal_config_to_ours(config)),
        data,
        concat_batch=ref.concat_batch,
        split_batch=ref.split_batch,
    )


@pytest.mark.parametrize("turns", [1, 3], ids=["single_turn", "multi_turn"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_hook_equals_areal_2_on_its_workflows_batches(name: str, turns: int) -> None:
    config, fields = CONFIGS[name]
    worst: dict[str, float] = {}
    for seed, sizes in enumerate([[4, 4, 4], [3, 5, 2, 6], [1, 4, 2]]):
        data = batch(seed, sizes, turns, **fields)
        keep = copy.deepcopy(data)
        theirs = ref.compute_advantages(config, data, _resolve)
        ours = hook(config, data)
        for i, group in enumerate(data):
            assert all(torch.equal(group[k], keep[i][k]) for k in group), "the caller's batch was modified"
        for key, value in max_diff(ours, theirs).items():
            worst[key] = max(worst.get(key, 0.0), value)
    expected = {"advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs", "rewards", "turn_ids"}
    assert expected <= set(worst), sorted(worst)
    assert max(worst.values()) <= TOL, worst


def test_the_batches_carry_areal_2_s_layout() -> None:
    """The layout the comparison is about: zero-padded turn ids past a shorter row, and groups of different widths."""
    data = batch(0, [3, 5], 2)
    joined, meta = ref.concat_batch(data)
    ids, mask, attn = joined["turn_ids"], joined["loss_mask"], joined["attention_mask"]
    assert ids.dtype == torch.int32 and attn.dtype == torch.bool and mask.dtype == torch.int32
    padding = ~attn
    assert bool(padding.any()) and bool((ids[padding] == 0).all()), "no zero-padded turn ids in the batch"
    assert bool((ids[(mask == 0) & attn] == -1).all()) and bool((ids[mask == 1] >= 0).all())
    assert len(set(meta.traj_seqlens)) == 2


def test_groups_of_different_sizes_are_each_normalised_on_their_own() -> None:
    """AReaL 2 normalises with the real group sizes; so does the hook: the result equals each group computed alone."""
    config = CONFIGS["grpo"][0]
    config = dataclasses.replace(config, adv_norm=None)
    data = batch(7, [3, 5, 2, 6], 1)
    together = hook(config, data)
    for group, out in zip(data, together):
        alone = hook(config, [group])[0]
        assert torch.allclose(out["advantages"], alone["advantages"], atol=1e-6)


def test_the_config_bridge_copies_areal_2_s_fields() -> None:
    config = ref.ActorConfig(gae_timestep_unit="turn", gae_lambda=VAPO, gae_lambda_kwargs={"alpha": 0.1})
    ours = areal_config_to_ours(config)
    assert (ours.gae_timestep_unit, ours.gae_lambda, ours.gae_lambda_kwargs) == ("turn", VAPO, {"alpha": 0.1})
    assert areal_config_to_ours(ref.ActorConfig(gae_lambda=0.5, gae_lambda_kwargs={"alpha": 1})).gae_lambda_kwargs == {}
    areal_1_0_4 = dataclasses.make_dataclass(  # AReaL 1.0.4's shared fields only: our defaults for the rest
        "Areal104ActorConfig", [(n, object, dataclasses.field(default=getattr(config, n))) for n in SHARED_1_0_4]
    )
    ours = areal_config_to_ours(areal_1_0_4())
    assert ours.gae_timestep_unit == "token" and ours.gae_lambda_kwargs == {} and ours.gae_lambda == VAPO


@pytest.mark.parametrize("path", ["on", "off"], ids=["fused_kernels", "tensor_steps"])
@pytest.mark.parametrize("case", ["turn_gae_critic", "ppo_critic_k3"])
def test_zero_padded_turn_ids_give_what_minus_one_gives(case: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline reads turn ids only where loss_mask is 1, whatever the padding holds, on both paths."""
    from areal_adv.integrations.areal_bridge import layout
    from areal_adv.trainer.ppo.fused import FUSED_ENV

    monkeypatch.setenv(FUSED_ENV, path)
    config, _ = CONFIGS[case]
    actor = PPOActor(areal_config_to_ours(config))
    joined, meta = ref.concat_batch(batch(3, [4, 2, 5], 3, values=True, ref=True))
    padding = joined["attention_mask"] == 0
    assert bool((joined["turn_ids"][padding] == 0).all()) and bool(padding.any())
    minus_one = {**joined, "turn_ids": torch.where(joined["loss_mask"] != 0, joined["turn_ids"], -1)}
    a = actor.compute_advantages(joined, layout(meta))
    b = actor.compute_advantages(minus_one, layout(meta))
    for key in ("advantages", "returns", "tot_rewards", "kl_rewards"):
        assert torch.equal(a[key], b[key]), key
    assert a["turn_ids"] is joined["turn_ids"], "the caller's turn ids are passed through as given"
