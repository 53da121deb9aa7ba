"""Checkpoint folders on disk: atomic writes, the manifest, finding and pruning.

Layout: `<run_dir>/checkpoints/step_<N>/` holds whatever the trainer writes
(see `areal_adv.trainer.run.trainer_state`) plus `areal_checkpoint.json`, the manifest:
format version, step and the size of every file. A checkpoint is first written
into a hidden temporary folder beside the others; every file and folder in it is
fsynced, the manifest is written last, the folder is renamed to `step_<N>`
(atomic on POSIX within one file system) and the parent folder is fsynced. A
crash at any moment therefore leaves the previous checkpoints untouched and
either no new one or a complete one; leftovers of interrupted saves are never
loaded and are removed by the next save. Loading checks the manifest and that
every listed file is present with its recorded size.

`torch.distributed.checkpoint` writes the model and optimiser shards of every
rank into one subfolder, but does not make a folder appear at once: under data
parallelism rank 0 makes the temporary folder (`staging_folder`), every rank
writes its shard into it, and rank 0 publishes it (`publish`). Hence the small
hand-written protocol around it. This module is torch-free so configs can check a
`train.resume` folder without importing torch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger("areal_adv.checkpoint")

MANIFEST = "areal_checkpoint.json"
#: 2: model and optimiser states in torch.distributed.checkpoint shards (`state/`); 1: gathered on rank 0
#: (`optimizer.pt`, `critic/`). Format 1 is still read for its policy (export, diagnose), not resumed.
FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
CHECKPOINTS = "checkpoints"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"
_OLD_PREFIX = ".old-"


class CheckpointError(RuntimeError):
    """A checkpoint folder is missing, incomplete, damaged or does not fit this run."""


def checkpoint_root(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_folder(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step}"


# -- durable writes -----------------------------------------------------------------------


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> dict[str, int]:
    """fsync every file (then every folder, deepest first); returns {relative path: size}."""
    sizes: dict[str, int] = {}
    dirs: list[Path] = []
    for here, _subdirs, files in os.walk(folder):
        dirs.append(Path(here))
        for name in files:
            path = Path(here) / name
            _fsync_path(path)
            sizes[path.relative_to(folder).as_posix()] = path.stat().st_size
    for d in reversed(dirs):
        _fsync_path(d)
    return sizes


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def _replace_folder(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; an existing `final` is moved aside first and deleted after."""
    old = None
    if final.exists():
        old = final.with_name(f"{_OLD_PREFIX}{final.name}-{secrets.token_hex(4)}")
        os.rename(final, old)
    os.rename(tmp, final)
    _fsync_path(final.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_folder(root: str | os.PathLike, step: int) -> Path:
    """A new hidden folder under `root` to write checkpoint `step` into before `publish` makes it visible."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{_TMP_PREFIX}step_{step}-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    return tmp


def publish(tmp: Path, step: int, extra: Mapping[str, Any] | None = None) -> Path:
    """fsync everything in `tmp`, write the manifest last and rename `tmp` to `step_<step>` beside it."""
    sizes = _fsync_tree(tmp)
    manifest = {
        **dict(extra or {}),
        "format": FORMAT_VERSION,
        "step": step,
        "created_unix": time.time(),
        "files": sizes,
    }
    _write_json(tmp / MANIFEST, manifest)
    _fsync_path(tmp)
    final = step_folder(tmp.parent, step)
    _replace_folder(tmp, final)
    return final


def write_atomically(root: str | os.PathLike, step: int, writer: Callable[[Path], Mapping[str, Any] | None]) -> Path:
    """Write checkpoint `step` through `writer(tmp_folder)` and publish it atomically as `step_<step>`.

    `writer` fills the folder and may return extra manifest fields. An
    exception (or Ctrl-C) in `writer` removes the temporary folder and
    re-raises; a hard kill leaves it behind, invisible to `list_checkpoints`.
    """
    tmp = staging_folder(root, step)
    try:
        return publish(tmp, step, writer(tmp))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# -- reading ------------------------------------------------------------------------------


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a complete checkpoint; CheckpointError says what is wrong otherwise."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"checkpoint {folder}: no {MANIFEST}, so the save never completed")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {folder}: unreadable {MANIFEST}: {exc}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"checkpoint {folder}: {MANIFEST} is not an areal-adv checkpoint manifest")
    if manifest.get("format") not in READABLE_FORMATS:
        raise CheckpointError(
            f"checkpoint {folder}: format {manifest.get('format')!r}, this version of areal-adv "
            f"reads formats {list(READABLE_FORMATS)}"
        )
    for rel, size in manifest["files"].items():
        file = folder / rel
        if not file.is_file():
            raise CheckpointError(f"checkpoint {folder}: {rel} is listed in the manifest but missing")
        if file.stat().st_size != size:
            raise CheckpointError(
                f"checkpoint {folder}: {rel} has {file.stat().st_size} bytes, the manifest "
                f"says {size} (the file was changed or truncated)"
            )
    return manifest


def check_resumable(folder: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """Refuse, in one line saying what to do, a checkpoint whose format this version cannot resume."""
    if manifest.get("format") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {folder}: format {manifest.get('format')!r} (weights and AdamW state gathered on rank 0) "
            f"cannot be resumed by this version, which resumes format {FORMAT_VERSION}; continue it with areal-adv "
            f"0.3.0, or start a new run from its policy with model.path={Path(folder) / 'policy'} (the AdamW "
            "state then starts afresh)"
        )


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def list_checkpoints(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint under `root`, oldest first; damaged ones are skipped."""
    complete = []
    for step, folder in _step_dirs(Path(root)):
        try:
            manifest = read_manifest(folder)
        except CheckpointError as exc:
            logger.warning("ignoring %s", exc)
            continue
        if manifest.get("step") != step:
            logger.warning("ignoring checkpoint %s: its manifest says step %s", folder, manifest.get("step"))
            continue
        complete.append((step, folder))
    return complete


def latest_checkpoint(root: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint under `root` (None when there is none)."""
    found = list_checkpoints(root)
    return found[-1][1] if found else None


# -- housekeeping -------------------------------------------------------------------------


def remove_leftovers(root: str | os.PathLike) -> list[Path]:
    """Delete temporary and moved-aside folders of saves that were interrupted."""
    root = Path(root)
    if not root.is_dir():
        return []
    gone = [p for p in root.iterdir() if p.is_dir() and p.name.startswith((_TMP_PREFIX, _OLD_PREFIX))]
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone


def prune(root: str | os.PathLike, keep_last: int | None) -> list[Path]:
    """Delete all but the newest `keep_last` complete checkpoints (None keeps all); returns what went."""
    if keep_last is None:
        return []
    found = list_checkpoints(root)
    doomed = [folder for _, folder in found[:-keep_last]] if len(found) > keep_last else []
    for folder in doomed:
        shutil.rmtree(folder)
    return doomed


def remove_newer_than(root: str | os.PathLike, step: int) -> list[Path]:
    """Delete checkpoints after `step`: after resuming from `step` they describe a history that is replaced."""
    doomed = [folder for s, folder in _step_dirs(Path(root)) if s > step]
    for folder in doomed:
        shutil.rmtree(folder)
    return doomed
