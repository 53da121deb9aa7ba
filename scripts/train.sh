#!/usr/bin/env bash
# README command 1: set up .venv (idempotent), then train the default config
# (examples/grpo_arith.yaml: GRPO on single-turn arithmetic, about a minute on 2 CPU cores).
# Arguments pass through to `python -m areal_adv.trainer.main`, e.g.
#   ./scripts/train.sh train.steps=50 seed=3
#   ./scripts/train.sh --config examples/ppo_turn_gae_guess.yaml
# It runs in the folder you call it from: --config, relative paths in the config (data.train, model.path,
# output.dir, ...) resolve there, runs/ is written there, and packages there (your reward or task plugins)
# import, as with `python -m` (docs/training.md, "Your folder"). The default config is found from anywhere.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
exec "$root/.venv/bin/python" -m areal_adv.trainer.main "$@"
