#!/usr/bin/env bash
# Idempotent: .venv-areal, a venv with AReaL 1.0.4 (the real package from the index) and areal-adv
# installed beside it with `pip install -e .`, as an AReaL user installs it. tests/integrations/test_areal.py
# runs its checks there. It is layered over .venv: a path file appends .venv's site-packages, so torch,
# numba, transformers and the rest are not installed twice; what AReaL imports beyond them is in
# scripts/areal-1.0.4-requirements.txt. About 20 s with a warm pip cache.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ -x .venv/bin/python ] || ./scripts/setup.sh
V=.venv-areal
# one set-up at a time (test workers may ask together); the others wait, then find it done
exec 9>".venv-areal.lock"
flock 9
stamp="$V/.areal-adv-setup-stamp"
want="$(cat scripts/setup_areal.sh scripts/areal-1.0.4-requirements.txt pyproject.toml setup.py areal_adv.pth | sha256sum | cut -d' ' -f1)"
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
  pip_install --no-deps areal==1.0.4
  pip_install -r scripts/areal-1.0.4-requirements.txt
  pip_install --no-deps -e .
  echo "$want" > "$stamp"
fi
