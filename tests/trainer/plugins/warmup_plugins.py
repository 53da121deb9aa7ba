"""Outcome stages for the kernel warm-up tests (imported by dotted path).

`draws_random` draws from every global random generator a stage could use and counts
its calls; `fails_first_call` raises on its first call only, which in a trainer is the
warm-up's call on the synthetic batch, and passes the rewards through after that.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from areal_adv.trainer.ppo.advantage import OutcomeResult, OutcomeRewardInputs

CALLS = {"draws_random": 0, "fails_first_call": 0}


def draws_random(inputs: OutcomeRewardInputs) -> OutcomeResult:
    CALLS["draws_random"] += 1
    torch.rand(3)
    np.random.random(3)
    random.random()
    return OutcomeResult(rewards=inputs.data["rewards"])


def fails_first_call(inputs: OutcomeRewardInputs) -> OutcomeResult:
    CALLS["fails_first_call"] += 1
    if CALLS["fails_first_call"] == 1:
        raise ValueError("this stage reads the column 'answer', which only the real task's batches have")
    return OutcomeResult(rewards=inputs.data["rewards"])
