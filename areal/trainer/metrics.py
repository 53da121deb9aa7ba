"""Per-step metrics as JSON lines, flushed every step so an interrupted run stays readable."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch


def plain_value(value: Any) -> Any:
    """A JSON-ready scalar: tensors become numbers, NaN/Inf become None."""
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # strict JSON has no NaN/Inf
    return value


class MetricsWriter:
    """Append-only JSONL file; one object per training step.

    `path=None` keeps the records in memory only: data-parallel ranks other
    than 0 hold the same (reduced) rows but must not write the shared file.
    `initial` rows (a resumed run's steps before its checkpoint) replace the
    file's contents first, so rows a killed run wrote after the checkpoint are
    dropped and the file continues with no gap and no duplicate.
    """

    def __init__(self, path: Path | None, initial: Sequence[Mapping[str, Any]] = ()) -> None:
        self.path = None if path is None else Path(path)
        self._fh = None
        self.records: list[dict[str, Any]] = [dict(r) for r in initial]
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_jsonl(self.path, self.records)
            self._fh = self.path.open("a", encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        row = {k: plain_value(v) for k, v in record.items()}
        if self._fh is not None:
            self._fh.write(json.dumps(row) + "\n")
            self._fh.flush()
        self.records.append(row)

    def close(self) -> None:
        if self._fh is not None and not self._fh.closed:
            self._fh.close()


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replace `path` by these rows, atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
