"""`areal-adv validate --dry-run`: every configured stage on a synthetic batch, every reward on real rows.

Resolving a plugin proves it imports and takes its kwargs; it does not prove it
returns the right shape or dtype. The dry run builds a few synthetic episodes
with the layout the trainer would export for this config — the same
`EpisodeRecord` exporters, so the same padding, `turn_ids`, `is_truncated`,
process rewards when the config uses them, split rollouts (`RolloutGroup`, with
explicit references when configured), `reward_baselines` for ReMax, critic
values, reference and proximal log-probs when the config reads them — and runs
`PPOActor.compute_advantages` on it exactly as `Trainer.compute_advantages`
does. Every stage runs under its contract, so a plugin returning a wrong shape,
dtype or device fails here, before launch, with the stage and path named.

No model is built: tokens are arbitrary ids and log-probs are drawn at random.

`dry_run_rewards` then scores two real rows — the first two of `data.train`, or
the first two problems the task generates for the run's seed — with four dummy
completions in turn: a number, a few words, an empty completion (what a policy
that stops at once produces) and one as long as a completion of the run can be
(`max_new_tokens`, or a single-turn task's turn cap: what a truncated sample produces), through the run's own `TaskRuntime` (`preflight.preflight_runtime`):
the task's own scorer (`score(row, completion)`, or one `environment.step`) and
every reward function, with the columns, the TRL completion format and the
return checks (`rewards.call_reward_function` / `check_values`) of a training
step. A function that raises, returns the wrong number of values or a
non-finite one fails here with the line it would fail with at step 1.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.trainer.ppo.estimators.combine import reads_reference
from areal_adv.trainer.rollout.episodes import EpisodeRecord, add_reward_baselines, export_episodes, export_turn_rows
from areal_adv.trainer.rollout.stage_fields import add_prompt_keys, stage_batch_fields
from areal_adv.utils.data import concat_batch

__all__ = [
    "BUDGET_FILLER",
    "DUMMY_COMPLETIONS",
    "DryRunReport",
    "RewardDryRun",
    "budget_completion_ids",
    "dry_run",
    "dry_run_rewards",
    "reward_rows",
    "synthetic_batch",
]

N_PROMPTS = 2
MAX_SAMPLES = 4
PAD_ID = 0
#: What the policy "generates" for the reward dry run: a number, a few words and nothing at all (tokenised and
#: decoded by the run's tokenizer, so a word tokenizer may turn words it does not know into an empty completion);
#: `dry_run_rewards` adds a fourth, the generation budget filled with `BUDGET_FILLER`.
DUMMY_COMPLETIONS = ("0", "a short dummy completion", "")
BUDGET_FILLER = " a short dummy completion"


@dataclass(frozen=True)
class DryRunReport:
    """What the dry run ran on (for the `validate` output)."""

    n_rows: int
    n_pos: int
    layout: str


def _max_turns(cfg: Any, task: Any | None) -> int:
    """Turns per episode of the configured task: 1 single-turn, else its `max_turns` (3 when it has none).

    `task` is the object `validate` already built; without it the task is built
    here (a task that cannot be built gets the general, multi-turn layout).
    """
    if task is None:
        try:
            from areal_adv.trainer.rollout.tasks.registry import make_task

            task = make_task(cfg.task, seed=cfg.seed, prompt_key=cfg.data.prompt_key)
        except Exception:  # validate reports a task that fails to build; the layout stays general
            return 3
    if not getattr(task, "multi_turn", False):
        return 1
    turns = getattr(getattr(task, "spec", None), "max_turns", None) or getattr(task, "max_turns", None)
    return int(turns) if isinstance(turns, int) and turns >= 1 else 3


def _needs_process_rewards(cfg: Any) -> bool:
    spec = cfg.actor.advantage.process_adv_shaping
    return bool(cfg.rollout.prm.enabled) or (spec is not None and spec.implementation != "auto")


def _process_weighted(cfg: Any) -> bool:
    spec = cfg.actor.advantage.process_adv_shaping
    if spec is not None:
        return spec.implementation == "process_weighted"
    return cfg.rollout.prm.advantage_shaping.mode == "process_weighted"


def _episode(rng: random.Random, turns: int, signed: bool) -> EpisodeRecord:
    """A prompt, `turns` generated turns with environment tokens between them, a reward."""
    record = EpisodeRecord.start([rng.randrange(1, 50) for _ in range(rng.randint(2, 4))])
    for turn in range(turns):
        ids = [rng.randrange(1, 50) for _ in range(rng.randint(1, 3))]
        score = rng.choice([-1.0, 1.0]) if signed else rng.choice([0.0, 0.5, 1.0])
        record.add_turn(ids, [-rng.random() * 3 for _ in ids], score)
        if turn < turns - 1:
            record.add_environment([rng.randrange(1, 50) for _ in range(rng.randint(1, 2))])
    record.reward = float(rng.random() < 0.5)
    record.truncated = rng.random() < 0.25
    return record


def _groups(cfg: Any, rng: random.Random, task: Any | None) -> list[dict[str, Any]]:
    max_turns = max(1, min(_max_turns(cfg, task), 3))
    signed = not _process_weighted(cfg)
    with_process = _needs_process_rewards(cfg)
    n_samples = max(1, min(cfg.rollout.n_samples, MAX_SAMPLES))
    groups = []
    for _ in range(N_PROMPTS):
        records = [_episode(rng, rng.randint(1, max_turns), signed) for _ in range(n_samples)]
        if cfg.rollout.export == "per_turn":
            group = export_turn_rows(
                records, PAD_ID, with_process=with_process, explicit_rewards=cfg.rollout.explicit_rollout_rewards
            )
        else:
            group = export_episodes(records, PAD_ID, with_process=with_process)
        if cfg.rollout.greedy_baseline:
            group = add_reward_baselines(group, float(rng.random() < 0.5))
        groups.append(group)
    return add_prompt_keys(groups, [f"dry-run prompt {i}" for i in range(len(groups))])  # as the trainer: always


def synthetic_batch(
    cfg: Any,
    seed: int = 0,
    task: Any | None = None,
    fields: frozenset[str] = frozenset(),
    *,
    min_positions: int = 0,
) -> tuple[dict[str, Any], Any]:
    """(batch, meta) in the layout the trainer exports and prepares for `cfg` (an ExperimentConfig).

    `fields`: the optional fields the configured stages declare they read
    (`stage_fields.stage_batch_fields`); `token_entropy` is then added like the trainer's
    (entropies in [0, log 1000] stored at each token, 0 at position 0 and on padding), and
    `sum_pi_squared` consistent with each generated token's log-prob. `min_positions`
    right-pads the batch to at least that many positions (a wide batch with the same rows,
    for the kernel warm-up's large-batch pass).
    """
    rng = random.Random(seed)
    batch, meta = concat_batch(_groups(cfg, rng, task), min_positions=min_positions)
    gen = torch.Generator().manual_seed(seed)
    shape = batch["input_ids"].shape
    estimator = cfg.actor.advantage.estimator
    if cfg.actor.kl_ctl != 0 or (estimator is not None and reads_reference(estimator.implementation, estimator.kwargs)):
        batch["ref_logp"] = -torch.rand(shape, generator=gen) * 3 * batch["attention_mask"]
    if cfg.critic.enabled:
        batch["values"] = torch.randn(shape, generator=gen) * batch["attention_mask"]
    if cfg.actor.recompute_logprob or cfg.actor.use_decoupled_loss:
        batch["prox_logp"] = -torch.rand(shape, generator=gen) * 3 * batch["attention_mask"]
    if "role_ids" in fields:  # seats 0, 1, 0, ... over each prompt group's logical rollouts, one game
        sizes = torch.as_tensor(meta.logical_group_sizes)
        seat = (torch.arange(meta.n_logical) - (torch.cumsum(sizes, 0) - sizes)[meta.logical_group_index()]) % 2
        batch["role_ids"] = seat[meta.logical_row_index()]
        batch["game_ids"] = torch.zeros(shape[0], dtype=torch.long)
    if "token_entropy" in fields:
        entropy = torch.rand(shape, generator=gen) * 6.9 * batch["attention_mask"]
        entropy[:, 0] = 0.0
        batch["token_entropy"] = entropy
    if (
        "sum_pi_squared" in fields
    ):  # a distribution with pi_t on the sampled token: pi_t^2 <= Σπ² <= pi_t^2 + (1 - pi_t)^2
        pi = batch["logprobs"].exp()
        spread = torch.rand(shape, generator=gen)
        batch["sum_pi_squared"] = (pi**2 + spread * (1 - pi) ** 2) * batch["loss_mask"]
    return batch, meta


def _describe(cfg: Any, batch: dict[str, Any], meta: Any) -> str:
    turns = int(batch["turn_ids"].max()) + 1 if "turn_ids" in batch else 1
    parts = [
        f"{N_PROMPTS} prompts x {max(1, min(cfg.rollout.n_samples, MAX_SAMPLES))} samples",
        f"up to {turns} turn{'s' if turns > 1 else ''} per row",
    ]
    keys: Sequence[tuple[str, str]] = (
        ("token_rewards", "process rewards"),
        ("values", "critic values"),
        ("ref_logp", "reference log-probs"),
        ("prox_logp", "proximal log-probs"),
        ("reward_baselines", "reward baselines"),
    )
    parts += [label for key, label in keys if key in batch]
    if meta.rollout_groups is not None:
        refs = any(g is not None and g.rewards is not None for g in meta.rollout_groups)
        parts.append("split rollouts" + (" with explicit references" if refs else ""))
    return ", ".join(parts)


def dry_run(cfg: Any, actor: Any, seed: int = 0, task: Any | None = None) -> DryRunReport:
    """Run `actor.compute_advantages` once on `synthetic_batch(cfg)` as the trainer calls it.

    Raises whatever the pipeline raises (a stage contract error names the stage and path).
    """
    batch, meta = synthetic_batch(cfg, seed, task, stage_batch_fields(actor.resolved))
    actor.compute_advantages(batch, meta, shaping=cfg.rollout.prm.advantage_shaping)
    n_rows, n_pos = batch["input_ids"].shape
    return DryRunReport(n_rows, n_pos, _describe(cfg, batch, meta))


@dataclass(frozen=True)
class RewardDryRun:
    """What the reward dry run scored (for the `validate` output)."""

    components: tuple[str, ...]
    completions: tuple[str, ...]  # as shown: the longest one as `<N tokens: the longest completion, its source>`


def reward_rows(cfg: Any, parts: Any) -> tuple[list[dict[str, Any]], str]:
    """Two real rows: the first of `data.train`, else the task's first problems for the run's seed."""
    from areal_adv.trainer.rollout.prompt_data import TaskPromptSource, rows_of

    n = 2
    if parts.train_data is not None:
        count = min(n, len(parts.train_data))
        return rows_of(parts.train_data, list(range(count))), f"{count} rows of data.train"
    rows = TaskPromptSource(parts.task, random.Random(cfg.seed)).sample(n)
    return rows, f"{n} problems generated by task {cfg.task.implementation!r}"


def budget_completion_ids(tokenizer: Any, budget: int) -> list[int]:
    """`budget` token ids: `BUDGET_FILLER` repeated and cut (a number when the tokenizer knows none of its words)."""
    from areal_adv.trainer.lm.tokenizer import encode_words

    filler = encode_words(tokenizer, BUDGET_FILLER) or encode_words(tokenizer, "0")
    return (filler * (budget // max(1, len(filler)) + 1))[:budget]


def dry_run_rewards(
    runtime: Any, rows: Sequence[dict[str, Any]], budget: int, source: str = "the generation budget"
) -> RewardDryRun:
    """Score the dummy completions (`DUMMY_COMPLETIONS` and one of `budget` tokens) as a training step scores them.

    `budget` is the longest completion the run can produce (`preflight.longest_completion`), `source`
    what sets it, as `validate` shows it.

    The completions take `rows` in turn (completion i scores row i mod len(rows)).
    Raises what the step would raise: `RewardFunctionError` naming the function,
    the row, its prompt and completion, `TaskError` naming the task method and row.
    """
    from areal_adv.trainer.lm.tokenizer import encode_words

    ids = [
        *(encode_words(runtime.tokenizer, text) for text in DUMMY_COMPLETIONS),
        budget_completion_ids(runtime.tokenizer, budget),
    ]
    episodes = [runtime.open(rows[i % len(rows)], i) for i in range(len(ids))]
    completions = [runtime.codec.decode(x) for x in ids]
    env_rewards = [float(runtime.step(ep, text).reward) for ep, text in zip(episodes, completions)]
    breakdown = runtime.score(episodes, completions, ids, env_rewards)
    n = len(ids[-1])
    shown = (*completions[:-1], f"<{n} token{'' if n == 1 else 's'}: the longest completion, {source}>")
    return RewardDryRun(breakdown.names, shown)
