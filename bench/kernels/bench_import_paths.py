"""What `areal_adv.pth` adds to every interpreter start: `python -c pass` with and without it.

Usage:
    .venv/bin/python -m bench.kernels.bench_import_paths [--pairs 40]

The .pth file installs the import-path finder (`areal_adv.import_paths`) in every Python
process of the environment, so its cost is paid by every start, ours or not. This times
fresh `python -c pass` processes in alternating pairs: one with the file in site-packages,
one with it renamed away for that run (put back at once, also on errors). It prints the
medians, their difference and ratio, and the CPU pressure while it ran.
Results and the command go in docs/performance.md ("Import paths").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from bench.bench_rows import pressure_text as pressure  # the first line of /proc/pressure/cpu


def start_time() -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=40)
    args = parser.parse_args()
    pth = Path(sysconfig.get_paths()["purelib"]) / "areal_adv.pth"
    if not pth.exists():
        raise SystemExit(f"{pth}: not found; install the package first (pip install -e .)")
    away = pth.with_suffix(".pth.benchmark-off")
    times: dict[str, list[float]] = {"with": [], "without": []}
    print(f"cpu pressure before: {pressure()}")
    for _ in range(args.pairs):
        times["with"].append(start_time())
        pth.rename(away)
        try:
            times["without"].append(start_time())
        finally:
            away.rename(pth)
    with_, without = statistics.median(times["with"]), statistics.median(times["without"])
    print(f"cpu pressure after:  {pressure()}")
    print(
        f"python -c pass, median of {args.pairs} alternating pairs: with areal_adv.pth {1000 * with_:.1f} ms, "
        f"without {1000 * without:.1f} ms, difference {1000 * (with_ - without):.1f} ms, ratio {with_ / without:.3f}"
    )


if __name__ == "__main__":
    main()
