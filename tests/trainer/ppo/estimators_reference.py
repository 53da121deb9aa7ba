"""Independent plain-loop references of the 2025-26 estimators, from the papers and the authors' code.

Nothing here imports the package's stage code. Each function loops over groups,
samples, steps and tokens in float64, on plain Python lists, following:

* GDPO - verl 0.9.1 `compute_gdpo_outcome_advantage` (GRPO per component, weighted
  sum, `masked_whiten`);
* KRPO - the authors' `KalmanFilter` / `group_advantages` (billhhh/KRPO_LLMs_RL,
  train.py), plus the persistent per-prompt variant written from its definition;
* SPO - the authors' verl recipe (`spo_ray_trainer.py`: p_hat = alpha/(alpha+beta),
  batch-normalised r - p_hat, alpha = rho alpha + r, beta = rho beta + (1 - r));
* GiGPO - verl-agent `core_gigpo.py` (`compute_step_discounted_returns`,
  `episode_norm_reward` with and without `compute_mean_std_cross_steps`,
  `build_step_group`, `step_norm_reward`), on the authors' one-row-per-step layout;
* MT-GRPO - the authors' `MTGRPOEnvTrainer._assign_advantages` (two turns), and
  its K-turn generalisation as documented;
* entropy shaping - arXiv 2506.14758's psi(H) = min(alpha H, |A| / kappa).

Singleton groups follow the project rule where the references differ (tests use
groups of >= 2 for those).
"""

from __future__ import annotations

import math
from collections import defaultdict


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def std(xs: list[float]) -> float:
    """torch.std: unbiased."""
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


# ---------------------------------------------------------------------------
# GDPO (verl)
# ---------------------------------------------------------------------------


def grpo_scalar(scores: list[float], index: list[int], eps: float = 1e-6, norm_by_std: bool = True) -> list[float]:
    """verl `compute_grpo_outcome_advantage` on per-sample scores (singletons: mean 0, std 1)."""
    groups = defaultdict(list)
    for i, g in enumerate(index):
        groups[g].append(scores[i])
    stats = {g: (0.0, 1.0) if len(v) == 1 else (mean(v), std(v)) for g, v in groups.items()}
    return [(s - stats[g][0]) / (stats[g][1] + eps) if norm_by_std else s - stats[g][0] for s, g in zip(scores, index)]


def masked_whiten(rows: list[list[float]]) -> list[list[float]]:
    """verl `masked_whiten` over all tokens: (x - mean) * rsqrt(unbiased var + 1e-8)."""
    flat = [x for r in rows for x in r]
    m = mean(flat)
    var = sum((x - m) ** 2 for x in flat) / (len(flat) - 1)
    scale = 1.0 / math.sqrt(var + 1e-8)
    return [[(x - m) * scale for x in r] for r in rows]


def gdpo_verl(
    components: list[list[float]],
    weights: list[float],
    index: list[int],
    lengths: list[int],
    eps: float = 1e-6,
    norm_by_std: bool = True,
) -> list[list[float]]:
    """Per row, per generated token: the whitened weighted sum of per-component GRPO advantages."""
    per_row = [0.0] * len(index)
    for k, w in enumerate(weights):
        adv = grpo_scalar([c[k] for c in components], index, eps, norm_by_std)
        per_row = [a + w * b for a, b in zip(per_row, adv)]
    return masked_whiten([[a] * n for a, n in zip(per_row, lengths)])


# ---------------------------------------------------------------------------
# KRPO (the authors' code)
# ---------------------------------------------------------------------------


class KalmanFilter:
    """The authors' 1-D filter: predict P += Q, gain K = P / (P + R), update x, P."""

    def __init__(
        self, process_var: float = 1e-5, meas_var: float = 1e-2, init_mean: float = 0.0, init_var: float = 1.0
    ):
        self.q, self.r, self.x, self.p = process_var, meas_var, init_mean, init_var

    def update(self, z: float) -> tuple[float, float]:
        p_pred = self.p + self.q
        k = p_pred / (p_pred + self.r)
        self.x = self.x + k * (z - self.x)
        self.p = (1 - k) * p_pred
        return self.x, self.p


def krpo_group(returns: list[float], kf: KalmanFilter, eps: float = 1e-8) -> list[float]:
    """The authors' `group_advantages` with a given filter: (r - x) / (sqrt(P) + eps) after each update."""
    out = []
    for r in returns:
        x, p = kf.update(r)
        out.append((r - x) / (math.sqrt(p) + eps))
    return out


class PersistentKRPO:
    """KRPO with one filter per prompt kept across steps (the stage's `carry_over: true`).

    Every group of a step starts from its prompt's filter as it was before the step;
    afterwards the prompt's filter is the one that saw the step's groups one after
    the other, in order of (key, reward sequence).
    """

    def __init__(self, **params: float):
        self.params = params
        self.filters: dict[int, tuple[float, float]] = {}

    def _filter(self, key: int) -> KalmanFilter:
        kf = KalmanFilter(
            self.params.get("process_var", 1e-5),
            self.params.get("meas_var", 1e-2),
            self.params.get("init_mean", 0.0),
            self.params.get("init_var", 1.0),
        )
        if key in self.filters:
            kf.x, kf.p = self.filters[key]
        return kf

    def step(self, groups: list[tuple[int, list[float]]], eps: float = 1e-8) -> list[list[float]]:
        out = [krpo_group(rewards, self._filter(key), eps) for key, rewards in groups]
        chained: dict[int, KalmanFilter] = {}
        for key, rewards in sorted(groups, key=lambda kr: (kr[0], kr[1])):
            kf = chained.setdefault(key, self._filter(key))
            for r in rewards:
                kf.update(r)
        for key, kf in chained.items():
            self.filters[key] = (kf.x, kf.p)
        return out


# ---------------------------------------------------------------------------
# SPO (the authors' verl recipe)
# ---------------------------------------------------------------------------


class SPOTracker:
    """alpha/beta per prompt; advantages r - p_hat, batch-normalised with torch.std + 1e-8."""

    def __init__(self, prior_alpha: float = 0.5, prior_beta: float = 0.5):
        self.prior = (prior_alpha, prior_beta)
        self.ab: dict[int, tuple[float, float]] = {}

    def step(
        self, prompts: list[int], rewards: list[float], rhos: list[float], normalize: bool = True, eps: float = 1e-8
    ) -> list[float]:
        """One batch (one sample per entry). A prompt seen m times adds all m samples after one discount."""
        ab = [self.ab.get(p, self.prior) for p in prompts]
        adv = [r - a / (a + b) for r, (a, b) in zip(rewards, ab)]
        if normalize:
            m = mean(adv)
            s = std(adv) if len(adv) > 1 else 1.0
            adv = [(a - m) / (s + eps) for a in adv]
        seen: dict[int, list[int]] = defaultdict(list)
        for i, p in enumerate(prompts):
            seen[p].append(i)
        for p, members in seen.items():
            a, b = self.ab.get(p, self.prior)
            rho = mean([rhos[i] for i in members])
            self.ab[p] = (rho * a + sum(rewards[i] for i in members), rho * b + sum(1 - rewards[i] for i in members))
        return adv


def spo_rho_from_drift(drift: float, d_half: float = 0.06, low: float = 0.875, high: float = 0.96) -> float:
    """The recipe's `_get_spo_rho` (type kl): clip(2^(-D / D_half), clip_lower, 0.96)."""
    return min(max(2.0 ** (-drift / d_half), low), high)


# ---------------------------------------------------------------------------
# GiGPO (verl-agent) and MT-GRPO (the authors)
# ---------------------------------------------------------------------------


def _row_stats(values: list[float]) -> tuple[float, float]:
    """(mean, std) of one statistics group: torch.mean / torch.std, and a lone member is its own mean."""
    if len(values) == 1:
        return values[0], 1.0
    return mean(values), std(values)


def _normalised(value: float, stats: tuple[float, float], by_std: bool, eps: float) -> float:
    m, s = stats
    return (value - m) / (s + eps) if by_std else value - m


def gigpo_step_rows(groups: list[list[dict]]) -> list[dict]:
    """verl-agent's batch layout: one row per step, tagged with its prompt group (`index`), its episode
    (`traj_index`), its turn, its step reward, its anchor state and its episode's total reward (the
    row's `token_level_rewards` sum, the same on every row of the episode)."""
    rows = []
    for g, episodes in enumerate(groups):
        for e, ep in enumerate(episodes):
            total = sum(ep["rewards"])
            for k, (reward, anchor) in enumerate(zip(ep["rewards"], ep["anchors"])):
                rows.append(
                    {"index": g, "traj_index": (g, e), "turn": k, "reward": reward, "anchor": anchor, "score": total}
                )
    return rows


def gigpo_step_returns(rows: list[dict], gamma: float) -> list[float]:
    """`compute_step_discounted_returns`: per episode, from its last step back, G = r + gamma G."""
    by_traj: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_traj[row["traj_index"]].append(i)
    out = [0.0] * len(rows)
    for members in by_traj.values():
        running = 0.0
        for i in reversed(members):
            running = rows[i]["reward"] + gamma * running
            out[i] = running
    return out


def gigpo_episode_norm(rows: list[dict], by_std: bool, eps: float, cross_steps: bool) -> list[float]:
    """`episode_norm_reward`: each row's episode score against its prompt group's statistics.

    `cross_steps` (`compute_mean_std_cross_steps`, the authors' default True) collects one score
    per row; False only the first row of every episode.
    """
    scores: dict[int, list[float]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for row in rows:
        if row["traj_index"] in seen:
            continue
        scores[row["index"]].append(row["score"])
        if not cross_steps:
            seen.add(row["traj_index"])
    stats = {g: _row_stats(v) for g, v in scores.items()}
    return [_normalised(row["score"], stats[row["index"]], by_std, eps) for row in rows]


def gigpo_step_norm(rows: list[dict], returns: list[float], by_std: bool, eps: float) -> list[float]:
    """`build_step_group` (exact anchors, per prompt group) then `step_norm_reward` on the returns."""
    members: dict[tuple[int, int], list[float]] = defaultdict(list)
    for row, ret in zip(rows, returns):
        members[(row["index"], row["anchor"])].append(ret)
    stats = {key: _row_stats(v) for key, v in members.items()}
    return [_normalised(ret, stats[(row["index"], row["anchor"])], by_std, eps) for row, ret in zip(rows, returns)]


def gigpo(
    groups: list[list[dict]],
    gamma: float,
    step_weight: float = 1.0,
    mode: str = "mean_norm",
    eps: float = 1e-6,
    cross_steps: bool = True,
) -> list[list[list[float]]]:
    """[group][episode][turn] advantages. Each episode: {"rewards": per-turn step rewards, "anchors": per turn}.

    Step rewards already include the outcome on the last turn; the episode score is their sum.
    The authors' flow on their one-row-per-step layout: returns, episode-level and step-level
    normalisation, A = A_episode + step_weight * A_step (their `mean_norm` subtracts the means,
    `mean_std_norm` also divides by std + eps).
    """
    by_std = mode == "mean_std_norm"
    rows = gigpo_step_rows(groups)
    returns = gigpo_step_returns(rows, gamma)
    episode_adv = gigpo_episode_norm(rows, by_std, eps, cross_steps)
    step_adv = gigpo_step_norm(rows, returns, by_std, eps)
    out = [[[0.0] * len(ep["rewards"]) for ep in episodes] for episodes in groups]
    for row, a_episode, a_step in zip(rows, episode_adv, step_adv):
        g, e = row["traj_index"]
        out[g][e][row["turn"]] = a_episode + step_weight * a_step
    return out


def normalise(xs: list[float], eps: float) -> list[float]:
    """(x - mean) / (std + eps) with torch.std, as the authors' `_compute_normalized_advantages`."""
    if len(xs) == 1:
        return [0.0]
    m, s = mean(xs), std(xs)
    return [(x - m) / (s + eps) for x in xs]


def mt_grpo_two_turn(
    outcomes: list[float], turn_rewards: list[float], coef: float = 1.0, eps: float = 1e-4
) -> list[tuple[float, float]]:
    """The authors' two-turn assignment: (first-turn advantage, final-turn advantage) per sample."""
    a_out, a_turn = normalise(outcomes, eps), normalise(turn_rewards, eps)
    return [(o + coef * t, o) for o, t in zip(a_out, a_turn)]


def mt_grpo(
    groups: list[list[dict]], coef: float = 1.0, eps: float = 1e-4, credit: str = "to_go"
) -> list[list[list[float]]]:
    """K turns: A_outcome + coef * (normalised turn rewards from turn k on, or turn k's alone)."""
    out = []
    for episodes in groups:
        a_out = normalise([ep["outcome"] for ep in episodes], eps)
        depth = max(len(ep["turn_rewards"]) for ep in episodes)
        a_turn: dict[tuple[int, int], float] = {}
        for k in range(depth):
            members = [i for i, ep in enumerate(episodes) if len(ep["turn_rewards"]) > k]
            normed = normalise([episodes[i]["turn_rewards"][k] for i in members], eps)
            for i, v in zip(members, normed):
                a_turn[(i, k)] = v
        per_group = []
        for i, ep in enumerate(episodes):
            n = len(ep["turn_rewards"])
            turns = []
            for k in range(n):
                credit_k = sum(a_turn[(i, j)] for j in range(k, n)) if credit == "to_go" else a_turn[(i, k)]
                turns.append(a_out[i] + coef * credit_k)
            per_group.append(turns)
        out.append(per_group)
    return out


# ---------------------------------------------------------------------------
# Entropy-based advantage shaping
# ---------------------------------------------------------------------------


def entropy_shaped(advantage: float, entropy: float, alpha: float, kappa: float) -> float:
    return advantage + min(alpha * entropy, abs(advantage) / kappa)


def mt_grpo_unbiased(groups: list[list[dict]], coef: float = 1.0, eps: float = 1e-4) -> list[list[list[float]]]:
    """`turn_baseline: unbiased`: A_outcome + coef * (G_ik - mean of G_jk over the other episodes reaching turn k)."""
    out = []
    for episodes in groups:
        a_out = normalise([ep["outcome"] for ep in episodes], eps)
        to_go = [[sum(ep["turn_rewards"][k:]) for k in range(len(ep["turn_rewards"]))] for ep in episodes]
        per_group = []
        for i, ep in enumerate(episodes):
            turns = []
            for k in range(len(ep["turn_rewards"])):
                others = [to_go[j][k] for j in range(len(episodes)) if j != i and len(to_go[j]) > k]
                baseline = sum(others) / len(others) if others else 0.0
                turns.append(a_out[i] + coef * (to_go[i][k] - baseline))
            per_group.append(turns)
        out.append(per_group)
    return out
