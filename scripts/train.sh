#!/usr/bin/env bash
# README command 1: set up .venv (idempotent), then train the default config
# (examples/grpo_arith.yaml: GRPO on single-turn arithmetic, a few minutes on 2 CPU cores).
# Arguments pass through to `python -m areal.trainer.main`, e.g.
#   ./scripts/train.sh train.steps=50 seed=3
#   ./scripts/train.sh --config examples/ppo_turn_gae_guess.yaml
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
exec .venv/bin/python -m areal.trainer.main "$@"
