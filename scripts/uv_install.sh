#!/usr/bin/env bash
# `uv pip install ARGS` into VENV from the package sources pip is configured with: the venv's pip installs uv
# (the version in constraints.txt), and scripts/uv_options_from_pip.sh passes on pip's index, find-links and
# constraint settings, which uv does not read. `--index-strategy unsafe-best-match` weighs every index's
# releases together, as pip does. scripts/setup.sh and scripts/time_setup_steps.sh install with it.
#   scripts/uv_install.sh VENV ARGS...       VENV: made by `python -m venv` (it has pip)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 VENV ARGS..." >&2; exit 2; }
V="$1"
shift
"$V/bin/python" -m pip install -qq -c "$root/constraints.txt" uv # -qq: errors only (not the indexes that lack uv)
mapfile -t from_pip < <("$root/scripts/uv_options_from_pip.sh" "$V/bin/python")
"$V/bin/uv" pip install --quiet --python "$V/bin/python" --index-strategy unsafe-best-match "${from_pip[@]}" "$@"
