"""Reward functions in TRL's convention, summed with weights into the episode reward.

`fn(prompts, completions, **columns) -> list[float]`, called with keywords as
TRL's GRPOTrainer does: `prompts` are the rows' prompts (text or messages),
`completions` the decoded completions (for chat prompts TRL's
`[{"role": "assistant", "content": ...}]`), and `columns` the rows' other
fields (e.g. `answer`), plus `completion_ids` for functions that take it. A
function without `**kwargs` receives only the columns it names. The task's own
score is one more component. Every component is kept per row
(`RewardBreakdown.values`, [N, K]) and logged as `reward/<name>`.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.train_args import RewardFunctionConfig
from areal_adv.utils.dynamic_import import PluginResolutionError, import_object


class RewardFunctionError(ValueError):
    """A reward function raised, or returned the wrong number of values or a non-finite one."""


#: The batch stores rewards as float32: a finite float64 beyond this would become inf there.
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def fits_float32(value: float) -> bool:
    """Finite, and still finite once stored in a float32 reward tensor."""
    return math.isfinite(value) and abs(value) <= FLOAT32_MAX


@dataclass(frozen=True)
class RewardFunction:
    """A resolved reward component: `weight * fn(...)` (`columns`: None = it takes **kwargs)."""

    name: str
    where: str
    fn: Callable[..., Any]
    weight: float
    columns: frozenset[str] | None


def _named_parameters(
    fn: Callable[..., Any], kwargs: Mapping[str, Any], where: str, path: str
) -> frozenset[str] | None:
    """The keywords `fn` accepts (None when it has **kwargs); it must take prompts and completions."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = signature.parameters
    try:
        signature.bind_partial(prompts=None, completions=None, **kwargs)
    except TypeError as exc:
        raise PluginResolutionError(
            where,
            path,
            f"its signature ({', '.join(map(str, params.values()))}) cannot "
            f"take prompts=, completions= and the configured kwargs {sorted(kwargs)}: "
            f"{exc}",
        ) from None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    names = frozenset(
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )
    missing = [n for n in ("prompts", "completions") if n not in names]
    if missing:
        raise PluginResolutionError(
            where,
            path,
            f"its signature ({', '.join(map(str, params.values()))}) has no "
            f"parameter {missing}; expected fn(prompts, completions, **columns)",
        )
    return names


def resolve_reward_functions(specs: Sequence[RewardFunctionConfig]) -> list[RewardFunction]:
    """Import every configured reward function (on each rank, at start-up)."""
    out = []
    for i, spec in enumerate(specs):
        where = f"reward[{i}] ({spec.name})"
        raw = import_object(spec.implementation, stage=where)
        if not callable(raw):
            raise PluginResolutionError(
                where, spec.implementation, f"resolved to a {type(raw).__name__}, which is not callable"
            )
        columns = _named_parameters(raw, spec.kwargs, where, spec.implementation)
        fn = functools.partial(raw, **spec.kwargs) if spec.kwargs else raw
        if columns is not None:
            columns = columns - set(spec.kwargs)
        out.append(RewardFunction(spec.name, f"{where} {spec.implementation!r}", fn, float(spec.weight), columns))
    return out


@dataclass(frozen=True)
class RewardBreakdown:
    """Per-row reward components and their weighted sum."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    values: torch.Tensor  # [N, K] float64, the raw (unweighted) component values
    total: torch.Tensor  # [N] float64, sum_k weights[k] * values[:, k]

    def row(self, i: int) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.names, self.values[i].tolist())}

    def means(self) -> dict[str, float]:
        """`reward/<name>`: each component's mean over the rows."""
        if self.values.shape[0] == 0:
            return {}
        return {f"reward/{n}": float(v) for n, v in zip(self.names, self.values.mean(dim=0).tolist())}


def _snippet(prompt: Any) -> str:
    text = prompt if isinstance(prompt, str) else str(prompt)
    return text if len(text) <= 60 else text[:57] + "..."


def _completion_text(completion: Any) -> str:
    """The text of a completion: as is, or the content of TRL's `[{"role": "assistant", "content": ...}]`."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", completion))
    return completion if isinstance(completion, str) else str(completion)


def _pair(i: int, prompts: Sequence[Any], completions: Sequence[Any] | None) -> str:
    """`(prompt '...', completion '...')` of row `i`."""
    shown = "" if completions is None else f", completion {_snippet(_completion_text(completions[i]))!r}"
    return f"(prompt {_snippet(prompts[i])!r}{shown})"


def row_label(i: int, prompts: Sequence[Any], completions: Sequence[Any] | None) -> str:
    """`row i (prompt '...', completion '...')`: what a per-row error names, so the failing pair can be rerun."""
    return f"row {i} {_pair(i, prompts, completions)}"


def check_values(
    values: Any, n: int, where: str, prompts: Sequence[Any], completions: Sequence[Any] | None = None
) -> list[float]:
    """`n` finite numbers, or an error naming `where` and the offending row (its prompt and completion)."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise RewardFunctionError(f"{where}: returned {type(values).__name__}, expected a list of {n} floats")
    values = list(values)
    if len(values) != n:
        raise RewardFunctionError(f"{where}: returned {len(values)} values for {n} completions")
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, numbers.Real) or not math.isfinite(float(v)):
            raise RewardFunctionError(
                f"{where}: {row_label(i, prompts, completions)}: got {v!r}, expected a finite number"
            )
        if not fits_float32(float(v)):
            raise RewardFunctionError(
                f"{where}: {row_label(i, prompts, completions)}: got {v!r}, expected a "
                f"finite number within the float32 range (|x| <= {FLOAT32_MAX:.3g}); the "
                "batch stores rewards as float32, where it would be inf"
            )
        out.append(float(v))
    return out


def _columns(rows: Sequence[Mapping[str, Any]], skip: str | None) -> dict[str, list[Any]]:
    keys = dict.fromkeys(k for row in rows for k in row if k != skip)
    return {k: [row.get(k) for row in rows] for k in keys}


def call_reward_function(
    rf: RewardFunction,
    prompts: Sequence[Any],
    completions: Sequence[Any],
    columns: Mapping[str, list[Any]],
    completion_ids: Sequence[Sequence[int]],
) -> list[float]:
    available = {**columns, "completion_ids": [list(c) for c in completion_ids]}
    kwargs = available if rf.columns is None else {k: v for k, v in available.items() if k in rf.columns}
    try:
        values = rf.fn(prompts=list(prompts), completions=list(completions), **kwargs)
    except Exception as exc:
        found, cause = _rescore_rows(rf, exc, prompts, completions, kwargs)
        raise RewardFunctionError(
            f"{rf.where}: raised {type(exc).__name__}: {exc} (on {len(prompts)} completions; "
            f"columns passed: {sorted(kwargs)}); {found}"
        ) from (cause or exc)
    return check_values(values, len(prompts), rf.where, prompts, completions)


def _call_rows(
    rf: RewardFunction,
    rows: Sequence[int],
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, list[Any]],
) -> BaseException | None:
    """Call `rf` on the rows `rows` only; the exception it raises, or None."""
    try:
        rf.fn(
            prompts=[prompts[i] for i in rows],
            completions=[completions[i] for i in rows],
            **{k: [v[i] for i in rows] for k, v in kwargs.items()},
        )
    except Exception as exc:
        return exc
    return None


def _rescore_rows(
    rf: RewardFunction,
    exc: BaseException,
    prompts: Sequence[Any],
    completions: Sequence[Any],
    kwargs: Mapping[str, list[Any]],
) -> tuple[str, BaseException | None]:
    """After a batch call raised: which rows reproduce the failure, said in words (and the row's own exception).

    Every row is scored alone; the rows that raise alone are the cause only if
    the batch without them scores (a function that indexes a neighbouring row
    fails alone and in any batch, so no row is to blame). A reward function may
    therefore be called again after it failed (docs/training.md, "Reward functions").
    """
    n = len(prompts)
    alone = {i: e for i in range(n) if (e := _call_rows(rf, [i], prompts, completions, kwargs)) is not None}
    if not alone:
        return "the error is not tied to one row: called again one row at a time, every row scored", None
    first, row_exc = next(iter(alone.items()))
    rest = [i for i in range(n) if i not in alone]
    if n > 1 and (not rest or _call_rows(rf, rest, prompts, completions, kwargs) is not None):
        which = (
            "every row fails on its own"
            if not rest
            else f"rows {sorted(alone)} fail on their own, and the batch without them fails too"
        )
        return (
            f"the error is not tied to one row: {which}, e.g. {row_label(first, prompts, completions)}: "
            f"{type(row_exc).__name__}: {row_exc}"
        ), row_exc
    same = f"{row_exc}" == f"{exc}" and type(row_exc) is type(exc)
    more = f" ({len(alone)} rows fail alone: {sorted(alone)})" if len(alone) > 1 else ""
    return (
        f"first failing row: {first} {_pair(first, prompts, completions)}"
        f"{'' if same else f': {type(row_exc).__name__}: {row_exc}'}{more}"
    ), row_exc


class RewardSet:
    """The task's own score (when it has one) plus the configured reward functions."""

    def __init__(
        self,
        functions: Sequence[RewardFunction],
        task_name: str | None,
        task_weight: float = 1.0,
        prompt_key: str | None = None,
    ) -> None:
        self.functions = list(functions)
        self.task_name = task_name
        self.task_weight = float(task_weight)
        self.prompt_key = prompt_key
        self.names = tuple(([task_name] if task_name else []) + [f.name for f in self.functions])
        self.weights = tuple(([self.task_weight] if task_name else []) + [f.weight for f in self.functions])
        if not self.names:
            raise ValueError(
                "reward: the task has no score of its own and no reward function is configured; "
                "add reward: [{implementation: pkg.mod.fn, weight: 1.0}]"
            )

    def score(
        self,
        rows: Sequence[Mapping[str, Any]],
        prompts: Sequence[Any],
        completions: Sequence[str],
        completion_ids: Sequence[Sequence[int]],
        task_scores: Sequence[float] | None,
    ) -> RewardBreakdown:
        """Every component for `len(rows)` episodes (`task_scores`: the task's own, already checked)."""
        n = len(rows)
        cols: list[list[float]] = []
        if self.task_name:
            if task_scores is None or len(task_scores) != n:
                raise ValueError("RewardSet.score: the task's scores are missing")
            cols.append([float(s) for s in task_scores])
        if self.functions:
            trl_completions = [
                [{"role": "assistant", "content": c}] if not isinstance(p, str) else c
                for p, c in zip(prompts, completions)
            ]
            columns = _columns(rows, self.prompt_key)
            for rf in self.functions:
                cols.append(call_reward_function(rf, prompts, trl_completions, columns, completion_ids))
        values = torch.tensor(cols, dtype=torch.float64).T.reshape(n, len(self.names))
        weights = torch.tensor(self.weights, dtype=torch.float64)
        total = values @ weights
        self._check_fits(values, total, prompts, completions)
        return RewardBreakdown(self.names, self.weights, values, total)

    def _check_fits(
        self, values: torch.Tensor, total: torch.Tensor, prompts: Sequence[Any], completions: Sequence[Any]
    ) -> None:
        """Every component (the task's accumulated score included) and the weighted total fit in float32."""
        bad_values = ~(torch.isfinite(values) & (values.abs() <= FLOAT32_MAX))
        if bool(bad_values.any()):
            row, k = bad_values.nonzero()[0].tolist()
            where = (
                f"task score {self.names[k]!r} (summed over the episode's turns)"
                if self.task_name and k == 0
                else f"reward function {self.names[k]!r}"
            )
            raise RewardFunctionError(
                f"reward: {row_label(row, prompts, completions)}: {where} is "
                f"{float(values[row, k])!r}, beyond the float32 range of the batch's rewards "
                f"(|x| <= {FLOAT32_MAX:.3g})"
            )
        bad_total = ~(torch.isfinite(total) & (total.abs() <= FLOAT32_MAX))
        if bool(bad_total.any()):
            row = int(bad_total.nonzero()[0])
            terms = ", ".join(
                f"{name}={float(v)!r} x {w!r}" for name, v, w in zip(self.names, values[row], self.weights)
            )
            raise RewardFunctionError(
                f"reward: {row_label(row, prompts, completions)}: the weighted sum of the "
                f"components ({terms}) is {float(total[row])!r}, beyond the float32 range of the "
                f"batch's rewards (|x| <= {FLOAT32_MAX:.3g}); lower the weights or the values"
            )
