"""The advantage kernels are loaded while the trainer is built, so step 0 loads and compiles none of them.

The check runs in a fresh process, which has loaded no kernel yet: once the trainer is
built, the pipeline's numba drivers (serial and, with two numba threads, parallel) must
hold compiled signatures, and step 0 must leave every dispatcher as it found it (no new
signature, no cache hit or miss, so nothing loaded or compiled). The warm-up must not
change the run: the same advantages, losses and weights as without it (with a stage
that keeps state in an object both actors share), the same global random states, and a
stage that raises on the synthetic batch leaves a note and a run that trains. No timings
are asserted.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_run  # noqa: E402
import torch

import areal_adv.trainer.run.loop as loop
from areal_adv.api.cli_args import load_config
from areal_adv.trainer.parallel.distributed import DistContext
from areal_adv.trainer.ppo.kernels.numba_cpu import NUMBA_AVAILABLE
from areal_adv.trainer.run.kernel_warmup import KernelWarmUp, warm_up_advantage_kernels
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
]
FUSED = "areal_adv.trainer.ppo.kernels.fused_cpu."

_FRESH_PROCESS = """
import gc, json, sys, warnings
warnings.simplefilter("ignore")  # gc.get_objects() touches deprecated torch attributes
import numba
from areal_adv.api.cli_args import load_config
from areal_adv.trainer.run.loop import Trainer

def dispatchers():
    out = {}
    for fn in gc.get_objects():
        if isinstance(fn, numba.core.dispatcher.Dispatcher) and fn.signatures:
            name = fn.py_func.__module__ + "." + fn.py_func.__qualname__
            out[name] = [[str(s) for s in fn.signatures], sum(fn.stats.cache_hits.values()),
                         sum(fn.stats.cache_misses.values())]
    return out

before = dispatchers()
trainer = Trainer(load_config("preset:grpo_arith", sys.argv[1:]))
built = dispatchers()
row = trainer.step(0).metrics
print(json.dumps({"before": before, "built": built, "stepped": dispatchers(), "threads": numba.get_num_threads(),
                  "batches": trainer.kernel_warmup.batches, "error": trainer.kernel_warmup.error}))
"""


@pytest.mark.skipif(not NUMBA_AVAILABLE, reason="the fused pipeline needs numba")
def test_step_0_loads_and_compiles_no_kernel_after_the_trainer_is_built(tmp_path: Path) -> None:
    overrides = [*TINY, "train.num_threads=2", f"output.dir={tmp_path}"]  # two threads: the parallel drivers too
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "AREAL_GAE_BACKEND": "numba"}
    proc = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, *overrides],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["threads"] == 2
    assert seen["batches"] == ["small", "large"] and seen["error"] is None  # "large": the parallel drivers
    assert not seen["before"], seen["before"]  # a fresh process: nothing loaded before the trainer
    # the default pipeline's fused drivers, the one small batches take and the one large batches take
    assert {FUSED + "_token_serial", FUSED + "_token_parallel"} <= set(seen["built"]), sorted(seen["built"])
    assert seen["stepped"] == seen["built"]  # step 0 loaded, compiled and dispatched to no new kernel


def _tiny(tmp_path: Path, *extra: str):
    return load_config("preset:grpo_arith", [*TINY, f"output.dir={tmp_path}", *extra])


def _two_steps(trainer: Trainer) -> tuple[list[torch.Tensor], list[float], dict[str, torch.Tensor]]:
    outs = [trainer.step(i) for i in range(2)]
    advantages = [o.data["advantages"] for o in outs]
    losses = [o.metrics["policy_loss"] for o in outs]
    return advantages, losses, {k: v.clone() for k, v in trainer.policy.state_dict().items()}


def test_a_run_with_the_warm_up_equals_one_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stateful_stage

    # a stage whose state lives in a module-level object, so the warm-up actor and the trainer's share it;
    # without reward normalisation its running mean shifts the advantages, so a leaked update would show
    stateful = (
        "actor.advantage.outcome_reward_shaping={implementation: stateful_stage.running_baseline, kwargs: {decay: 0.5}}"
    )
    extra = ("actor.reward_norm=null", stateful)
    stateful_stage.running_baseline.reset()
    with_warm_up = Trainer(_tiny(tmp_path / "a", *extra))
    assert stateful_stage.running_baseline.calls == 0  # the warm-up ran it, then put its state back
    warmed = _two_steps(with_warm_up)
    stateful_stage.running_baseline.reset()
    monkeypatch.setattr(loop, "warm_up_advantage_kernels", lambda *a, **k: KernelWarmUp(0.0, ()))
    plain = _two_steps(Trainer(_tiny(tmp_path / "b", *extra)))
    for a, b in zip(warmed[0], plain[0]):
        assert torch.equal(a, b)
    assert warmed[1] == plain[1]
    assert warmed[2].keys() == plain[2].keys()
    assert all(torch.equal(warmed[2][k], plain[2][k]) for k in warmed[2])


def test_the_warm_up_puts_the_global_random_states_back(tmp_path: Path) -> None:
    from plugins import warmup_plugins

    cfg = _tiny(
        tmp_path, "actor.advantage.outcome_reward_shaping={implementation: plugins.warmup_plugins.draws_random}"
    )
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    states = torch.get_rng_state(), np.random.get_state(), random.getstate()
    calls = warmup_plugins.CALLS["draws_random"]
    result = warm_up_advantage_kernels(cfg, cfg.actor, task=None, device=torch.device("cpu"), ctx=DistContext())
    assert result.error is None and result.batches[0] == "small"  # and "large" when numba has two threads here
    assert warmup_plugins.CALLS["draws_random"] == calls + len(result.batches)  # it drew from all three, each call
    assert torch.equal(torch.get_rng_state(), states[0])
    after = np.random.get_state()
    assert after[0] == states[1][0] and np.array_equal(after[1], states[1][1]) and after[2:] == states[1][2:]
    assert random.getstate() == states[2]


def test_a_stage_that_raises_on_the_synthetic_batch_leaves_a_note_and_the_run_trains(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from plugins import warmup_plugins

    warmup_plugins.CALLS["fails_first_call"] = 0
    cfg = _tiny(
        tmp_path,
        "train.steps=2",
        "actor.advantage.outcome_reward_shaping={implementation: plugins.warmup_plugins.fails_first_call}",
    )
    result = Trainer(cfg).run()
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if "advantage kernels" in line]
    assert notes == [
        "[areal-adv] advantage kernels not loaded before step 0: on a synthetic batch, advantage stage "
        "'outcome_reward_shaping' (plugins.warmup_plugins.fails_first_call): raised ValueError: this stage reads "
        "the column 'answer', which only the real task's batches have; the run goes on (step 0 loads them)"
    ]
    assert result.steps_done == 2 and not result.interrupted
    assert warmup_plugins.CALLS["fails_first_call"] == 3  # the warm-up's call, then one per step
