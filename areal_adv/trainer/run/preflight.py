"""Cross-field facts checked before launch, by `areal-adv validate` and at trainer start.

Every config section checks itself when the YAML loads; what needs the model's
files, the tokenizer or the task's rows cannot be known then. Once the task side
is resolved (`areal_adv.trainer.run.task_setup`), and before any step, this module checks:

* the context: every prompt of `data.train` (for a task that generates its
  problems: the first `GENERATED_ROWS` problems the run draws) and every
  evaluation row, encoded exactly as the rollout encodes it, plus the first
  turn's token budget (`rollout.max_new_tokens`, else `actor.max_new_tokens`,
  capped by the task's `max_turn_tokens`) fits `max_position_embeddings`
  (the checkpoint's config.json, or the random-init `model.*` architecture);
* every column a reward function requires (a parameter without a default,
  other than `prompts`, `completions`, `completion_ids`) is a column of the
  rows it scores, so the data's schema and the function's signature agree;
* (validate only; the trainer checks the loaded embedding) the tokenizer fits
  the checkpoint's `vocab_size`.

`validate` builds the run's tokenizer and a `ModelFacts` stand-in (the model's
config and generation config, no weights) and hands it to the trainer's own
`build_runtime`; the trainer runs `check_before_launch` on its real runtime, so
both fail with the same one-line `ConfigError`.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.train_args import ExperimentConfig, ModelConfig
from areal_adv.trainer.rollout.prompt_data import rows_of
from areal_adv.trainer.rollout.reward_functions import RewardFunction
from areal_adv.trainer.rollout.tasks.runtime import TaskRuntime

__all__ = [
    "GENERATED_ROWS",
    "ContextFit",
    "ModelFacts",
    "PreflightReport",
    "RowSet",
    "check_before_launch",
    "check_context",
    "check_reward_columns",
    "model_facts",
    "preflight_runtime",
    "run_rows",
]

#: Problems drawn from a procedural task's generator for the context check (the run's first ones).
GENERATED_ROWS = 64
#: Reward-function parameters the trainer fills itself (not data columns).
_CALL_ARGUMENTS = frozenset({"prompts", "completions", "completion_ids"})


@dataclass(frozen=True)
class ModelFacts:
    """What the run's model will be, without its weights: `config` and `generation_config`.

    It has the two attributes `task_setup.build_runtime` reads from a model, so
    `validate` builds the trainer's own runtime (context limit, stop tokens).
    """

    config: Any
    generation_config: Any


@dataclass(frozen=True)
class RowSet:
    """Rows the run will encode and score, and the field they come from (for messages)."""

    field: str
    rows: list[dict[str, Any]]
    columns: frozenset[str]


def model_facts(cfg: ModelConfig, tokenizer: Any) -> ModelFacts:
    """The checkpoint's config (local files only) or the random-init architecture's."""
    from transformers import AutoConfig, GenerationConfig

    if cfg.path is None:
        from areal_adv.trainer.lm.model import special_ids, tiny_config

        config = tiny_config(cfg, len(tokenizer), special_ids(tokenizer))
        return ModelFacts(config, GenerationConfig.from_model_config(config))
    extra = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    where = f"model.gguf_file={cfg.gguf_file!r}" if cfg.gguf_file else f"model.path={cfg.path!r}"
    try:
        config = AutoConfig.from_pretrained(cfg.path, local_files_only=True, **extra)
    except (OSError, ValueError, ImportError, KeyError) as exc:
        raise ConfigError(f"{where}: cannot read the checkpoint's config ({type(exc).__name__}: {exc})") from exc
    try:
        generation = GenerationConfig.from_pretrained(cfg.path, local_files_only=True, **extra)
    except (OSError, ValueError, KeyError):  # no generation_config.json: transformers derives one likewise
        generation = GenerationConfig.from_model_config(config)
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and len(tokenizer) > vocab:
        raise ConfigError(
            f"{where}: the tokenizer has {len(tokenizer)} tokens but the model's config has "
            f"vocab_size={vocab}; the checkpoint and its tokenizer do not match"
        )
    return ModelFacts(config, generation)


def preflight_runtime(cfg: ExperimentConfig, parts: Any) -> TaskRuntime:
    """The run's tokenizer and `TaskRuntime`, built as the trainer builds them, on `ModelFacts`."""
    from areal_adv.trainer.lm.tokenizer import build_tokenizer
    from areal_adv.trainer.run.task_setup import build_runtime

    task = parts.task
    tokenizer = build_tokenizer(cfg.model, getattr(task, "vocabulary", None), getattr(task, "stop_words", ()) or ())
    return build_runtime(cfg, parts, tokenizer, model_facts(cfg.model, tokenizer))


def _dataset_rows(field: str, dataset: Any, prompt_key: str) -> RowSet:
    columns = frozenset(dataset.column_names) - {prompt_key}
    return RowSet(field, rows_of(dataset, list(range(len(dataset)))), columns)


def _generated(field: str, rows: list[dict[str, Any]], prompt_key: str) -> RowSet:
    return RowSet(field, rows, frozenset(k for row in rows for k in row) - {prompt_key})


def run_rows(cfg: ExperimentConfig, parts: Any, eval_rows: Sequence[dict[str, Any]]) -> list[RowSet]:
    """Every training row (or the first generated problems) and the evaluation rows.

    Generated problems come from a fresh `random.Random(cfg.seed)`, the run's own
    sequence, so the check never draws from (or shifts) the trainer's generator.
    """
    key = cfg.data.prompt_key
    if parts.train_data is not None:
        sets = [_dataset_rows("data.train", parts.train_data, key)]
    else:
        rng = random.Random(cfg.seed)
        sets = [
            _generated(
                "the task's generated problems", [parts.task.sample(rng, "train") for _ in range(GENERATED_ROWS)], key
            )
        ]
    if eval_rows:
        field = "data.eval" if parts.eval_data is not None else "the task's evaluation problems"
        if parts.eval_data is not None:
            sets.append(RowSet(field, list(eval_rows), frozenset(parts.eval_data.column_names) - {key}))
        else:
            sets.append(_generated(field, list(eval_rows), key))
    return sets


def _required_columns(rf: RewardFunction) -> list[str]:
    """Parameters the function needs from the data: named, without a default, not filled by the trainer.

    A function with `**kwargs` still needs its named ones (`answer` in
    `fn(prompts, completions, answer, **kwargs)`).
    """
    try:
        params = inspect.signature(rf.fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.name not in _CALL_ARGUMENTS
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]


def check_reward_columns(functions: Sequence[RewardFunction], row_sets: Sequence[RowSet]) -> None:
    """Each reward function's required columns exist in every row set it will score."""
    for rf in functions:
        needed = _required_columns(rf)
        for rows in row_sets:
            missing = [name for name in needed if name not in rows.columns]
            if missing:
                raise ConfigError(
                    f"{rf.where}: its parameter{'s' if len(missing) > 1 else ''} {missing} "
                    f"{'are not columns' if len(missing) > 1 else 'is not a column'} of {rows.field} "
                    f"(columns: {sorted(rows.columns)}; the prompt column is passed as prompts); rename the "
                    "parameter, give it a default, or take **kwargs"
                )


def first_turn_cap(runtime: TaskRuntime, budget: int) -> int:
    """Tokens the first turn may generate: the episode budget, capped by the task's per-turn cap."""
    cap = runtime.max_turn_tokens
    return budget if cap is None else min(cap, budget)


def budget_field(cfg: ExperimentConfig) -> str:
    """The key that sets the generation budget: `rollout.max_new_tokens` when set, else `actor.max_new_tokens`."""
    return "rollout.max_new_tokens" if cfg.rollout.max_new_tokens is not None else "actor.max_new_tokens"


def cap_source(runtime: TaskRuntime, cap: int, budget: int, field: str) -> str:
    """What sets a turn's or a completion's token cap, in words: the task's turn cap or the budget key."""
    return f"task {runtime.implementation!r} caps a turn at {cap}" if cap < budget else f"{field}={budget}"


def longest_completion(runtime: TaskRuntime, budget: int, field: str) -> tuple[int, str]:
    """(tokens, what sets them): the longest completion an episode can produce.

    A single-turn task's episode is one turn, so its turn cap bounds it (the
    number the context check adds to every prompt); a multi-turn episode's turns
    share the budget. `validate` uses it for both lines, and `--dry-run` scores a
    completion that long.
    """
    cap = budget if runtime.multi_turn else first_turn_cap(runtime, budget)
    return cap, cap_source(runtime, cap, budget, field)


@dataclass(frozen=True)
class ContextFit:
    """The longest prompt the run will encode, the first turn's budget and the model's context."""

    longest: int
    field: str
    index: int
    cap: int
    limit: int | None
    source: str = ""  # what sets `cap` (`cap_source`)


@dataclass(frozen=True)
class PreflightReport:
    """What the checks before launch looked at (printed by `areal-adv validate`)."""

    row_sets: list[RowSet]
    fit: ContextFit | None
    multi_turn: bool = False  # the context check then covers the first turn

    def describe(self) -> str:
        checked = ", ".join(f"{len(r.rows)} of {r.field}" for r in self.row_sets)
        fit = self.fit
        if fit is None:
            return f"no prompt to check ({checked})"
        turn = " in its first turn" if self.multi_turn else ""
        head = (
            f"the longest prompt ({fit.longest} tokens, {fit.field} row {fit.index}) plus {fit.cap} to generate"
            f"{turn} ({fit.source})"
        )
        if fit.limit is None:
            return f"{head}; the model declares no max_position_embeddings, so nothing bounds it ({checked})"
        return f"{head} fits max_position_embeddings={fit.limit} (prompts checked: {checked})"


def _longest_prompt(runtime: TaskRuntime, row_sets: Sequence[RowSet]) -> tuple[int, str, int, Any] | None:
    """(tokens, field, row index, prompt) of the longest prompt, encoded by `runtime.open` as the rollout does."""
    longest: tuple[int, str, int, Any] | None = None
    for rows in row_sets:
        for index, row in enumerate(rows.rows):
            episode = runtime.open(row, index)
            if longest is None or len(episode.prompt_ids) > longest[0]:
                longest = (len(episode.prompt_ids), rows.field, index, episode.prompt)
    return longest


def check_context(
    runtime: TaskRuntime, row_sets: Sequence[RowSet], budget: int, budget_field: str, *, random_init: bool = False
) -> ContextFit | None:
    """Every prompt plus the first turn's tokens fits the model's context (`runtime.max_length`).

    The prompts are encoded as the rollout encodes them (chat template, the
    task's `prompt(row)` or environment `reset()`); the error names the longest
    prompt and the largest budget that would fit every row.
    """
    found = _longest_prompt(runtime, row_sets)
    if found is None:
        return None
    n, field, index, prompt = found
    cap = first_turn_cap(runtime, budget)
    fit = ContextFit(n, field, index, cap, runtime.max_length, cap_source(runtime, cap, budget, budget_field))
    if fit.limit is None or n + fit.cap <= fit.limit:
        return fit
    shown = prompt if isinstance(prompt, str) else str(prompt)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    fix = (
        f"lower {budget_field} to at most {fit.limit - n} or shorten the prompts"
        if fit.limit > n
        else "the prompt alone fills the context, so shorten the prompts"
    )
    if random_init:
        fix += ", or raise model.max_position_embeddings"
    raise ConfigError(
        f"{budget_field}: {field} row {index} (prompt {shown!r}): a context of {n} tokens plus {fit.cap} to "
        f"generate exceeds the model's max_position_embeddings={fit.limit}; {fix}"
    )


def check_before_launch(
    cfg: ExperimentConfig, parts: Any, runtime: TaskRuntime, eval_rows: Sequence[dict[str, Any]]
) -> PreflightReport:
    """The reward columns and the context, on the rows the run will use."""
    row_sets = run_rows(cfg, parts, eval_rows)
    check_reward_columns(parts.reward_functions, row_sets)
    fit = check_context(runtime, row_sets, cfg.generation_budget, budget_field(cfg), random_init=cfg.model.path is None)
    return PreflightReport(row_sets, fit, runtime.multi_turn)
