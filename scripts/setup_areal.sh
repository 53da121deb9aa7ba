#!/usr/bin/env bash
# Idempotent: a venv with the real AReaL and areal-adv installed beside it with `pip install -e .`, as an
# AReaL user installs it (scripts/layered_venv.sh: layered over .venv). tests/integrations/test_areal.py runs
# its checks there.
#   scripts/setup_areal.sh                                   .venv-areal: AReaL 1.0.4 from the package index
#   AREAL_SOURCE=/path/to/AReaL scripts/setup_areal.sh       .venv-areal-source: that source tree (AReaL 2 and
#                                                            later, which the index does not serve) on the path
# What AReaL imports beyond .venv's packages: scripts/areal-1.0.4-requirements.txt or
# scripts/areal-source-requirements.txt. About 20 s with a warm pip cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ -z "${AREAL_SOURCE:-}" ]; then
  exec ./scripts/layered_venv.sh .venv-areal scripts/areal-1.0.4-requirements.txt --release areal==1.0.4
fi
tree="$(cd "$AREAL_SOURCE" && pwd)"
if [ ! -f "$tree/areal/trainer/ppo/actor.py" ]; then
  echo "AREAL_SOURCE=$AREAL_SOURCE: no areal/trainer/ppo/actor.py there; expected an AReaL source tree" >&2
  exit 2
fi
exec ./scripts/layered_venv.sh .venv-areal-source scripts/areal-source-requirements.txt --source "$tree"
