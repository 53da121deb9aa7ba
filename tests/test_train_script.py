"""`scripts/train.sh` from the user's own folder (issue 20, item 2).

From a folder outside the clone holding `my_run.yaml`, a `mypkg/` reward plugin and
`data/train.jsonl`, `<clone>/scripts/train.sh --config my_run.yaml` trains with no PYTHONPATH:
the config, the data path and `output.dir` resolve against that folder, the plugin imports from
it, and `runs/` is written there, not in the clone. The `areal-adv` console script finds the plugin too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv"

pytestmark = pytest.mark.skipif(
    Path(sys.prefix).resolve() != VENV.resolve(),
    reason="scripts/train.sh runs the clone's .venv, which is not this interpreter",
)

MY_RUN = """\
experiment_name: my_run
task: {implementation: dataset}
data: {train: data/train.jsonl, prompt_key: prompt}
reward:
  - {implementation: mypkg.rewards.exact_answer, weight: 1.0}
model: {hidden_size: 32, num_heads: 2, intermediate_size: 64}
rollout: {batch_size: 2, n_samples: 4}
actor: {max_new_tokens: 2}
eval: {every: null}
train: {steps: 2, save_every: 0}
output: {progress_bar: false, plot: false}
"""

REWARDS = """\
def exact_answer(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip() == str(a) else 0.0 for c, a in zip(completions, answer)]
"""


def _user_folder(tmp_path: Path) -> Path:
    user = tmp_path / "my_project"
    (user / "mypkg").mkdir(parents=True)
    (user / "data").mkdir()
    (user / "my_run.yaml").write_text(MY_RUN)
    (user / "mypkg" / "__init__.py").write_text("")
    (user / "mypkg" / "rewards.py").write_text(REWARDS)
    rows = [{"prompt": f"{a} + {b} =", "answer": str(a + b)} for a in range(3) for b in range(3)]
    (user / "data" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return user


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LOCAL_WORLD_SIZE", "RANK", "WORLD_SIZE")}


def test_train_sh_runs_in_the_callers_folder(tmp_path: Path) -> None:
    user = _user_folder(tmp_path)
    assert not str(user.resolve()).startswith(str(ROOT.resolve()))
    proc = subprocess.run(
        [str(ROOT / "scripts" / "train.sh"), "--config", "my_run.yaml"],
        cwd=user,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    metrics = user / "runs" / "my_run" / "trial0" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and all("reward/exact_answer" in r for r in rows)
    assert not (ROOT / "runs" / "my_run").exists()
    assert "metrics runs/my_run/trial0/metrics.jsonl" in proc.stdout


def test_the_console_script_imports_plugins_from_the_callers_folder(tmp_path: Path) -> None:
    user = _user_folder(tmp_path)
    proc = subprocess.run(
        [str(VENV / "bin" / "areal-adv"), "validate", "my_run.yaml"],
        cwd=user,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mypkg.rewards.exact_answer" in proc.stdout and "config OK" in proc.stdout
