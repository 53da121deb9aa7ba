#!/usr/bin/env bash
# Times the test set-up's three slow steps, the way they ran before and the way scripts/setup.sh runs them now,
# alternating within each round on a fresh clone of HEAD (docs/performance.md, "Set-up with uv"):
#   install .venv with every test extra:  pip (pip upgrade, torch, the rest)  |  uv (pip installs uv, uv the rest)
#   byte-compile site-packages, 2 cores:  every file                          |  without packages' tests/ folders
#   mypy on a new cache:                  pyproject.toml of BEFORE            |  HEAD's (skipped libraries)
#   scripts/time_setup_steps.sh [ROUNDS] [BEFORE]      ROUNDS: 2, BEFORE: the commit before the change (5b18bf0)
# Prints one line per step and round, with the 1-minute load average after it. Not part of scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds="${1:-2}" before="${2:-5b18bf0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/clone"
cd "$work/clone"
git show "$before:pyproject.toml" > pyproject_before.toml
extras="test,verl,trl,reasoning,wandb,gguf,data,lora"
PY="${PYTHON:-python3.11}"
seconds() { # the wall seconds of a command, which must succeed
  local start
  start="$(date +%s.%N)"
  "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
  awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
load() { cut -d' ' -f1 /proc/loadavg; }
with_pip() {
  "$PY" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
  "$1/bin/python" -m pip install -q --no-compile -c constraints.txt torch==2.13.0
  "$1/bin/python" -m pip install -q --no-compile -c constraints.txt -e ".[$extras]"
}
with_uv() {
  "$PY" -m venv "$1"
  ./scripts/uv_install.sh "$1" -c constraints.txt --upgrade-package pip pip -e ".[$extras]"
}
compile_site() { # VENV [compileall options]
  local site="$1/lib/python3.11/site-packages"
  shift
  find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
  "$work/uv/bin/python" -W ignore::SyntaxWarning -m compileall -qq -j 0 "$@" "$site" || true
}
for round in $(seq "$rounds"); do
  rm -rf "$work/pip" "$work/uv"
  a="$(seconds with_pip "$work/pip")"
  b="$(seconds with_uv "$work/uv")"
  echo "round $round install: pip $a s, uv $b s (load $(load))"
done
for round in $(seq "$rounds"); do
  a="$(seconds compile_site "$work/uv")"
  b="$(seconds compile_site "$work/uv" -x /tests/)"
  echo "round $round compile: every file $a s, without tests/ $b s (load $(load))"
done
for round in $(seq "$rounds"); do
  rm -rf "$work/mypy-before" "$work/mypy-now"
  a="$(seconds "$work/uv/bin/mypy" --config-file pyproject_before.toml --cache-dir "$work/mypy-before")"
  b="$(seconds "$work/uv/bin/mypy" --cache-dir "$work/mypy-now")"
  echo "round $round mypy: every library followed $a s, skipped $b s (load $(load))"
done
