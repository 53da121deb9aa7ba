"""Written files get the mode a plain `open()` gives them: 0666 minus the process's umask.

safetensors (0.8) writes through a private temporary file that it renames into place, so every
`save_file` and `save_pretrained` leaves its `.safetensors` file readable by its owner only (0600), while
`config.json`, the tokenizer and every other file beside it get the usual mode (0644 under umask 022).
A model folder then cannot be served or copied by another account that reads the rest of it.
`normal_mode` puts such files back to what the user's umask asks for. Imports nothing from areal_adv.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

__all__ = ["default_file_mode", "normal_mode"]

_UMASK_LOCK = threading.Lock()


def default_file_mode() -> int:
    """0666 minus the umask: the permission bits `open(path, "w")` creates a file with."""
    with _UMASK_LOCK:  # os.umask can only be read by setting it; put it back at once
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def normal_mode(*paths: str | os.PathLike[str]) -> None:
    """Give each file, and every file under each folder, the default mode when it has owner-only bits (0600).

    Only files that are owner-only are changed: a file someone made executable or shared on purpose
    keeps its mode, and under a umask of 077 nothing changes at all.
    """
    mode = default_file_mode()
    for path in map(Path, paths):
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        for file in files:
            if stat.S_IMODE(file.stat().st_mode) == 0o600 and mode != 0o600:
                file.chmod(mode)
