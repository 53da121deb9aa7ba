"""Dotted import paths: the caller's folder is importable, and a path that does not resolve says which part."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from areal_adv.utils.dynamic_import import PluginResolutionError, bind_kwargs, import_object
from areal_adv.utils.suggest import did_you_mean


def _package(folder: Path) -> Path:
    (folder / "mypkg").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text("")
    (folder / "mypkg" / "rewards.py").write_text(
        "def exact_answer(prompts, completions, **kw):\n    return [1.0] * len(prompts)\n"
    )
    return folder


@pytest.fixture()
def in_user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package in a fresh working directory; sys.path and sys.modules restored afterwards."""
    monkeypatch.chdir(_package(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


@pytest.mark.parametrize(
    "path, message",
    [
        (
            "mypkg.reward.exact_answer",
            "no module named 'mypkg.reward', and 'mypkg' has no attribute 'reward'; did you mean 'rewards'?",
        ),
        (
            "mypkg.rewards.exact_answr",
            "module 'mypkg.rewards' has no attribute 'exact_answr'; did you mean 'exact_answer'?",
        ),
        ("mypkgg.rewards.exact_answer", "no module named 'mypkgg'"),
        ("mypkg.rewards.nothing_like_it", "module 'mypkg.rewards' has no attribute 'nothing_like_it'"),
    ],
)
def test_the_part_that_does_not_resolve_is_named(in_user_folder: Path, path: str, message: str) -> None:
    with pytest.raises(PluginResolutionError) as info:
        import_object(path, stage="reward[0]")
    text = str(info.value)
    if path.startswith("mypkgg"):  # the top-level package itself is missing: where it was looked for
        assert text.startswith(f"reward[0]: cannot use {path!r}: {message} ("), text
        assert f"looked in the working directory {in_user_folder}" in text
    else:
        assert text == f"reward[0]: cannot use {path!r}: {message}"


def test_the_working_directory_is_importable_without_python_m(tmp_path: Path) -> None:
    """As under the `areal-adv` console script: sys.path[0] is the script's folder, not the working directory."""
    code = textwrap.dedent("""
        import os, sys
        sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
        from areal_adv.utils.dynamic_import import import_object
        fn = import_object("mypkg.rewards.exact_answer", stage="reward[0]")
        print(fn(["a", "b"], ["x", "y"]), sys.path[0] == os.getcwd())
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=_package(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[1.0,", "1.0]", "True"]


def test_an_unknown_kwarg_gets_the_nearest_parameter() -> None:
    def stage(inputs, *, factor: float = 1.0, offset: float = 0.0):
        return inputs

    with pytest.raises(PluginResolutionError, match=r"kwargs \['factr'\]: .*; did you mean 'factor' for 'factr'\?$"):
        bind_kwargs(stage, {"factr": 2.0}, stage="estimator", path="pkg.mod.stage")


def test_did_you_mean_is_ours() -> None:
    assert did_you_mean("evry", ["every", "n_prompts"]) == "; did you mean 'every'?"
    assert did_you_mean("zzz", ["every", "n_prompts"]) == ""
    assert (
        did_you_mean(["evry", "zzz", "n_prompt"], ["every", "n_prompts"])
        == "; did you mean 'every' for 'evry', 'n_prompts' for 'n_prompt'?"
    )
