#!/usr/bin/env bash
# The whole test suite (what CI runs): set-up with every optional extra the tests
# exercise (the integrations run against the real packages), then pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh test verl trl reasoning wandb gguf data
exec .venv/bin/python -m pytest "$@"
