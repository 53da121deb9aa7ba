#!/usr/bin/env bash
# Learning with the rollout sampled from a bfloat16 copy (docs/performance.md, "Sampling from a bfloat16 copy"):
# GRPO on the 1-2-digit sums, 30 updates, float32 sampling against the bf16 copy with AReaL's decoupled correction
# and the bf16 copy without it, paired by seed (same initial weights, prompts and seed), then the forced-format
# probe of each last checkpoint. One thread per run, so two seeds can run side by side with the same arithmetic.
# Resumable: finished runs (rows in the results file) and probes are skipped.
#   bench/real_model/rollout_copy_campaign.sh SEED [ARM ...]      ARM: f32 bf16copy bf16copy_nocorr (default: all three)
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py="${PYTHON:-.venv/bin/python}"
seed="${1:?usage: bench/real_model/rollout_copy_campaign.sh SEED [ARM ...]}"
shift
arms=("$@")
[ $# -eq 0 ] && arms=(f32 bf16copy bf16copy_nocorr)
results=bench/results/rollout_copy_learning.jsonl
probes=bench/results/rollout_copy_probe.jsonl
rows=examples/real_model/data/basic_arithmetic_1_2digit_add/eval.jsonl
probed() { grep -q "\"label\": \"$1\"" "$probes" 2>/dev/null; }
for arm in "${arms[@]}"; do
  case "$arm" in
    f32) extra=() ;;
    bf16copy) extra=(rollout.weights_dtype=bfloat16 actor.use_decoupled_loss=true actor.behav_imp_weight_cap=5) ;;
    bf16copy_nocorr) extra=(rollout.weights_dtype=bfloat16) ;;
    *) echo "unknown arm $arm (f32, bf16copy, bf16copy_nocorr)" >&2; exit 2 ;;
  esac
  tag="rollout_copy_$arm"
  echo "=== $(date -u +%T) $arm seed $seed"
  "$py" -m bench.real_model.compare_estimators --task sums_1_2digit --estimators grpo --seeds "$seed" --steps 30 \
    --chunk-steps 0 --keep-checkpoints --tag "$tag" --results "$results" \
    --set train.num_threads=1 "${extra[@]}" || echo "FAILED $arm $seed"
  checkpoint=runs/compare/$tag/grpo/seed$seed/checkpoints/step_30/policy
  if [ -d "$checkpoint" ] && ! probed "$tag/grpo/seed$seed"; then
    "$py" examples/real_model/probe.py --skills --rows "$rows" --n 100 --equation-prefix --model "$checkpoint" \
      --results "$probes" --label "$tag/grpo/seed$seed"
  fi
done
echo "=== done $(date -u +%T)"
