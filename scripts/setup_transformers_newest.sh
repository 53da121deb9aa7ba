#!/usr/bin/env bash
# Idempotent: .venv-transformers-newest, the newest tested transformers release
# (scripts/transformers-newest-requirements.txt, exact pins) installed with `pip install --target`: a folder
# that goes in front of .venv's packages on PYTHONPATH, so torch and the rest are not installed twice
# (about 90 MB). tests/trainer/lm/test_newest_transformers.py runs the sampling and training tests with it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || ./scripts/setup.sh
T=.venv-transformers-newest
# one set-up at a time (test workers may ask together); the others wait, then find it done
exec 9>"$T.lock"
flock 9
stamp="$T/.areal-adv-setup-stamp"
want="$(cat scripts/setup_transformers_newest.sh scripts/transformers-newest-requirements.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$T"
  .venv/bin/python -m pip install --quiet --no-compile --no-deps --target "$T" \
    -r scripts/transformers-newest-requirements.txt
  rm -rf "$T/bin"  # console scripts written for .venv's interpreter path: not used, and stale once moved
  echo "$want" > "$stamp"
fi
