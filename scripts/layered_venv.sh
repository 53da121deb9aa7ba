#!/usr/bin/env bash
# Idempotent: a venv layered over .venv, with one peer package beside areal-adv, as a user of that package
# installs areal-adv (`pip install -e .`). A path file appends .venv's site-packages, so torch, numba,
# transformers and the rest are not installed twice.
#   scripts/layered_venv.sh VENV REQUIREMENTS --source DIR     DIR (a source tree) first on the path
#   scripts/layered_venv.sh VENV REQUIREMENTS --release SPEC   SPEC from the package index, without its deps
# REQUIREMENTS lists what the peer imports beyond .venv's packages (installed with constraints.txt).
# scripts/setup_areal.sh and scripts/setup_verl_source.sh call it. One set-up at a time per VENV.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[ $# -eq 4 ] || { echo "usage: $0 VENV REQUIREMENTS --source DIR | --release SPEC" >&2; exit 2; }
V="$1" requirements="$2" mode="$3" what="$4"
[ -x .venv/bin/python ] || ./scripts/setup.sh
exec 9>"$V.lock"
flock 9
stamp="$V/.areal-adv-setup-stamp"
want="$( (cat scripts/layered_venv.sh "$requirements" pyproject.toml setup.py areal_adv.pth; echo "$mode $what") | sha256sum | cut -d' ' -f1)"
[ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && exit 0
rm -rf "$V"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
"$PY" -m venv "$V"
site="$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# "zz": after every other path file of this venv, so its own packages and the peer come first
.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz_areal_adv_main_venv.pth"
# pip's output goes to a log, shown when a step fails: it lists the peer's uninstalled dependencies by design
log="$V/setup.log"
pip_install() { "$V/bin/python" -m pip install --quiet --no-compile "$@" >>"$log" 2>&1 || { cat "$log"; exit 1; }; }
case "$mode" in
  --source) echo "$what" > "$site/peer_source.pth" ;;
  --release) pip_install --no-deps "$what" ;;
  *) echo "$0: expected --source or --release, got $mode" >&2; exit 2 ;;
esac
pip_install -c constraints.txt -r "$requirements"
pip_install --no-deps -e .
echo "$want" > "$stamp"
