#!/usr/bin/env bash
# The timing-sensitive modules (the failure protocol under torchrun, kill-and-resume, two nodes on
# loopback) run N times beside B busy-loop processes: a stress test for races the CI run meets only by chance. Not part of scripts/test.sh.
#   ./scripts/stress_failures.sh            5 rounds beside 2 busy loops
#   ROUNDS=3 BUSY=1 ./scripts/stress_failures.sh
# Ends at the first failing round (its pytest output says which test); prints one line per round.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rounds="${ROUNDS:-5}"
busy="${BUSY:-2}"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in $(seq "$busy"); do python3 -c "while True: pass" & pids+=("$!"); done
for r in $(seq "$rounds"); do
  start=$(date +%s)
  .venv/bin/python -m pytest -q -n 3 --dist loadgroup -p no:cacheprovider \
    tests/trainer/parallel/test_distributed_failures.py tests/trainer/parallel/test_failures.py \
    tests/trainer/run/test_resume.py \
    tests/trainer/run/test_resume_distributed.py tests/trainer/parallel/test_two_nodes.py "$@"
  echo "round $r/$rounds passed in $(( $(date +%s) - start )) s beside $busy busy loops ($(cut -d' ' -f1-3 /proc/loadavg))"
done
