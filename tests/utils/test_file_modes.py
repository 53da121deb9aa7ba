"""Files written through safetensors get the mode of the files beside them, not owner-only."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from areal_adv.utils.file_modes import default_file_mode, normal_mode


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def test_safetensors_files_get_the_umask_mode_and_other_modes_are_kept(tmp_path: Path, umask_022: None) -> None:
    assert default_file_mode() == 0o644
    weights, plain, script = tmp_path / "sub" / "w.safetensors", tmp_path / "config.json", tmp_path / "run.sh"
    weights.parent.mkdir()
    save_file({"w": torch.zeros(2)}, str(weights))
    plain.write_text("{}")
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert _mode(weights) == 0o600  # what safetensors leaves: the reason for normal_mode
    normal_mode(tmp_path)
    assert (_mode(weights), _mode(plain), _mode(script)) == (0o644, 0o644, 0o755)
    os.umask(0o077)  # a user who wants owner-only files keeps them
    again = tmp_path / "again.safetensors"
    save_file({"w": torch.zeros(2)}, str(again))
    normal_mode(again)
    assert default_file_mode() == 0o600 and _mode(again) == 0o600
