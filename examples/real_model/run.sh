#!/usr/bin/env bash
# GRPO on SmolLM2-135M-Instruct, one-digit sums, on 2 CPU cores (see README.md here, docs/benchmarks.md).
#   examples/real_model/install.sh        # once
#   examples/real_model/run.sh [key=value ...]
#   RUN_CONFIG=examples/real_model/spell_backward.yaml examples/real_model/run.sh   # the skill task
# Uses the converted folder when install.sh made it, else the GGUF file directly (model.gguf_file).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
converted=runs/models/SmolLM2-135M-Instruct
if [ -f "$converted/config.json" ]; then
  model="model.path=$converted"
else
  model="model.gguf_file=$(.venv/bin/python examples/real_model/locate.py)"
fi
exec .venv/bin/python -m areal_adv.trainer.main --config "${RUN_CONFIG:-examples/real_model/grpo_smollm2.yaml}" "$model" "$@"
