#!/usr/bin/env bash
# Idempotent: .venv-verl-source, the verl source tree that VERL_SOURCE names first on the path (verl's newest
# code, before a release), layered over .venv, whose verl release it shadows (scripts/layered_venv.sh).
# tests/integrations/test_verl_source.py runs the verl integration tests there (opt-in).
#   VERL_SOURCE=/path/to/verl scripts/setup_verl_source.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tree="$(cd "${VERL_SOURCE:?VERL_SOURCE must name a verl source tree}" && pwd)"
if [ ! -f "$tree/verl/trainer/ppo/core_algos.py" ]; then
  echo "VERL_SOURCE=$VERL_SOURCE: no verl/trainer/ppo/core_algos.py there; expected a verl source tree" >&2
  exit 2
fi
exec ./scripts/layered_venv.sh .venv-verl-source scripts/verl-source-requirements.txt --source "$tree"
