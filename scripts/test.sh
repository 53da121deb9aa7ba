#!/usr/bin/env bash
# The whole test suite (what CI runs): set-up, then pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
