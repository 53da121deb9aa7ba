#!/usr/bin/env bash
# Idempotent set-up: a project-local venv with the tested, pinned dependencies.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.areal-setup-stamp
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # torch first, exactly pinned, so nothing later can pull a CUDA build.
  .venv/bin/python -m pip install --quiet -c constraints.txt "torch==2.13.0"
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[test]"
  echo "$want" > "$stamp"
fi
