"""`scripts/setup.sh` installs with uv from the package sources pip is configured with.

uv reads none of pip's configuration, so `scripts/uv_options_from_pip.sh` turns what `pip config list` shows
(pip's files and its PIP_* variables) into uv's options. Checked on a pip configuration file of the test's
own beside this machine's (pip reads both): every setting of that file and of the variables comes out as the
option that names the same source, lists split into one option each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "uv_options_from_pip.sh"


def _options(env: dict[str, str]) -> list[str]:
    proc = subprocess.run([str(SCRIPT), sys.executable], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _pairs(options: list[str]) -> set[tuple[str, str]]:
    flags = [i for i, o in enumerate(options) if o.startswith("--") and o != "--no-index"]
    return {(options[i], options[i + 1]) for i in flags}


def test_pip_files_and_variables_become_uv_options(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url =\n    file:///srv/one/simple\n    file:///srv/two/simple\n"
        "constraint = /srv/constraints.txt\n"
        "timeout = 60\n"
        "[install]\n"
        "find-links = /srv/wheels /srv/more-wheels\n"
    )
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/srv/env-wheels"}
    options = _options(env)
    assert {
        ("--index-url", "https://mirror.example/simple"),
        ("--extra-index-url", "file:///srv/one/simple"),
        ("--extra-index-url", "file:///srv/two/simple"),
        ("--constraint", "/srv/constraints.txt"),
        ("--find-links", "/srv/wheels"),
        ("--find-links", "/srv/more-wheels"),
        ("--find-links", "/srv/env-wheels"),
    } <= _pairs(options)
    assert "60" not in options and "--no-index" not in options  # pip's other settings are not package sources


def test_no_index_is_passed_on_only_when_set(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nno-index = false\n")
    assert "--no-index" not in _options({**os.environ, "PIP_CONFIG_FILE": str(conf)})
    conf.write_text("[global]\nno-index = true\n")
    assert "--no-index" in _options({**os.environ, "PIP_CONFIG_FILE": str(conf)})
