"""The import paths besides `areal_adv.*`: the seed's `areal.*` names (without and beside AReaL) and moved modules."""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import subprocess
import sys
import sysconfig
import textwrap
import warnings
import zipfile
from pathlib import Path

import pytest

import areal_adv
from areal_adv.import_paths import MOVED, ImportPathFinder

ROOT = Path(__file__).resolve().parents[1]

#: names the README and docs showed at those paths before the move into packages (0.1.0)
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


def run_python(code: str, cwd: Path) -> dict:
    """Run `code` in a fresh interpreter of this venv from `cwd`; it prints one JSON object."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- moved modules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_moved_module(old: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(old)
        seed_spelling = importlib.import_module("areal" + old.removeprefix("areal_adv"))
    assert module is importlib.import_module(MOVED[old]) and sys.modules[old] is module
    assert seed_spelling is module


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


def test_the_old_path_warns_with_the_new_one(tmp_path: Path) -> None:
    out = run_python(
        """
        import json, warnings
        warnings.simplefilter('error', DeprecationWarning)
        try:
            import areal.trainer.engine
        except DeprecationWarning as e:
            print(json.dumps(str(e)))
        """,
        tmp_path,
    )
    assert out == (
        "areal.trainer.engine moved to areal_adv.trainer.parallel.engine in areal-adv 0.1.0; import it from there "
        "(the old path still works, with this warning)"
    )


@pytest.mark.parametrize("name", ["areal_adv.trainer.nope", "areal.trainer.nope", "areal.nope"])
def test_an_unknown_path_still_fails_as_before(name: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=name.replace(".", r"\.")):
        importlib.import_module(name)


# --- the seed's names without AReaL ----------------------------------------------------------------


def test_the_finder_is_installed_at_start_before_the_path_finders(tmp_path: Path) -> None:
    """`areal_adv.pth` installs it: the first `areal.*` import of a fresh interpreter already resolves."""
    out = run_python(
        """
        import json, sys
        names = [getattr(f, "__name__", type(f).__name__) for f in sys.meta_path]
        import areal.trainer.ppo.advantage as seed, areal_adv.trainer.ppo.advantage as ours
        print(json.dumps({"names": names, "same": seed is ours and sys.modules["areal"] is sys.modules["areal_adv"]}))
        """,
        tmp_path,
    )
    names = out["names"]
    assert names.index("ImportPathFinder") < names.index("PathFinder"), names
    assert out["same"]


def test_the_pth_file_is_in_site_packages() -> None:
    pth = Path(sysconfig.get_paths()["purelib"]) / "areal_adv.pth"
    assert pth.read_text().strip() == (ROOT / "areal_adv.pth").read_text().strip()


def test_the_wheel_ships_the_pth_file(tmp_path: Path) -> None:
    wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    proc = subprocess.run([*wheel, str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("areal_adv-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "areal_adv.pth" in names and "areal_adv/import_paths.py" in names
    assert not any(n.startswith("areal/") for n in names), "the wheel must not ship a top-level `areal` package"


def test_python_dash_m_runs_a_seed_path(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "areal.cli", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith("usage: areal-adv"), proc.stderr[-2000:]


def test_a_bare_areal_directory_does_not_hide_ours(tmp_path: Path) -> None:
    """A folder named `areal` without `__init__.py` (e.g. of results) in the working directory is no package."""
    (tmp_path / "areal").mkdir()
    out = run_python(
        """
        import json, sys
        import areal.api.cli_args as seed, areal_adv.api.cli_args as ours
        print(json.dumps(seed is ours))
        """,
        tmp_path,
    )
    assert out is True


# --- the seed's names beside AReaL -----------------------------------------------------------------

#: A stand-in for AReaL: its top-level package and two of the four module paths both projects have.
FAKE_AREAL = {
    "areal/__init__.py": "WHO = 'AReaL'\n",
    "areal/api/__init__.py": "",
    "areal/api/cli_args.py": "WHO = 'AReaL'\n",
    "areal/trainer/__init__.py": "",
    "areal/trainer/ppo/__init__.py": "",
    "areal/trainer/ppo/actor.py": "class PPOActor:\n    WHO = 'AReaL'\n",
}


def test_beside_areal_its_modules_win_and_the_rest_are_ours(tmp_path: Path) -> None:
    for rel, text in FAKE_AREAL.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = run_python(
        """
        import json, sys
        import areal, areal.api.cli_args, areal.trainer.ppo.actor
        import areal.trainer.ppo.advantage as seed, areal_adv.trainer.ppo.advantage as ours
        import areal.utils.data, areal_adv.utils.data
        try:
            import areal.nope
            missing = "imported"
        except ModuleNotFoundError as e:
            missing = str(e)
        print(json.dumps({
            "top": areal.WHO, "cli_args": areal.api.cli_args.WHO, "actor": areal.trainer.ppo.actor.PPOActor.WHO,
            "advantage": seed.OutcomeRewardInputs is ours.OutcomeRewardInputs,
            "utils": sys.modules["areal.utils.data"] is areal_adv.utils.data,
            "areal_is_ours": sys.modules["areal"] is sys.modules.get("areal_adv"),
            "missing": missing,
        }))
        """,
        tmp_path,
    )
    assert out == {
        "top": "AReaL",
        "cli_args": "AReaL",
        "actor": "AReaL",
        "advantage": True,
        "utils": True,
        "areal_is_ours": False,
        "missing": "No module named 'areal.nope'",
    }


def test_the_finder_passes_every_other_name() -> None:
    finder = ImportPathFinder()
    assert finder.find_spec("json") is None and finder.find_spec("areal_adv.api") is None
    assert finder.find_spec("arealx") is None
    assert areal_adv.__name__ == "areal_adv"
