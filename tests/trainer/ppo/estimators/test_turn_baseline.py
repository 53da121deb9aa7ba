"""MT-GRPO's turn baseline under variable turn counts: the per-turn-index one is biased, `unbiased` is not.

With `turn_credit: to_go`, per-turn-index normalisation subtracts sum_{j=k}^{K_i}
mean_j from episode i's reward-to-go: the number of terms is the episode's own
stopping turn K_i, so the baseline depends on the actions it scores. The test
builds the exact policy-gradient expectation of a small stopping problem (each
turn the policy continues with probability p, at most 3 turns, a reward per turn
and a bonus for stopping early), by enumerating every group of 3 episodes, and
compares it with d/dθ E[return]: `turn_baseline: unbiased` matches it to rounding,
`per_turn` does not.
"""

from __future__ import annotations

import itertools
import math

import estimators_reference as eref
import pytest
import torch
from episode_factory import Episode, Turn, batch_of, make_episode_groups, token_positions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_step_credit import actor, check_turns, mt_inputs

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_TURNS, GROUP = 3, 3
TURN_REWARDS, STOP_BONUS = (1.0, 0.5, 2.0), 1.5
RESULTS: dict[str, float] = {}


@SETTINGS
@given(
    sizes=st.lists(st.integers(2, 6), min_size=1, max_size=4),
    seed=st.integers(0, 100_000),
    split=st.booleans(),
    coef=st.sampled_from([1.0, 0.5]),
)
def test_unbiased_turn_baseline_equals_its_loop(sizes, seed, split, coef):
    groups = make_episode_groups(seed, sizes, binary=False, max_turns=4)
    out = actor("mt_grpo", turn_baseline="unbiased", turn_weight=coef).compute_advantages(
        *batch_of(groups, split=split)
    )
    worst = check_turns(out["advantages"], groups, eref.mt_grpo_unbiased(mt_inputs(groups), coef), split=split)
    RESULTS["loop_max_diff"] = max(RESULTS.get("loop_max_diff", 0.0), worst)


def _episode(n_turns: int) -> Episode:
    turns = []
    for k in range(n_turns):
        reward = TURN_REWARDS[k] + (STOP_BONUS if k == n_turns - 1 and n_turns < MAX_TURNS else 0.0)
        turns.append(Turn(2, reward, 7, 1 if k < n_turns - 1 else 0))
    return Episode(0, turns, 0.0)  # one outcome for everyone: the outcome advantage is 0


def _probability(n_turns: int, p: float) -> float:
    return p ** (n_turns - 1) * ((1 - p) if n_turns < MAX_TURNS else 1.0)


def _scores(n_turns: int, p: float) -> list[float]:
    """d/dθ log π of each turn's decision (continue: 1 − p, stop: −p, the forced last stop: 0), p = σ(θ)."""
    return [(1 - p) if k < n_turns - 1 else (-p if n_turns < MAX_TURNS else 0.0) for k in range(n_turns)]


def _true_gradient(p: float) -> float:
    total = 0.0
    for n in range(1, MAX_TURNS + 1):
        ret = sum(TURN_REWARDS[:n]) + (STOP_BONUS if n < MAX_TURNS else 0.0)
        total += _probability(n, p) * sum(_scores(n, p)) * ret
    return total


def _expected_estimate(baseline: str, p: float) -> float:
    """E over every group of GROUP episodes of (1/GROUP) sum_i sum_k A_ik * score_ik, A from the pipeline."""
    a = actor("mt_grpo", turn_baseline=baseline)
    total = 0.0
    for counts in itertools.product(range(1, MAX_TURNS + 1), repeat=GROUP):
        groups = [[_episode(n) for n in counts]]
        adv = a.compute_advantages(*batch_of(groups, split=False))["advantages"]
        positions = token_positions(groups, split=False)[0]
        estimate = 0.0
        for e, n in enumerate(counts):
            for k, score in enumerate(_scores(n, p)):
                row, col = positions[e][k][0]
                estimate += float(adv[row, col]) * score
        total += math.prod(_probability(n, p) for n in counts) * estimate / GROUP
    return total


@pytest.mark.parametrize("p", [0.3, 0.6])
def test_per_turn_normalisation_is_biased_and_the_unbiased_baseline_is_not(p):
    truth = _true_gradient(p)
    unbiased = _expected_estimate("unbiased", p)
    per_turn = _expected_estimate("per_turn", p)
    RESULTS[f"p={p}"] = (truth, unbiased, per_turn)  # p 0.3: 0.168, 0.168, -0.268; p 0.6: 0.264, 0.264, -0.386
    assert abs(unbiased - truth) <= 1e-6 * max(1.0, abs(truth))
    # per-turn-index normalisation: a constant per-turn reward (the intermediate reward) normalises to 0,
    # so it never credits taking another turn; its expectation is far from the gradient
    assert abs(per_turn - truth) > 0.2 * abs(truth)


def test_the_options_are_checked():
    groups = make_episode_groups(1, [3], max_turns=3)
    with pytest.raises(ValueError, match="turn_baseline must be one of"):
        actor("mt_grpo", turn_baseline="loo").compute_advantages(*batch_of(groups, split=False))
    with pytest.raises(ValueError, match="turn_baseline 'unbiased' .* needs turn_credit 'to_go'"):
        actor("mt_grpo", turn_baseline="unbiased", turn_credit="own").compute_advantages(*batch_of(groups, split=False))
    torch.testing.assert_close(  # the default is today's per-turn normalisation
        actor("mt_grpo").compute_advantages(*batch_of(groups, split=False))["advantages"],
        actor("mt_grpo", turn_baseline="per_turn").compute_advantages(*batch_of(groups, split=False))["advantages"],
        rtol=0,
        atol=0,
    )


def test_save_load_next_call_is_bit_equal():
    """The estimator keeps no state across steps: a restored actor's next call equals the running one's."""
    import io

    steps = [make_episode_groups(s, [3, 4, 2], binary=False, max_turns=4) for s in range(4)]
    first = actor("mt_grpo", turn_baseline="unbiased")
    for groups in steps[:2]:
        first.compute_advantages(*batch_of(groups, split=True))
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    assert saved == {"stages": {}}
    second = actor("mt_grpo", turn_baseline="unbiased")
    second.load_state_dict(saved)
    for groups in steps[2:]:
        batch, meta = batch_of(groups, split=True)
        assert torch.equal(
            first.compute_advantages(batch, meta)["advantages"], second.compute_advantages(batch, meta)["advantages"]
        )
