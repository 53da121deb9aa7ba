"""Per-step metrics as JSON lines, flushed every step so an interrupted run stays readable."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # strict JSON has no NaN/Inf
    return value


class MetricsWriter:
    """Append-only JSONL file; one object per training step.

    `path=None` keeps the records in memory only: data-parallel ranks other
    than 0 hold the same (reduced) rows but must not write the shared file.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = None if path is None else Path(path)
        self._fh = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("w", encoding="utf-8")
        self.records: list[dict[str, Any]] = []

    def write(self, record: Mapping[str, Any]) -> None:
        row = {k: _plain(v) for k, v in record.items()}
        if self._fh is not None:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        self.records.append(row)

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All complete records of a metrics file (a torn last line is ignored)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def masked_stats(x: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """Mean and (population) std of `x` over active positions."""
    values = x[mask.bool()].double()
    if values.numel() == 0:
        return 0.0, 0.0
    return float(values.mean()), float(values.std(unbiased=False))


def window_mean(records: list[dict[str, Any]], key: str, *, first: int | None = None,
                last: int | None = None) -> float | None:
    """Mean of `key` over the first or last records (None when there are none)."""
    rows = records[:first] if first is not None else records[-last:] if last else records
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None
