"""The call-time agreement (`areal_adv.utils.call_agreement`) in `PPOActor.compute_advantages`.

Two gloo ranks, no trainer (tests/trainer/ppo/dist_agreement_worker.py): rank 1's
outcome stage raises while rank 0 goes on to the batch-normalisation all-reduce.
Both ranks must raise the same `CallFailure` naming rank 1, the stage and the
cause, within 5 s, whether rank 1 then leaves or goes on to a barrier and a
retry (which must work: the process group stays usable). One process: no
collective at all.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
from batch_factory import make_batch

from areal_adv.api.cli_args import NormConfig, PPOActorConfig
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils import call_agreement

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from dist_launch import rank_envs, run_bounded  # noqa: E402

CAUSE = (
    "PPOActor.compute_advantages: rank 1 failed in advantage stage 'outcome_reward_shaping': "
    "StageContractError: advantage stage 'outcome_reward_shaping' (dist_agreement_worker.fail_first_call_on_rank1)"
    ": raised ValueError: simulated stage failure on rank 1"
)
#: "at once": well inside the workers' 30 s process-group timeout (what a rank without the agreement waits for),
#: with room for a loaded machine's skew between the ranks' start
WITHIN_S = 15.0


def _run(after: str) -> list[str]:
    worker = HERE / "dist_agreement_worker.py"
    results = run_bounded([[sys.executable, str(worker), after]] * 2, rank_envs(2), timeout=180, warm=True)
    logs = [out + err for _, out, err in results]
    assert all(code == 0 for code, _, _ in results), logs
    return logs


def _raised(log: str, rank: int) -> tuple[float, str]:
    match = re.search(rf"^rank {rank}: raised after ([0-9.]+) s: (.*)$", log, re.M)
    assert match, log
    return float(match.group(1)), match.group(2)


@pytest.mark.parametrize("after", ["barrier", "exit"])
def test_a_stage_failing_on_one_rank_raises_the_same_named_error_on_every_rank_at_once(after: str) -> None:
    logs = _run(after)
    seconds, errors = zip(*(_raised(logs[r], r) for r in range(2)))
    assert errors[0] == errors[1], errors
    assert errors[0].startswith(f"CallFailure: {CAUSE} (raised at {HERE / 'dist_agreement_worker.py'}:"), errors[0]
    assert max(seconds) < WITHIN_S, seconds
    if after == "barrier":  # the process group still works: the barrier and a retry of the call go through
        for rank, log in enumerate(logs):
            assert f"rank {rank}: retry returned ['advantages'," in log, log


def test_one_process_runs_no_collective(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(call_agreement, "_exchange", lambda *a: calls.append(a))
    batch, meta = make_batch(3, drop=("token_rewards",))
    out = PPOActor(PPOActorConfig(reward_norm=NormConfig(mean_level="batch", std_level="batch"))).compute_advantages(
        batch, meta
    )
    assert calls == [] and torch.isfinite(out["advantages"]).all()


def test_one_exchange_lets_only_the_first_collective_of_a_block_exchange(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(call_agreement, "_exchange", lambda call, exc: calls.append((call.name, exc)))
    token = call_agreement._ACTIVE.set(call_agreement._Call("call", str))
    try:
        call_agreement.before_collective()
        with call_agreement.one_exchange():  # a normalisation's mean and std reductions
            call_agreement.before_collective()
            call_agreement.before_collective()
        call_agreement.before_collective()
    finally:
        call_agreement._ACTIVE.reset(token)
    call_agreement.before_collective()  # outside an agreed call: nothing
    assert calls == [("call", None)] * 3
