#!/usr/bin/env bash
# Idempotent: a venv with the real AReaL and areal-adv installed beside it with `pip install -e .`, as an
# AReaL user installs it. tests/integrations/test_areal.py runs its checks there.
#   scripts/setup_areal.sh                                   .venv-areal: AReaL 1.0.4 from the package index
#   AREAL_SOURCE=/path/to/AReaL scripts/setup_areal.sh       .venv-areal-source: that source tree (AReaL 2 and
#                                                            later, which PyPI does not serve) on the path
# Either is layered over .venv: a path file appends .venv's site-packages, so torch, numba, transformers and
# the rest are not installed twice; what AReaL imports beyond them is in scripts/areal-1.0.4-requirements.txt
# or scripts/areal-source-requirements.txt. About 20 s with a warm pip cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || ./scripts/setup.sh
if [ -n "${AREAL_SOURCE:-}" ]; then
  source_tree="$(cd "$AREAL_SOURCE" && pwd)"
  [ -f "$source_tree/areal/trainer/ppo/actor.py" ] || {
    echo "AREAL_SOURCE=$AREAL_SOURCE: no areal/trainer/ppo/actor.py there; expected an AReaL source tree" >&2
    exit 2
  }
  V=.venv-areal-source
  requirements=scripts/areal-source-requirements.txt
else
  source_tree=""
  V=.venv-areal
  requirements=scripts/areal-1.0.4-requirements.txt
fi
# one set-up at a time (test workers may ask together); the others wait, then find it done
exec 9>"$V.lock"
flock 9
stamp="$V/.areal-adv-setup-stamp"
want="$( (cat scripts/setup_areal.sh "$requirements" pyproject.toml setup.py areal_adv.pth; echo "$source_tree") | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  rm -rf "$V"
  PY="${PYTHON:-python3.11}"
  command -v "$PY" >/dev/null 2>&1 || PY=python3
  "$PY" -m venv "$V"
  site="$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  # "zz": after every other path file of this venv, so its own packages and AReaL come first
  .venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz_areal_adv_main_venv.pth"
  # pip's output goes to a log, shown when a step fails: it lists AReaL's uninstalled dependencies by design
  log="$V/setup.log"
  pip_install() { "$V/bin/python" -m pip install --quiet --no-compile "$@" >>"$log" 2>&1 || { cat "$log"; exit 1; }; }
  if [ -n "$source_tree" ]; then
    echo "$source_tree" > "$site/areal_source.pth"
  else
    pip_install --no-deps areal==1.0.4
  fi
  pip_install -c constraints.txt -r "$requirements"
  pip_install --no-deps -e .
  echo "$want" > "$stamp"
fi
