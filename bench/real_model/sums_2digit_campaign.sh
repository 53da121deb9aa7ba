#!/usr/bin/env bash
# The real model from a sparse start (docs/benchmarks.md): GRPO, MaxRL and RLOO on the 2-digit sums, seeds 1-3,
# each run with the other two estimators as shadows over its first 10 updates, then the forced-format probe of
# each last checkpoint and of the untrained model. Resumable: finished runs and probes are skipped.
#   bench/real_model/sums_2digit_campaign.sh          (after examples/real_model/install.sh)
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py="${PYTHON:-.venv/bin/python}"
rows=examples/real_model/data/basic_arithmetic_2digit_add/eval.jsonl
probes=bench/results/sums_2digit_probe.jsonl
probed() { grep -q "\"label\": \"$1\"" "$probes" 2>/dev/null; }
for seed in 1 2 3; do
  for est in grpo maxrl rloo; do
    others=$(echo grpo maxrl rloo | tr ' ' '\n' | grep -v "^$est$" | paste -sd, -)
    echo "=== $(date -u +%T) $est seed $seed (shadows $others)"
    "$py" -m bench.real_model.compare_estimators --task sums_2digit --estimators "$est" --seeds "$seed" --steps 30 \
      --chunk-steps 10 --keep-checkpoints --set "diagnostics.estimators=[$others]" diagnostics.params=last_layer \
      diagnostics.first_steps=10 || echo "FAILED $est $seed"
    checkpoint=runs/compare/sums_2digit/$est/seed$seed/checkpoints/step_30/policy
    if [ -d "$checkpoint" ] && ! probed "sums_2digit/$est/seed$seed"; then
      "$py" examples/real_model/probe.py --skills --rows "$rows" --n 100 --equation-prefix --model "$checkpoint" \
        --results "$probes" --label "sums_2digit/$est/seed$seed"
    fi
  done
done
probed untrained || "$py" examples/real_model/probe.py --skills --rows "$rows" --n 100 --equation-prefix \
  --results "$probes" --label untrained
echo "=== done $(date -u +%T)"
