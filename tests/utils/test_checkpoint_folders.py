"""Checkpoint folders: atomic publication, a kill during a save, the manifest checks, pruning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from areal_adv.utils.checkpoint_folders import (
    MANIFEST,
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    prune,
    read_manifest,
    remove_leftovers,
    remove_newer_than,
    write_atomically,
)

ROOT = Path(__file__).resolve().parents[1]


def _writer(payload: str):
    def write(folder: Path) -> dict:
        (folder / "weights.bin").write_bytes(payload.encode() * 100)
        (folder / "sub").mkdir()
        (folder / "sub" / "state.json").write_text(json.dumps({"payload": payload}))
        return {"note": payload}

    return write


def test_write_publishes_a_complete_folder(tmp_path: Path) -> None:
    folder = write_atomically(tmp_path, 7, _writer("a"))
    assert folder == tmp_path / "step_7"
    manifest = read_manifest(folder)
    assert manifest["step"] == 7 and manifest["note"] == "a"
    assert manifest["files"] == {"weights.bin": 100, "sub/state.json": len(json.dumps({"payload": "a"}))}
    assert [p.name for p in tmp_path.iterdir()] == ["step_7"]  # no temporary folder left


def test_a_failing_writer_leaves_nothing_and_the_previous_checkpoint_intact(tmp_path: Path) -> None:
    write_atomically(tmp_path, 2, _writer("a"))

    def broken(folder: Path) -> None:
        (folder / "weights.bin").write_bytes(b"partial")
        raise KeyboardInterrupt  # Ctrl-C in the middle of a save

    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path, 4, broken)
    assert [p.name for p in tmp_path.iterdir()] == ["step_2"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_2"


_KILL_SCRIPT = """
import os, signal, sys
from pathlib import Path
from areal_adv.utils import checkpoint_folders as checkpoint

root, when = Path(sys.argv[1]), sys.argv[2]
def write(folder):
    (folder / "weights.bin").write_bytes(b"new" * 1000)
    if when == "in_writer":
        os.kill(os.getpid(), signal.SIGKILL)
real_write_json = checkpoint._write_json
def write_json(path, data):
    real_write_json(path, data)
    if when == "before_rename":  # the manifest is complete, the folder not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
checkpoint._write_json = write_json
checkpoint.write_atomically(root, 4, write)
"""


@pytest.mark.parametrize("when", ["in_writer", "before_rename"])
def test_a_kill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path: Path, when: str) -> None:
    previous = write_atomically(tmp_path, 2, _writer("old"))
    before = {p.name: p.read_bytes() for p in previous.rglob("*") if p.is_file()}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILL_SCRIPT), str(tmp_path), when],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1  # the interrupted save is still there, but invisible
    assert list_checkpoints(tmp_path) == [(2, previous)]
    assert {p.name: p.read_bytes() for p in previous.rglob("*") if p.is_file()} == before
    assert read_manifest(previous)["note"] == "old"
    assert remove_leftovers(tmp_path) == leftovers and not leftovers[0].exists()


def test_rewriting_a_step_replaces_it(tmp_path: Path) -> None:
    write_atomically(tmp_path, 3, _writer("a"))
    write_atomically(tmp_path, 3, _writer("b"))
    assert read_manifest(tmp_path / "step_3")["note"] == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["step_3"]


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda f: (f / MANIFEST).unlink(), "no areal_checkpoint.json, so the save never completed"),
        (lambda f: (f / MANIFEST).write_text("{not json"), "unreadable areal_checkpoint.json"),
        (lambda f: (f / "weights.bin").unlink(), "weights.bin is listed in the manifest but missing"),
        (lambda f: (f / "weights.bin").write_bytes(b"short"), "weights.bin has 5 bytes, the manifest says 100"),
        (lambda f: (f / MANIFEST).write_text(json.dumps({"format": 99, "files": {}})), "format 99"),
    ],
)
def test_a_damaged_checkpoint_is_refused_and_skipped(tmp_path: Path, damage, match: str) -> None:
    good = write_atomically(tmp_path, 1, _writer("a"))
    bad = write_atomically(tmp_path, 2, _writer("b"))
    damage(bad)
    with pytest.raises(CheckpointError, match=match):
        read_manifest(bad)
    assert latest_checkpoint(tmp_path) == good


def test_steps_sort_numerically_and_prune_keeps_the_newest(tmp_path: Path) -> None:
    for step in (9, 10, 100, 2):
        write_atomically(tmp_path, step, _writer(str(step)))
    (tmp_path / "step_x").mkdir()  # not a checkpoint name
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 9, 10, 100]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_100"
    assert prune(tmp_path, None) == []
    assert prune(tmp_path, 2) == [tmp_path / "step_2", tmp_path / "step_9"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10, 100]
    assert remove_newer_than(tmp_path, 10) == [tmp_path / "step_100"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_10"


def test_no_checkpoints(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path / "missing") is None and list_checkpoints(tmp_path) == []
