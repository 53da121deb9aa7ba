"""Run directories `<output.dir>/<experiment_name>/<trial_name>`: refusal, overwrite, trials, resume=auto."""

from __future__ import annotations

from pathlib import Path

import pytest

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.trainer.main import main
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.run_dir import RunDirectoryError, plan_run, truncate_jsonl

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "train.steps=1",
    "output.loggers=[jsonl]",
]


def _cfg(tmp_path: Path, *extra: str):
    return load_config(DEFAULT, [*TINY, f"output.dir={tmp_path}", *extra])


def test_the_run_directory_is_experiment_then_trial(tmp_path: Path) -> None:
    result = Trainer(_cfg(tmp_path, "trial_name=seed7", "seed=7")).run()
    assert result.run_dir == tmp_path / "grpo_arith" / "seed7"
    assert {p.name for p in result.run_dir.iterdir()} >= {"metrics.jsonl", "config.yaml", "checkpoints"}


def test_a_new_run_over_an_old_one_is_refused_with_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    Trainer(_cfg(tmp_path)).run()
    with pytest.raises(RunDirectoryError) as info:
        Trainer(_cfg(tmp_path))
    message = str(info.value)
    assert (
        f"run directory {tmp_path / 'grpo_arith' / 'trial0'} already holds a run (metrics.jsonl, config.yaml, "
        "checkpoints)" in message
    )
    for advice in ("train.resume=auto", "output.overwrite=true", "trial_name=<new name>"):
        assert advice in message
    # on the command line: exit 1 before any model is built, the old run untouched
    metrics = (tmp_path / "grpo_arith" / "trial0" / "metrics.jsonl").read_text()
    assert main(["--config", str(DEFAULT), *TINY, f"output.dir={tmp_path}"]) == 1
    assert "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "grpo_arith" / "trial0" / "metrics.jsonl").read_text() == metrics


def test_the_refusal_comes_before_torch_and_the_model_load(tmp_path: Path) -> None:
    """A taken run directory is answered from the config and the disk alone, as fast as a bad key."""
    import os
    import subprocess
    import sys

    (tmp_path / "grpo_arith" / "trial0").mkdir(parents=True)
    (tmp_path / "grpo_arith" / "trial0" / "config.yaml").write_text("seed: 1\n")
    code = (
        "import sys; from areal_adv.trainer.main import main; "
        f"rc = main(['--config', {str(DEFAULT)!r}, 'output.dir={tmp_path}']); "
        "print(rc, sorted(m for m in ('torch', 'transformers', 'numba') if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}  # a single process
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.stdout.strip() == "1 []", proc.stdout + proc.stderr
    assert proc.stderr.startswith(
        f"config error: run directory {tmp_path / 'grpo_arith' / 'trial0'} already holds a run (config.yaml)"
    ), proc.stderr


def test_another_trial_name_runs_beside_it(tmp_path: Path) -> None:
    Trainer(_cfg(tmp_path)).run()
    other = Trainer(_cfg(tmp_path, "trial_name=trial1")).run()
    assert other.run_dir == tmp_path / "grpo_arith" / "trial1"
    assert (tmp_path / "grpo_arith" / "trial0" / "metrics.jsonl").is_file()


def test_overwrite_replaces_the_old_run(tmp_path: Path) -> None:
    first = Trainer(_cfg(tmp_path, "train.steps=2")).run()
    (first.run_dir / "stray.txt").write_text("old")
    second = Trainer(_cfg(tmp_path, "output.overwrite=true")).run()
    assert second.run_dir == first.run_dir and not (first.run_dir / "stray.txt").exists()
    assert [p.name for p in (second.run_dir / "checkpoints").iterdir()] == ["step_1"]
    assert len((second.run_dir / "metrics.jsonl").read_text().splitlines()) == 1


def test_resume_auto_without_a_checkpoint_starts_a_new_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "grpo_arith" / "trial0"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    plan = plan_run(_cfg(tmp_path, "train.resume=auto"))
    assert plan.resume_from is None and plan.clear
    result = Trainer(_cfg(tmp_path, "train.resume=auto", "train.steps=2")).run()
    assert result.resumed_from is None and result.steps_done == 2
    # and the next auto run continues from the checkpoint that run wrote
    again = Trainer(_cfg(tmp_path, "train.resume=auto", "train.steps=3")).run()
    assert again.resumed_from == run_dir / "checkpoints" / "step_2" and again.steps_done == 3


def test_a_fresh_directory_needs_no_flag(tmp_path: Path) -> None:
    plan = plan_run(_cfg(tmp_path))
    assert plan.resume_from is None and not plan.clear and not plan.run_dir.exists()


def test_resume_and_overwrite_together_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RunDirectoryError, match="train.resume='auto' and output.overwrite=true contradict"):
        plan_run(_cfg(tmp_path, "train.resume=auto", "output.overwrite=true"))


@pytest.mark.parametrize(
    "value,match",
    [
        ("/no/such/folder", r"train\.resume: '/no/such/folder' is not a directory"),
        ("{tmp}", r"train\.resume: '.*' has no areal_checkpoint\.json, so it is not a complete checkpoint"),
    ],
)
def test_a_bad_resume_folder_names_the_field(tmp_path: Path, value: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, f"train.resume={value.format(tmp=tmp_path)}")


@pytest.mark.parametrize(
    "override,match",
    [
        ("trial_name=a/b", r"trial_name: got 'a/b'"),
        ("train.save_every=-1", r"train\.save_every: got -1"),
        ("train.keep_last=0", r"train\.keep_last: got 0"),
        (
            "output.loggers=[jsonl,csv]",
            r"output\.loggers\[1\]: got 'csv', expected one of \['jsonl', 'tensorboard', "
            r"'wandb'\]",
        ),
        (
            "output.loggers=[jsonl,jsonl]",
            r"output\.loggers: got \['jsonl', 'jsonl'\], expected each logger at most once",
        ),
        ("output.wandb_mode=cloud", r"output\.wandb_mode: got 'cloud'"),
        ("output.plot_smoothing=1.0", r"output\.plot_smoothing: got 1\.0, expected a number in \[0, 1\)"),
        (
            "output.save_checkpoint=true",
            r"output\.save_checkpoint: retired; checkpoints are written every "
            r"train\.save_every steps",
        ),
        ("train.num_threads=0", r"train\.num_threads: got 0"),
    ],
)
def test_bad_run_settings_name_the_field(tmp_path: Path, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(tmp_path, override)


def test_truncate_keeps_the_rows_before_the_step_and_drops_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2}\n{"step": 3, "x"')
    assert truncate_jsonl(path, 2) == [{"step": 0}, {"step": 1}]
    assert path.read_text() == '{"step": 0}\n{"step": 1}\n'


def test_a_run_that_died_before_its_first_step_does_not_block_the_next(
    tmp_path: Path, capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "grpo_arith" / "trial0"
    crash = "reward=[{implementation: plugins.bad_plugins.reward_raises}]"  # tests/trainer is on sys.path (conftest.py)
    assert main(["--config", str(DEFAULT), *TINY, f"output.dir={tmp_path}", crash]) == 1
    assert {"config.yaml", "metrics.jsonl", "error.log"} <= {p.name for p in run_dir.iterdir()}
    assert not (run_dir / "metrics.jsonl").read_text().strip()
    with caplog.at_level("WARNING", logger="areal_adv.run_dir"):
        assert main(["--config", str(DEFAULT), *TINY, f"output.dir={tmp_path}"]) == 0
    assert f"run directory {run_dir}: the run there stopped before its first step" in caplog.text
    assert not (run_dir / "error.log").exists()  # the crashed run's leftovers went with it
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize(
    "files, reused",
    [
        ({"metrics.jsonl": "", "config.yaml": "x"}, True),
        ({"metrics.jsonl": '{"step": 0, "reward_mean"', "tensorboard/events": ""}, True),  # only a torn row
        ({"metrics.jsonl": '{"step": 0}\n'}, False),  # a completed step
        ({"tensorboard/events": "", "config.yaml": "x"}, False),  # no metrics.jsonl: nothing tells, so protected
    ],
)
def test_only_a_directory_without_a_step_or_a_checkpoint_is_reused(tmp_path: Path, files: dict, reused: bool) -> None:
    run_dir = tmp_path / "grpo_arith" / "trial0"
    for name, text in files.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    if reused:
        plan = plan_run(_cfg(tmp_path))
        assert plan.clear and plan.resume_from is None
        return
    with pytest.raises(RunDirectoryError) as info:
        plan_run(_cfg(tmp_path))
    assert "train.resume=auto" in str(info.value) and "output.overwrite=true" in str(info.value)


def test_a_checkpoint_protects_a_run_whose_metrics_were_lost(tmp_path: Path) -> None:
    result = Trainer(_cfg(tmp_path)).run()
    (result.run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        plan_run(_cfg(tmp_path))
