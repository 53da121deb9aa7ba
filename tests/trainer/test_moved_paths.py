"""The module paths from before the regrouping into packages still import, as the moved modules themselves."""

from __future__ import annotations

import importlib
import importlib.machinery
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from areal.trainer.moved_paths import MOVED

ROOT = Path(__file__).resolve().parents[2]

#: names the README and docs showed at those paths before the move (README.md, docs/, examples/ at 236c054^1)
DOCUMENTED_BEFORE = [
    "areal.trainer.cpu_threads.apply_num_threads",
    "areal.trainer.distributed.barrier",
    "areal.trainer.distributed.destroy",
    "areal.trainer.distributed.init_distributed",
    "areal.trainer.distributed.reduce_metrics",
    "areal.trainer.distributed.shard_groups",
    "areal.trainer.failures.RankFailure",
    "areal.trainer.metrics.is_wall_clock",
    "areal.trainer.ppo.gdpo",
    "areal.trainer.ppo.peer_algorithms",
    "areal.trainer.ppo.reward_components.weighted_sum",
    "areal.trainer.preflight",
    "areal.trainer.trainer.Trainer",
]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module(old: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old]) and sys.modules[old] is module


@pytest.mark.parametrize("old", sorted(MOVED))
def test_no_real_module_sits_at_an_old_path(old: str) -> None:
    """An alias never hides a file: the old name has no module of its own (the standard finders find nothing)."""
    parent, _, name = old.rpartition(".")
    search = importlib.import_module(parent).__path__
    assert importlib.machinery.PathFinder.find_spec(old, search) is None, old


@pytest.mark.parametrize("dotted", DOCUMENTED_BEFORE)
def test_names_the_docs_showed_before_still_import(dotted: str) -> None:
    module, _, name = dotted.rpartition(".")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            importlib.import_module(dotted)
        except ImportError:
            assert hasattr(importlib.import_module(module), name), dotted


def test_the_old_path_warns_with_the_new_one() -> None:
    code = (
        "import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "try:\n    import areal.trainer.engine\nexcept DeprecationWarning as e:\n    print(e)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (
        "areal.trainer.engine moved to areal.trainer.parallel.engine in areal 0.1.0; import it from there"
        in proc.stdout
    ), proc.stderr[-2000:]


def test_an_unknown_path_still_fails_as_before() -> None:
    with pytest.raises(ModuleNotFoundError, match="areal.trainer.nope"):
        importlib.import_module("areal.trainer.nope")
