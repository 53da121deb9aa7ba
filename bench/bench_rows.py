"""Result rows of the benchmarks and the docs blocks rebuilt from them.

A benchmark run with `--results FILE` appends one JSON row to FILE (JSONL): what it
measured plus where the numbers came from (`provenance`: the command, the commit and
the files changed against it, the UTC date, and the machine's load before and after
the run: the load averages of `uptime` and the first line of /proc/pressure/cpu). A
report mode rebuilds its tables from the rows alone and can write them into a marked
block of a doc (`<!-- NAME:begin -->` ... `<!-- NAME:end -->`); the rest of the doc is
written by hand. `tests/bench/test_bench_scripts.py` checks that each block is what
the committed rows give.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PERFORMANCE_DOC = ROOT / "docs" / "performance.md"


def pressure_line() -> str | None:
    """The first line of /proc/pressure/cpu (`some avg10=1.77 avg60=... total=...`), None where absent."""
    try:
        return Path("/proc/pressure/cpu").read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return None


def cpu_pressure() -> float | None:
    """`some avg10` of /proc/pressure/cpu (percent of time some task waited for a CPU), None where absent."""
    line = pressure_line()
    found = re.search(r"avg10=([\d.]+)", line or "")
    return float(found.group(1)) if found else None


def pressure_text() -> str:
    """The first line of /proc/pressure/cpu, or `loadavg (1, 5, 15)` where there is none (a printed reading)."""
    return pressure_line() or f"loadavg {os.getloadavg()}"


def load_text() -> str:
    """`loadavg 1.64, cpu pressure: some avg10=1.77 ...` (the older rows' reading, still printed by some scripts)."""
    return f"loadavg {load1():.2f}, cpu pressure: {pressure_line() or 'n/a'}"


def load1() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def load_now() -> dict[str, Any]:
    """The machine's load at this moment: 1/5/15-minute load averages and CPU pressure ("some", percent)."""
    row: dict[str, Any] = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
    line = pressure_line()
    row["cpu_some"] = {k: float(v) for k, v in re.findall(r"(avg\d+)=([\d.]+)", line)} if line else None
    return row


def under_load(run: Callable[[], T]) -> tuple[T, dict[str, Any], dict[str, Any]]:
    """`run()` between two readings of the load, each printed: its result, the load before and after."""
    before = load_now()
    print(f"before: {describe_load(before)}", flush=True)
    result = run()
    after = load_now()
    print(f"after:  {describe_load(after)}", flush=True)
    return result, before, after


def print_rounds(times: dict[str, list[float]], ratios: dict[str, list[float]], width: int) -> None:
    """Each configuration's median time over its calls, then each ratio's median and range over the rounds."""
    import statistics

    for name, values in times.items():
        print(f"{name:{width}s} median {statistics.median(values):.3f} s ({len(values)} calls)")
    for name, values in ratios.items():
        print(f"{name}: {spread(values)} (median of {len(values)} rounds, range)")


def as_load(load: dict[str, Any] | str) -> dict[str, Any]:
    """A recorded load as `load_now` writes it; older rows wrote `loadavg 1.64, cpu pressure: some avg10=1.77 ...`."""
    if isinstance(load, dict):
        return load
    avg = re.search(r"loadavg ([\d.]+)", load)
    some = dict(re.findall(r"(avg\d+)=([\d.]+)", load))
    return {
        "loadavg": [float(avg.group(1)) if avg else float("nan")],
        "cpu_some": {k: float(v) for k, v in some.items()} or None,
    }


def describe_load(load: dict[str, Any]) -> str:
    """`load 1.64, cpu some avg10 1.8 %` (what `load_now` recorded)."""
    text = f"load {load['loadavg'][0]:.2f}"
    if load.get("cpu_some"):
        text += f", cpu some avg10 {load['cpu_some']['avg10']:.1f} %"
    return text


def load_span(row: dict[str, Any]) -> str:
    """The load of a row's run, before -> after: `1.64 -> 1.82 (cpu some 1.8 -> 3.0 %)`."""
    before, after = as_load(row["load"]["before"]), as_load(row["load"]["after"])
    text = f"{before['loadavg'][0]:.2f} -> {after['loadavg'][0]:.2f}"
    if before.get("cpu_some") and after.get("cpu_some"):
        text += f" (cpu some {before['cpu_some']['avg10']:.1f} -> {after['cpu_some']['avg10']:.1f} %)"
    return text


#: The CPU features that decide which kernels run (and so a row's speed, and its float bits): recorded with each row.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_features() -> dict[str, Any]:
    """The processor's model name and which of CPU_FLAGS it has (/proc/cpuinfo; empty where unreadable)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    model = re.search(r"(?m)^model name\s*:\s*(.+)$", info)
    flags = re.search(r"(?m)^flags\s*:\s*(.+)$", info)
    have = set(flags.group(1).split()) if flags else set()
    return {"model": model.group(1).strip() if model else None, "flags": [f for f in CPU_FLAGS if f in have]}


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def git_commit() -> str | None:
    """The checkout's commit (`git rev-parse --short HEAD`), None outside a git checkout."""
    commit = _git("rev-parse", "--short", "HEAD")
    return commit.strip() if commit else None


def utc_now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def provenance(module: str, argv: list[str] | None = None) -> dict[str, Any]:
    """Where a row comes from, taken when the run starts: its command, commit, the code files changed against it.

    `module` is the benchmark's module (`bench.peers.bench_vs_trl`): the command is `python -m module ARGS`.
    Rows written before bench/ became a package name the script's path (`bench/peers/bench_vs_trl.py ARGS`).

    `started` is the UTC time it was taken; `append` adds `date`, the time the row is written.
    """
    commit = git_commit()
    changed = _git("status", "--porcelain", "--", "areal_adv", "bench", "pyproject.toml", "constraints.txt")
    return {
        "command": " ".join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)]),
        "commit": commit,
        # files that differ from the commit (the run measured them as they were): empty for a clean tree
        "changed": sorted(line[3:] for line in (changed or "").splitlines() if line[3:].endswith(".py")),
        "started": utc_now(),
        "cpu": cpu_features(),
    }


def append(path: Path, row: dict[str, Any]) -> None:
    """Append `row` (with `date`: now, UTC) to the JSONL file `path`."""
    write_row(path, {**row, "date": utc_now()})
    print(f"row appended to {shown(path)}")


def write_row(path: Path, row: dict[str, Any]) -> None:
    """Append `row` as it is to the JSONL file `path` (its folder made where missing), one line, flushed on close."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace the JSONL file `path` with `rows` (written beside it, then moved over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def read(path: Path) -> list[dict[str, Any]]:
    """The rows of the JSONL file `path` (none where it is missing; blank lines skipped)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def shown(path: Path) -> str:
    """`path` relative to the repository when it lies inside it."""
    path = path.resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def commit_cell(row: dict[str, Any]) -> str:
    """`2026-12-06 02:40 UTC, 69046fe` (`+ changes` when the run's tree differed from the commit)."""
    date = row["date"][:16] + " UTC"  # rows without the suffix were written in this machine's zone, UTC
    if not row.get("commit"):
        return f"{date}, commit not recorded"
    return f"{date}, {row['commit']}" + (" + changes" if row.get("changed") else "")


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def block(doc: Path, name: str) -> str:
    """The text between a doc's markers of `name` (without them)."""
    begin, end = markers(name)
    page = doc.read_text(encoding="utf-8")
    if begin not in page or end not in page:
        raise SystemExit(f"{shown(doc)}: the markers {begin} and {end} are missing")
    return page.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write_block(doc: Path, name: str, text: str) -> None:
    """Replace the text between the markers of `name` in `doc` with `text`."""
    begin, end = markers(name)
    block(doc, name)  # the markers exist
    page = doc.read_text(encoding="utf-8")
    head, rest = page.split(begin, 1)
    tail = rest.split(end, 1)[1]
    doc.write_text(f"{head}{begin}\n{text}\n{end}{tail}", encoding="utf-8")
    print(f"block {name} written into {shown(doc)}")


def generated_note(command: str, results: Path, n: int) -> str:
    return (
        f"<!-- generated by `{command}` from {shown(results)} ({n} row{'' if n == 1 else 's'}); do not edit by hand -->"
    )


def spread(values: list[float], digits: int = 3) -> str:
    """`median (min-max)` of `values`."""
    import statistics

    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def report_arguments(parser: Any, results: Path, doc: Path = PERFORMANCE_DOC) -> None:
    """`--results`, `--report`, `--write-docs` and `--doc` of a benchmark whose rows rebuild a docs block (`report`)."""
    parser.add_argument(
        "--results", type=Path, default=None, help=f"append one JSON row (JSONL); report: {shown(results)}"
    )
    parser.add_argument("--report", action="store_true", help="print the tables of the rows in --results")
    parser.add_argument("--write-docs", action="store_true", help="with --report: write them into --doc")
    parser.add_argument("--doc", type=Path, default=doc)


def report(args: Any, report_text: Any, block: str, results: Path | None = None) -> None:
    """Print the table `report_text(rows, path)` builds from `args.results` (else `results`, the committed rows);
    with `args.write_docs`, write its block into `args.doc`."""
    path = args.results or results
    rows = read(path)
    if not rows:
        raise SystemExit(f"--results {shown(path)}: no rows")
    text = report_text(rows, path)
    print(text)
    if args.write_docs:
        write_block(args.doc, block, text)
