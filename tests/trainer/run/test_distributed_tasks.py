"""Task plugins, reward functions and evaluation on 2 gloo ranks (torchrun, CPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path[:0] = [str(ROOT), str(HERE)]

import tiny_run  # noqa: E402
from dist_launch import clean_env, rank_envs, run_bounded, warm_torchrun  # noqa: E402

from areal_adv.api.cli_args import load_config  # noqa: E402
from areal_adv.trainer.run.loop import Trainer  # noqa: E402

CONFIG = ROOT / "examples" / "custom_task" / "single_turn.yaml"
TINY = [
    *tiny_run.TINY,
    "train.steps=2",
    "train.num_threads=1",
    "train.dist_timeout_s=60",
    "eval.every=1",
    "eval.n_prompts=7",
    "reward=[{implementation: examples.custom_task.rewards.brevity, weight: 0.5}]",
]


def test_eval_and_reward_components_on_two_ranks_equal_one_process(tmp_path: Path) -> None:
    cmd = [
        *warm_torchrun(),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(CONFIG),
        *TINY,
        f"output.dir={tmp_path / 'dp'}",
    ]
    [(code, out, err)] = run_bounded([cmd], [clean_env()], 150, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    rows = [
        json.loads(line)
        for line in (tmp_path / "dp" / "custom_max" / "trial0" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["eval/updates"] for r in rows] == [0.0, 2.0]
    assert all("reward/brevity" in r and "reward/make_max_task" in r for r in rows)
    single = Trainer(load_config(CONFIG, [*TINY, f"output.dir={tmp_path / 'one'}"]))
    # the same initial weights: the 7 held-out prompts, decoded 4 + 3 on the two ranks and averaged by
    # episodes, give exactly the one-process numbers
    before = single.evaluate(0)
    for key in ("eval/accuracy", "eval/reward_mean", "eval/reward/make_max_task", "eval/reward/brevity"):
        assert before[key] == rows[0][key], key
    samples = (tmp_path / "dp" / "custom_max" / "trial0" / "samples.jsonl").read_text().splitlines()
    assert samples and all(json.loads(s)["split"] in ("train", "eval") for s in samples)  # rank 0 writes


def test_task_plugin_failing_on_one_rank_stops_every_rank(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(CONFIG),
        *TINY,
        f"output.dir={tmp_path}",
        "task.implementation=plugins.rank_task.make_max_task",
    ]
    results = run_bounded([cmd, cmd], rank_envs(2), timeout=120, warm=True)
    for rank, (code, out, err) in enumerate(results):
        assert code == 1, f"rank {rank} exited {code}:\n{out}\n{err}"
        assert "trainer start-up failed: rank 1: task.implementation: cannot use 'plugins.rank_task" in err, err
        assert "simulated missing dependency on rank 1" in err and "Traceback" not in err, err
    assert not (tmp_path / "custom_max").exists()
