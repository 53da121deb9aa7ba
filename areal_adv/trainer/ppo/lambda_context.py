"""`GAELambdaContext`: what a GAE-lambda function sees, readable as AReaL's dict and by attribute.

AReaL 2 declares the context of its per-row lambda functions as a `TypedDict` with three
tensors (`areal/trainer/ppo/lambda_fn.py`), and its functions index it:
`ctx["timestep_lengths"]`. At run time a `TypedDict` is a plain `dict`. This package's
functions were written against a frozen dataclass and read `ctx.timestep_lengths`. One type
serves both: a read-only `dict` holding AReaL's three keys, with each key also an attribute,
and this package's extra field, `timestep_unit`, as an attribute only (so a function that
iterates the dict sees exactly AReaL's three tensors).

Which way to write a function that must also run inside AReaL's own actor (where it gets a
plain dict): index the context, or start with `ctx = GAELambdaContext.of(ctx)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import torch

__all__ = ["CONTEXT_KEYS", "GAELambdaContext"]

#: AReaL's keys, in its order: generated tokens per row, turns per row, lengths in the estimator's unit.
CONTEXT_KEYS = ("effective_token_lengths", "turn_counts", "timestep_lengths")


class GAELambdaContext(dict[str, torch.Tensor]):
    """Per-row lengths for a GAE-lambda function: `{effective_token_lengths, turn_counts, timestep_lengths}`.

    - `effective_token_lengths` [B] long: generated tokens per row (the loss-mask sum).
    - `turn_counts` [B] long: generated turns per row. Without `turn_ids`: 1 for a row with any
      generated token, else 0 (AReaL's context has 0 there: it fills the field it does not use).
    - `timestep_lengths` [B] long: the same tensor as one of the two above, in the unit of the
      estimator actually used (tokens for token GAE, turns for turn GAE).
    - `timestep_unit` ("token" | "turn", attribute only; None when unknown).

    Read-only: a lambda function computes from the lengths, it does not edit them. Equality is
    identity (tensors have no single truth value to compare dicts of them by).
    """

    __slots__ = ("timestep_unit",)
    timestep_unit: str | None

    def __init__(
        self,
        *,
        effective_token_lengths: torch.Tensor,
        turn_counts: torch.Tensor,
        timestep_lengths: torch.Tensor,
        timestep_unit: str | None = None,
    ) -> None:
        super().__init__(
            effective_token_lengths=effective_token_lengths,
            turn_counts=turn_counts,
            timestep_lengths=timestep_lengths,
        )
        object.__setattr__(self, "timestep_unit", timestep_unit)

    @classmethod
    def of(cls, context: Mapping[str, Any]) -> GAELambdaContext:
        """This context as ours: itself when it is one; from AReaL's dict (its three keys) otherwise.

        AReaL's `timestep_lengths` is the very tensor of the unit it chose, so the unit is read
        from which one it is; a mapping built otherwise gets `timestep_unit` None.
        """
        if isinstance(context, cls):
            return context
        missing = [key for key in CONTEXT_KEYS if key not in context]
        if missing:
            raise KeyError(f"GAELambdaContext.of: the context lacks {missing}; expected the keys {list(CONTEXT_KEYS)}")
        lengths = context["timestep_lengths"]
        unit = (
            "token"
            if lengths is context["effective_token_lengths"]
            else "turn"
            if lengths is context["turn_counts"]
            else None
        )
        return cls(**{key: context[key] for key in CONTEXT_KEYS}, timestep_unit=unit)

    @property
    def effective_token_lengths(self) -> torch.Tensor:
        return self["effective_token_lengths"]

    @property
    def turn_counts(self) -> torch.Tensor:
        return self["turn_counts"]

    @property
    def timestep_lengths(self) -> torch.Tensor:
        return self["timestep_lengths"]

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.items())
        return f"GAELambdaContext({shapes}, timestep_unit={self.timestep_unit!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self), self.timestep_unit))

    def _read_only(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            "GAELambdaContext is read-only: a GAE-lambda function returns lambdas, it does not edit its input"
        )

    __setitem__ = __delitem__ = __ior__ = _read_only
    clear = pop = popitem = setdefault = update = _read_only

    def __setattr__(self, name: str, value: Any) -> None:
        self._read_only()

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]


def _rebuild(items: dict[str, torch.Tensor], unit: str | None) -> GAELambdaContext:
    """Unpickling and `copy.deepcopy` (a read-only dict cannot be refilled item by item)."""
    return GAELambdaContext(**items, timestep_unit=unit)
