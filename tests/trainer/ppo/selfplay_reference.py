"""Plain-loop references for the running-statistics and self-play stages, from the peers' code.

Nothing here imports the package's stage code; everything is Python floats (float64).

* RAE - SPIRAL (spiral-rl/spiral, commit a02d0ed): `spiral/utils.py:EMA` (value
  starts at 0.0, `update` = decay * value + (1 - decay) * x) and
  `train_spiral.py:SelfPlayActor.prepare_trajectories` (baseline = ema.get() before
  ema.update(player_reward); advantage = reward - baseline), one EMA per role, here
  keyed by (game, role);
* running moments - ROLL (alibaba/ROLL, commit 8eb27cc): `roll/utils/functionals.py:
  RunningMoments.update` (count starts at 1e-24, mean 0, var 1; Chan's parallel merge
  with the batch's biased variance; std = sqrt(var * n / (n - 1))) and `reward_norm`
  ((r - running mean) / (running std + 1e-6), the batch included in the statistics
  before it is normalised).
"""

from __future__ import annotations

import math


class SpiralEMA:
    """spiral/utils.py:EMA."""

    def __init__(self, decay: float) -> None:
        assert 0.0 < decay < 1.0
        self.decay = decay
        self.value = 0.0

    def update(self, x: float) -> float:
        self.value = self.decay * self.value + (1 - self.decay) * x
        return self.value

    def get(self) -> float:
        return self.value


class RoleBaselines:
    """One SpiralEMA per (game, role), fed in batch order as prepare_trajectories does."""

    def __init__(self, decay: float = 0.95) -> None:
        self.decay = decay
        self.emas: dict[tuple[int, int], SpiralEMA] = {}

    def step(self, samples: list[tuple[int, int, float]]) -> list[float]:
        """(game, role, reward) per sample, in order -> reward - baseline per sample."""
        out = []
        for game, role, reward in samples:
            ema = self.emas.setdefault((game, role), SpiralEMA(self.decay))
            baseline = ema.get()
            ema.update(reward)
            out.append(reward - baseline)
        return out


class RollRunningMoments:
    """roll/utils/functionals.py:RunningMoments, in float64 on Python lists."""

    def __init__(self) -> None:
        self.mean, self.std, self.var, self.count = 0.0, 1.0, 1.0, 1e-24

    def update(self, xs: list[float]) -> None:
        n = len(xs)
        xs_mean = sum(xs) / n
        xs_var = sum((x - xs_mean) ** 2 for x in xs) / n  # torch.var_mean(unbiased=False)
        delta = xs_mean - self.mean
        tot = self.count + n
        old_sum = self.var * self.count + delta**2 * self.count * n / tot
        self.mean += delta * n / tot
        self.var = (old_sum + xs_var * n) / tot
        # ROLL's tensors give inf after a lone first sample (tot - 1 == 0); the stage uses std 1 there
        self.std = math.sqrt(self.var * tot / (tot - 1)) if tot - 1 > 0 else math.inf
        self.count = tot

    def normalise(self, xs: list[float], *, centre: bool = True, scale: bool = True, eps: float = 1e-6) -> list[float]:
        """reward_norm with norm_mean_type / norm_std_type 'running' (update first, then normalise)."""
        self.update(xs)
        mean = self.mean if centre else 0.0
        return [(x - mean) / (self.std + eps) if scale else x - mean for x in xs]
