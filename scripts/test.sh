#!/usr/bin/env bash
# The whole test suite (what CI runs): set-up with every optional extra the tests
# exercise (the integrations run against the real packages), ruff's lint and format
# checks, mypy on the public types, then pytest on parallel
# pytest-xdist workers: most of the suite's time is the 2-rank jobs it launches, which
# wait on each other and on their timeouts, so more workers than cores keep the cores busy.
#   ./scripts/test.sh                              the whole suite
#   ./scripts/test.sh tests/trainer/run/test_resume.py more pytest arguments pass through
#   AREAL_TEST_WORKERS=4 ./scripts/test.sh         another worker count; 0 runs in this process
#   ./scripts/test.sh -n 0 tests/x.py::test_y      so does -n 0 (a pdb session, one test)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh test verl trl reasoning wandb gguf data lora
# lint and formatting first (ruff, from the `test` extra, configured in pyproject.toml): seconds, and a
# finding stops the run before the suite's minutes
.venv/bin/ruff check areal_adv tests bench examples
.venv/bin/ruff format --check areal_adv tests bench examples
.venv/bin/mypy  # the typed public surface ([tool.mypy] files in pyproject.toml)
exec .venv/bin/python -m pytest -n "${AREAL_TEST_WORKERS:-3}" --dist loadgroup "$@"
