"""The OTB presets equal verl 0.9.1's own optimal-token-baseline functions, token by token.

Our side: `load_config(preset).actor` -> `PPOActor(cfg).compute_advantages(groups)`
with the README's list of trajectory groups (ragged multi-turn rows, prompts of
different lengths, groups of 1-6 rows), each row carrying `logprobs` and
`sum_pi_squared` at its generated tokens (and `rollout_is_weights` in half the
cases). verl's side: the same rows as responses (from each row's first generated
token), through verl's `ray_trainer.compute_advantage` with
`adv_estimator="optimal_token_baseline"` / `"tir_optimal_token_baseline"`, which
reads `old_log_probs`, `sum_pi_squared` and `rollout_is_weights` from the batch
and calls `compute_optimal_token_baseline_advantage` /
`compute_multi_turn_optimal_token_baseline_advantage` at their signature defaults
(handle_zero_tail=True, epsilon=1e-8). Rows end with a generated token, where
verl's reward manager puts the score.

The verl adapter (`areal_adv.integrations.verl.compute_advantage`) reads verl's own
`sum_pi_squared`, `old_log_probs` and `rollout_is_weights` from the DataProto and
equals verl's estimators on it; without them it names verl's setting.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import verl_batches as vb
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import ray_trainer

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.integrations import verl as areal_verl
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "trainer" / "ppo"))
import peer_reference as ref  # noqa: E402

PRESETS = ROOT / "examples" / "presets"
NAMES = ("optimal_token_baseline", "tir_optimal_token_baseline")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def otb_groups(seed: int, sizes: list[int], *, binary: bool, is_weights: bool) -> list[dict]:
    """Peer groups whose rows end with a generated token, with consistent log-probs and Σπ².

    Σπ² of a distribution with pi_t on the sampled token lies in [pi_t², pi_t² + (1 - pi_t)²].
    """
    groups = ref.make_peer_groups(seed, sizes, binary=binary, trailing_env=False)
    gen = torch.Generator().manual_seed(seed)
    for g in groups:
        mask = g["loss_mask"].bool()
        pi = torch.exp(g["logprobs"])
        spread = torch.rand(pi.shape, generator=gen)
        g["sum_pi_squared"] = torch.where(mask, pi**2 + spread * (1 - pi) ** 2, torch.zeros_like(pi))
        if is_weights:
            g["rollout_is_weights"] = torch.where(mask, 2 * torch.rand(pi.shape, generator=gen), torch.zeros_like(pi))
    return groups


def verl_advantages(batch: dict, meta, name: str) -> list[torch.Tensor]:
    """verl's compute_advantage on the rows as responses; per row, the advantages on its generated tokens."""
    mask = batch["loss_mask"].bool()
    B, T = mask.shape
    start = mask.to(torch.int8).argmax(dim=1)
    R = int((T - start).max())
    fields = {
        k: torch.zeros(B, R)
        for k in ("response_mask", "token_level_rewards", "old_log_probs", "sum_pi_squared", "rollout_is_weights")
    }
    for b in range(B):
        n = T - int(start[b])
        cols = slice(int(start[b]), T)
        fields["response_mask"][b, :n] = batch["loss_mask"][b, cols].float()
        fields["old_log_probs"][b, :n] = batch["logprobs"][b, cols]
        fields["sum_pi_squared"][b, :n] = batch["sum_pi_squared"][b, cols]
        if "rollout_is_weights" in batch:
            fields["rollout_is_weights"][b, :n] = batch["rollout_is_weights"][b, cols]
        last = int(mask[b].nonzero().max()) - int(start[b])
        fields["token_level_rewards"][b, last] = batch["rewards"][b]
    if "rollout_is_weights" not in batch:
        del fields["rollout_is_weights"]
    uid = np.array([f"prompt-{g}" for g, n in enumerate(meta.traj_group_sizes) for _ in range(n)], dtype=object)
    data = DataProto.from_dict(tensors=fields, non_tensors={"uid": uid})
    out = ray_trainer.compute_advantage(data, adv_estimator=name, config=None).batch["advantages"]
    return [out[b, fields["response_mask"][b].bool()] for b in range(B)]


def ours(name: str, groups: list[dict]) -> torch.Tensor:
    return PPOActor(load_config(PRESETS / f"{name}.yaml").actor).compute_advantages(groups)["advantages"]


def max_difference(name: str, groups: list[dict]) -> float:
    """max |ours - verl| / (1 + |verl|) over every generated token (ours aligned: token p at position p - 1).

    Absolute for small advantages, relative for large ones (a sum of float32 terms in another order
    differs by a few ulps of its magnitude), as `torch.testing.assert_close(rtol=atol)` reads it.
    """
    batch, meta = concat_batch(groups)
    theirs = verl_advantages(batch, meta, name)
    out = ours(name, groups)
    worst = 0.0
    for b, expected in enumerate(theirs):
        positions = batch["loss_mask"][b].nonzero()[:, 0] - 1
        expected = expected.double()
        worst = max(worst, float(((out[b, positions].double() - expected).abs() / (1 + expected.abs())).max()))
    return worst


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    seed=st.integers(0, 100_000),
    binary=st.booleans(),
    is_weights=st.booleans(),
    name=st.sampled_from(NAMES),
)
@example(sizes=[1, 3, 2], seed=0, binary=True, is_weights=False, name="optimal_token_baseline")
@example(sizes=[1, 3, 2], seed=0, binary=True, is_weights=True, name="tir_optimal_token_baseline")
def test_presets_equal_verl(sizes, seed, binary, is_weights, name):
    groups = otb_groups(seed, sizes, binary=binary, is_weights=is_weights)
    assert max_difference(name, groups) <= 1e-5


def test_the_two_differ_on_multi_turn_rows_and_agree_on_single_turn_rows():
    """Lined up by response position vs by generated-token index: the same when no environment gap."""
    multi = otb_groups(4, [3, 4], binary=False, is_weights=False)
    assert not torch.allclose(ours(NAMES[0], multi), ours(NAMES[1], multi), atol=1e-4)
    single = ref.make_peer_groups(5, [3, 4], binary=False, trailing_env=False, max_turns=1)
    for g in single:
        pi = torch.exp(g["logprobs"])
        g["sum_pi_squared"] = torch.where(g["loss_mask"].bool(), pi**2, torch.zeros_like(pi))
    torch.testing.assert_close(ours(NAMES[0], single), ours(NAMES[1], single))
    assert max_difference(NAMES[0], single) <= 1e-5


@pytest.mark.parametrize("name", NAMES)
def test_handle_zero_tail_off_equals_verl_with_it_off(name, monkeypatch):
    """The kwarg reaches the function: verl called with handle_zero_tail=False agrees too."""
    from verl.trainer.ppo import core_algos

    groups = otb_groups(9, [3, 2, 4], binary=False, is_weights=True)
    batch, meta = concat_batch(groups)
    fn = core_algos.get_adv_estimator_fn(name)
    monkeypatch.setattr(core_algos, "get_adv_estimator_fn", lambda _: lambda **kw: fn(**kw, handle_zero_tail=False))
    theirs = verl_advantages(batch, meta, name)
    cfg = load_config(PRESETS / f"{name}.yaml", ["actor.advantage.estimator.kwargs.handle_zero_tail=false"])
    out = PPOActor(cfg.actor).compute_advantages(groups)["advantages"]
    for b, expected in enumerate(theirs):
        positions = batch["loss_mask"][b].nonzero()[:, 0] - 1
        torch.testing.assert_close(out[b, positions].double(), expected.double(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# The verl adapter: verl's own sum_pi_squared / rollout_is_weights fields
# ---------------------------------------------------------------------------


def with_sum_pi_squared(batch: vb.VerlBatch, seed: int, is_weights: bool) -> vb.VerlBatch:
    """verl's batch plus Σπ² consistent with its old_log_probs (and rollout IS weights)."""
    gen = torch.Generator().manual_seed(seed)
    t = dict(batch.tensors)
    mask, pi = t["response_mask"], t["old_log_probs"].exp()
    t["sum_pi_squared"] = (pi**2 + torch.rand(pi.shape, generator=gen) * (1 - pi) ** 2) * mask
    if is_weights:
        t["rollout_is_weights"] = 2 * torch.rand(pi.shape, generator=gen) * mask
    return vb.VerlBatch(tensors=t, uid=batch.uid, lengths=batch.lengths)


def verl_algo(name: str) -> object:
    return OmegaConf.create(
        {"gamma": 1.0, "lam": 1.0, "areal_config": str(PRESETS / f"{name}.yaml"), "areal_overrides": []}
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    seed=st.integers(0, 100_000),
    is_weights=st.booleans(),
    name=st.sampled_from(NAMES),
)
def test_verl_wrapper_reads_verls_fields_and_equals_verl(sizes, seed, is_weights, name):
    """`areal_adv.integrations.verl.compute_advantage` on verl's DataProto (interleaved uids, multi-turn masks)."""
    batch = with_sum_pi_squared(vb.make_batch(seed, sizes), seed, is_weights)
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
    theirs = areal_verl.verl_compute_advantage()(batch.proto(*keys), adv_estimator=name, config=None).batch
    ours = areal_verl.compute_advantage(batch.proto(*keys), adv_estimator="areal", config=verl_algo(name)).batch
    mask = batch.tensors["response_mask"]
    assert float(((ours["advantages"].double() - theirs["advantages"].double()) * mask).abs().max()) <= 1e-5


def test_verl_adapter_errors_name_verls_setting():
    batch = with_sum_pi_squared(vb.make_batch(0, [2, 3]), 0, False)
    data = batch.proto("response_mask", "token_level_rewards", "old_log_probs")
    with pytest.raises(ConfigError, match=r"reads \['sum_pi_squared'\].*calculate_sum_pi_squared=True"):
        areal_verl.compute_advantage(data, adv_estimator="areal", config=verl_algo(NAMES[0]))
    assert "advantages" not in data.batch.keys()
    registry = batch.proto("response_mask", "token_level_rewards", "sum_pi_squared", "old_log_probs")
    with pytest.raises(
        ConfigError, match=r"registry call does not pass.*areal_adv\.integrations\.verl\.compute_advantage"
    ):
        areal_verl.verl_compute_advantage()(registry, adv_estimator="areal", config=verl_algo(NAMES[1]))
