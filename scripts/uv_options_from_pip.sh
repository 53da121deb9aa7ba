#!/usr/bin/env bash
# The package-source settings of pip's configuration (its files and PIP_* variables, as `pip config list`
# shows them) as options of `uv pip install`, one per line: uv reads none of pip's configuration, and
# scripts/uv_install.sh installs with uv from the sources pip would use.
#   scripts/uv_options_from_pip.sh PYTHON      PYTHON: an interpreter with pip
# Passed on: index-url, extra-index-url, find-links (lists split on spaces or lines), constraint, no-index.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PYTHON" >&2; exit 2; }
while IFS= read -r line; do
  key="${line%%=*}" value="${line#*=}"
  value="${value#\'}" value="${value%\'}" value="${value//\\n/ }"  # pip prints a list of lines as 'a\nb'
  case "${key##*.}" in
    index-url) flag=--index-url ;;
    extra-index-url) flag=--extra-index-url ;;
    find-links) flag=--find-links ;;
    constraint) flag=--constraint ;;
    no-index)
      case "${value,,}" in 1 | true | yes | on) echo --no-index ;; esac
      continue
      ;;
    *) continue ;;
  esac
  for v in $value; do printf '%s\n%s\n' "$flag" "$v"; done
done < <("$1" -m pip config list)
