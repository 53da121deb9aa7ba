"""Progress of a run: a tqdm bar on a terminal, one plain line every N steps otherwise.

A bar redraws itself many times a second; written to a file (a redirected log,
a CI job) that is kilobytes of carriage-return noise. So the bar is used only
when both stdout and stderr are terminals; otherwise every `every` steps (and
after the last one) one line goes to stdout, which reads well in a log.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from tqdm.auto import tqdm

from areal_adv.trainer.run.metrics import PHASES


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def phase_summary(row: Mapping[str, Any]) -> str:
    """`step 5.2s: rollout 2.1 update 2.9` - the step's wall time and the phases that took >= 1% of it."""
    step = row.get("time/step")
    if not isinstance(step, (int, float)):
        return ""
    phases = [
        f"{name} {_seconds(row[f'time/{name}'])}"
        for name in (*PHASES, "diagnostics")  # diagnostics: only in runs that measure shadow estimators
        if isinstance(row.get(f"time/{name}"), (int, float)) and row[f"time/{name}"] >= 0.01 * step > 0
    ]
    return f"step {_seconds(step)}s" + (": " + " ".join(phases) if phases else "")


def progress_line(name: str, done: int, total: int, row: Mapping[str, Any], steps_per_s: float | None) -> str:
    """`[areal-adv] NAME step 40/500 (8%) | reward 0.312 | ... | step 5.2s: rollout 2.1 update 2.9 | ... | eta 3m12s`."""
    parts = [f"[areal-adv] {name} step {done}/{total} ({100 * done // max(total, 1)}%)"]
    for key, label, fmt in (
        ("reward_mean", "reward", ".3f"),
        ("success_rate", "success", ".3f"),
        ("kl", "kl", ".4f"),
        ("entropy", "entropy", ".3f"),
    ):
        value = row.get(key)
        if isinstance(value, (int, float)):
            parts.append(f"{label} {value:{fmt}}")
    timing = phase_summary(row)
    if timing:
        parts.append(timing)
    rss = row.get("memory/peak_rss_gib")
    if isinstance(rss, (int, float)):
        parts.append(f"peak rss {rss:.2f} GiB")
    if steps_per_s:
        parts.append(f"{steps_per_s:.2f} steps/s")
        parts.append(f"eta {_duration((total - done) / steps_per_s)}")
    return " | ".join(parts)


class Progress:
    """Reports completed steps `start+1 .. total` as a bar or as log lines (or not at all)."""

    def __init__(
        self,
        *,
        name: str,
        total: int,
        start: int,
        every: int,
        enabled: bool,
        interactive: bool | None = None,
        out: TextIO | None = None,
    ) -> None:
        if interactive is None:
            interactive = _is_terminal(sys.stdout) and _is_terminal(sys.stderr)
        self.name, self.total, self.every, self.enabled = name, total, every, enabled
        self.out = out
        self.begin, self.start = time.perf_counter(), start
        self._restarted = False  # the clock restarts after the first step
        self.bar = None
        if enabled and interactive:
            # smoothing=0: the rate is steps / seconds since `start_t`, which `_restart_clock` moves past step 1
            self.bar = tqdm(total=total, initial=start, desc=name, dynamic_ncols=True, smoothing=0)

    def _restart_clock(self, done: int) -> None:
        """After this process's first step, time from here: that step also loads kernels and allocates the
        optimiser state, so counting it would make the ETA of a long run far too high."""
        self.begin, self.start = time.perf_counter(), done
        if self.bar is not None:
            self.bar.start_t, self.bar.initial = self.bar._time(), self.bar.n

    def update(self, done: int, row: Mapping[str, Any]) -> None:
        """Report `done` steps; the rate and ETA count only the steps after this process's first one."""
        if not self.enabled:
            return
        first = not self._restarted
        if self.bar is not None:
            self.bar.update(1)
            if done % self.every == 0:
                timing = {"step": f"{row['time/step']:.1f}s"} if isinstance(row.get("time/step"), float) else {}
                self.bar.set_postfix(
                    reward=f"{row.get('reward_mean', 0.0):.2f}", success=f"{row.get('success_rate', 0.0):.2f}", **timing
                )
        elif done % self.every == 0 or done == self.total:
            elapsed = time.perf_counter() - self.begin
            rate = (done - self.start) / elapsed if elapsed > 0 and not first else None
            print(progress_line(self.name, done, self.total, row, rate), file=self.out or sys.stdout, flush=True)
        if first:
            self._restarted = True
            self._restart_clock(done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
