#!/usr/bin/env bash
# Idempotent set-up: a project-local venv with the tested, pinned dependencies.
#   ./scripts/setup.sh                 core only (what the main job needs)
#   ./scripts/setup.sh test verl trl   core plus the named extras of pyproject.toml
# Extras already installed are kept: asking for fewer never uninstalls, so the
# main job after the test set-up installs nothing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.areal-setup-stamp
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
have_hash="" have_extras=""
if [ -f "$stamp" ]; then
  have_hash="$(sed -n 1p "$stamp")"
  have_extras="$(sed -n 2p "$stamp")"
fi
[ "$have_hash" = "$want" ] || have_extras=""
extras="$(printf '%s\n' $have_extras "$@" | sed '/^$/d' | sort -u | paste -sd, -)"
if [ "$have_hash" != "$want" ] || [ "$extras" != "$(printf '%s\n' $have_extras | sed '/^$/d' | sort -u | paste -sd, -)" ]; then
  # uv installs what pip would (scripts/uv_install.sh), in a fraction of its time. pip too, upgraded: the
  # newest-transformers folder is installed with it. torch is exactly pinned in constraints.txt, so nothing can
  # pull a CUDA build.
  ./scripts/uv_install.sh .venv -c constraints.txt --upgrade-package pip pip -e ".${extras:+[$extras]}"
  # Bytecode, compiled on every core: where PYTHONDONTWRITEBYTECODE is set, an
  # interpreter never caches what it compiles, and each one would compile torch and transformers anew.
  # Packages' own test suites (a sixth of the files: pandas, sympy, numba, scipy...) are never imported, so left
  # out. -qq: a file that does not compile (a package's Python 2 test data) is skipped, as pip skips it; the
  # warnings of other packages' code (`is` with a literal) are theirs.
  .venv/bin/python -W ignore::SyntaxWarning -m compileall -qq -j 0 -x /tests/ "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
  printf '%s\n%s\n' "$want" "${extras//,/ }" > "$stamp"
fi
