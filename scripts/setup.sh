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
  .venv/bin/python -m pip install --quiet --upgrade pip
  # torch first, exactly pinned, so nothing later can pull a CUDA build.
  # --no-compile, then one byte-compile on every core: pip compiles its 20k files on one core (about 75 s)
  .venv/bin/python -m pip install --quiet --no-compile -c constraints.txt "torch==2.13.0"
  .venv/bin/python -m pip install --quiet --no-compile -c constraints.txt -e ".${extras:+[$extras]}"
  # -qq: a file that does not compile (a package's Python 2 test data) is skipped, as pip skips it
  .venv/bin/python -m compileall -qq -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
  printf '%s\n%s\n' "$want" "${extras//,/ }" > "$stamp"
fi
