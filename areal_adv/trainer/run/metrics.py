"""Per-step metrics as JSON lines, flushed every step so an interrupted run stays readable."""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
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


def window_mean(
    records: list[dict[str, Any]], key: str, *, first: int | None = None, last: int | None = None
) -> float | None:
    """Mean of `key` over the first or last records (None when there are none)."""
    rows = records[:first] if first is not None else records[-last:] if last else records
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def reward_windows(rows: int) -> tuple[int, int]:
    """(first, last): the sizes of the run summary's two reward windows over `rows` rows, never overlapping.

    5 and 10 from 15 rows on; a shorter run splits its rows a third / two thirds (3 rows: the first one
    against the last two), so the summary never compares a window with itself; 1 row: (1, 0), 0: (0, 0).
    """
    if rows < 2:
        return rows, 0
    first = min(5, max(1, rows // 3))
    return first, min(10, rows - first)


#: The phases of a step reported as `time/<phase>` (seconds; 0 when the phase did not run).
PHASES = ("rollout", "reference", "advantages", "update", "eval", "save")
#: Metric prefixes and keys that depend on the machine and its load, not on the run's arithmetic.
WALL_CLOCK_PREFIXES = ("time/", "throughput/", "memory/")
WALL_CLOCK_KEYS = ("seconds", "elapsed", "tokens_per_s", "eval/seconds")


def is_wall_clock(key: str) -> bool:
    """True for timings, throughputs and memory peaks: what two runs of the same config may disagree on."""
    return key in WALL_CLOCK_KEYS or key.startswith(WALL_CLOCK_PREFIXES)


class PhaseTimer:
    """Wall seconds per phase of one step, as verl's `timing_s/*`: `with timer.phase("update"): ...`.

    On a CUDA device the phase ends with a synchronisation, so queued kernels are
    charged to the phase that launched them.
    """

    def __init__(self, device: torch.device | None = None) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._sync = device is not None and device.type == "cuda"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self._sync:
                torch.cuda.synchronize()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{name}": value for name, value in self.seconds.items()}


def peak_memory_metrics(device: torch.device | None = None) -> dict[str, float]:
    """The process's peak resident memory so far (`ru_maxrss`), and on CUDA torch's peak allocation, in GiB."""
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    out = {"memory/peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / 2**30}
    if device is not None and device.type == "cuda":
        out["memory/peak_device_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out


def rate(count: float, seconds: float) -> float | None:
    """count / seconds, None when no time was measured."""
    return count / seconds if seconds > 0 else None
