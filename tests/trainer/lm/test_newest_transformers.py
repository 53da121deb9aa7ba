"""The rollout sampler and the trainer on the newest transformers release, beside the pinned one.

constraints.txt pins transformers 5.10.4 (verl 0.9.1 caps it below 5.11), while a plain
`pip install areal-adv` gets the newest release. scripts/setup_transformers_newest.sh builds
`.venv-transformers-newest`: the release pinned in scripts/transformers-newest-requirements.txt, put
in front of .venv's packages on PYTHONPATH (torch and the rest are .venv's). There the sampling
tests run, and a short training run draws the same tokens and gets the same metrics as under the
pinned release, without a deprecation warning.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: one worker for the module: its fixture (the set-up script) runs once, where on a fresh clone three workers
#: would each start it and two of them wait on its lock while the first builds
pytestmark = pytest.mark.xdist_group("newest_transformers")

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / ".venv-transformers-newest"
REQUIREMENTS = ROOT / "scripts" / "transformers-newest-requirements.txt"
#: the sampling tests that touch transformers (the draw's distribution tests are plain torch: not rerun)
SAMPLING_TESTS = ("tests/trainer/lm/test_sampling.py", "tests/trainer/lm/test_sampling_checkpoint.py")
NOT_RERUN = ("test_inverse_cdf_draw_",)
RUN = (
    "train.steps=3",
    "seed=3",
    "output.plot=false",
    "output.progress_bar=false",
    "output.loggers=[jsonl]",
    "train.save_every=0",
    "train.num_threads=1",
)
#: what a run reports that must not depend on the transformers release
COMPARED = ("reward_mean", "policy_loss", "grad_norm", "kl", "entropy", "adv_mean", "response_tokens")


def pinned(name: str) -> str:
    """The version scripts/transformers-newest-requirements.txt pins for `name`."""
    for line in REQUIREMENTS.read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{REQUIREMENTS} pins no {name}")


def _clean_env() -> dict[str, str]:
    """This process's environment without pytest's own variables (the child runs its own session)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


@pytest.fixture(scope="module")
def newest_env() -> dict[str, str]:
    """The environment of a child process that imports the newest release (built once, then found up to date)."""
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup_transformers_newest.sh")], capture_output=True, text=True, timeout=600
    )
    assert setup.returncode == 0, setup.stdout[-4000:] + setup.stderr[-4000:]
    env = _clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TARGET), str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def test_the_environment_imports_the_pinned_newest_release(newest_env: dict[str, str]) -> None:
    import transformers

    code = (  # the metadata and the module's location, without importing it (and torch)
        "import importlib.metadata as m, importlib.util as u; "
        "print(m.version('transformers'), u.find_spec('transformers').origin)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=newest_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    version, path = proc.stdout.split()
    assert version == pinned("transformers") and Path(path).is_relative_to(TARGET)
    assert transformers.__version__ != version  # this process has the pinned release: two different ones


def test_the_sampling_tests_pass_on_the_newest_release(newest_env: dict[str, str]) -> None:
    selection = " and ".join(f"not {name}" for name in NOT_RERUN)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error::FutureWarning"]
        + ["-k", selection, *SAMPLING_TESTS],
        cwd=ROOT,
        env=newest_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1] and "deselected" in proc.stdout.splitlines()[-1]


def _records(out: Path) -> tuple[list[dict], list[str]]:
    """A run's metric rows and sample lines."""
    run_dir = out / "grpo_arith" / "trial0"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, (run_dir / "samples.jsonl").read_text().splitlines()


def test_a_run_draws_the_same_tokens_under_both_releases_and_no_warning(
    newest_env: dict[str, str], tmp_path: Path
) -> None:
    """The sampler's draws do not depend on the release (benchmark rows rest on them), and nothing is deprecated."""
    from areal_adv.trainer.main import main

    assert main([*RUN, f"output.dir={tmp_path / 'pinned'}"]) == 0  # this process: the pinned release
    proc = subprocess.run(
        [sys.executable, "-m", "areal_adv.trainer.main", *RUN, f"output.dir={tmp_path / 'newest'}"],
        cwd=tmp_path,
        env=newest_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "deprecated" not in proc.stderr.lower() and "FutureWarning" not in proc.stderr, proc.stderr[-4000:]
    (pinned_rows, pinned_samples), (rows, samples) = _records(tmp_path / "pinned"), _records(tmp_path / "newest")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert [[r[k] for k in COMPARED] for r in rows] == [[r[k] for k in COMPARED] for r in pinned_rows]
    assert samples == pinned_samples and samples
