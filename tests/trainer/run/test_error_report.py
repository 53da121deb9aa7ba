"""A failed run ends with one line at the bottom; the traceback is in <run dir>/error.log (issue 20, item 5).

Errors from the user's code (reward function, task, advantage stage) print no traceback unless
`--debug` or `AREAL_TRACEBACK=1` asks for it; anything else keeps its traceback on the terminal,
still followed by the one line. A raising reward function is re-scored one row at a time so that
the line names the first failing row.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from areal.trainer.main import main
from areal.trainer.rollout.reward_functions import RewardFunction, RewardFunctionError, call_reward_function

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = ["rollout.batch_size=2", "rollout.n_samples=4", "model.hidden_size=32", "model.num_heads=2",
        "model.intermediate_size=64", "output.progress_bar=false", "output.plot=false", "train.steps=2"]
BAD = "plugins.bad_plugins"  # tests/trainer is on sys.path (tests/trainer/conftest.py)


def _train(tmp_path: Path, capsys: pytest.CaptureFixture, *extra: str) -> tuple[int, str, Path]:
    capsys.readouterr()
    code = main(["--config", str(DEFAULT), *TINY, f"output.dir={tmp_path}", *extra])
    return code, capsys.readouterr().err, tmp_path / "grpo_arith" / "trial0"


@pytest.fixture(autouse=True)
def _no_traceback_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AREAL_TRACEBACK", raising=False)


def test_a_raising_reward_function_ends_with_one_line_naming_it_and_the_row(tmp_path, capsys) -> None:
    code, err, run_dir = _train(tmp_path, capsys, f"reward=[{{implementation: {BAD}.reward_raises}}]")
    assert code == 1
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error in step 0 > rollout: RewardFunctionError: reward[0] (reward_raises) "
                           f"'{BAD}.reward_raises': raised ZeroDivisionError: boom (on 8 completions; columns "
                           "passed: ['a', 'answer', 'b', 'completion_ids']); first failing row: 0 (prompt '"), last
    log = run_dir / "error.log"
    assert last.endswith(f"(traceback in {log}; AREAL_TRACEBACK=1 or --debug prints it)")
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in reward_raises" in text
    assert "ZeroDivisionError: boom" in text


@pytest.mark.parametrize("how", ["--debug", "AREAL_TRACEBACK=1"])
def test_the_traceback_is_printed_on_request_with_the_line_still_last(tmp_path, capsys, monkeypatch, how) -> None:
    extra = [how] if how.startswith("--") else []
    if not extra:
        monkeypatch.setenv("AREAL_TRACEBACK", "1")
    code, err, run_dir = _train(tmp_path, capsys, f"reward=[{{implementation: {BAD}.reward_raises}}]", *extra)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in reward_raises" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error in step 0 > rollout: RewardFunctionError: reward[0] (reward_raises)")
    assert last.endswith(f"(traceback in {run_dir / 'error.log'})")


@pytest.mark.parametrize("override, start", [
    (f"actor.advantage.outcome_reward_shaping.implementation={BAD}.outcome_raises",
     "error in step 0 > advantages: StageContractError: advantage stage 'outcome_reward_shaping' "
     f"({BAD}.outcome_raises): raised RuntimeError: stage boom"),
    (f"task.name={BAD}.make_raising_score_task",
     f"error in step 0 > rollout: TaskError: task '{BAD}.make_raising_score_task' score(row, completion), row 0 "),
])
def test_stage_and_task_errors_are_one_line_too(tmp_path, capsys, override, start) -> None:
    code, err, run_dir = _train(tmp_path, capsys, override)
    assert code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(start), err
    assert "Traceback (most recent call last)" in (run_dir / "error.log").read_text()


def test_an_error_of_ours_keeps_its_traceback_on_the_terminal(tmp_path, capsys, monkeypatch) -> None:
    from areal.trainer.run.loop import Trainer

    def broken(self, batch):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(Trainer, "prepare", broken)
    code, err, run_dir = _train(tmp_path, capsys)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert err.strip().splitlines()[-1] == (f"error in step 0: RuntimeError: an internal bug (traceback in "
                                            f"{run_dir / 'error.log'})")


def _function(fn) -> RewardFunction:
    return RewardFunction("fn", "reward[0] (fn) 'pkg.fn'", fn, 1.0, None)


def _score(fn, completions: list[str]) -> None:
    prompts = [f"p{i}" for i in range(len(completions))]
    call_reward_function(_function(fn), prompts, completions, {"answer": ["1"] * len(completions)},
                         [[i] for i in range(len(completions))])


def test_the_first_failing_row_is_found_one_row_at_a_time() -> None:
    calls = []

    def fails_on_b(prompts, completions, **columns):
        calls.append(list(completions))
        assert all(len(v) == len(prompts) for v in columns.values())  # the columns are cut to the row too
        return [{"a": 1.0}[c] for c in completions]

    with pytest.raises(RewardFunctionError) as info:
        _score(fails_on_b, ["a", "a", "b", "a", "b"])
    assert str(info.value) == ("reward[0] (fn) 'pkg.fn': raised KeyError: 'b' (on 5 completions; columns passed: "
                               "['answer', 'completion_ids']); first failing row: 2 (prompt 'p2', completion 'b')")
    assert calls == [["a", "a", "b", "a", "b"], ["a"], ["a"], ["b"]]  # the batch, then rows until one fails
    assert isinstance(info.value.__cause__, KeyError)  # error.log shows the row's own traceback


def test_a_row_failing_differently_alone_and_a_batch_only_failure_say_so() -> None:
    def batch_only(prompts, completions, **columns):
        if len(prompts) > 1:
            raise ValueError("needs one row")
        return [0.0]

    with pytest.raises(RewardFunctionError, match=r"raised ValueError: needs one row \(on 3 completions; .*\); "
                                                  r"called again one row at a time, no row raised alone$"):
        _score(batch_only, ["a", "b", "c"])

    def differs(prompts, completions, **columns):
        if len(prompts) > 1:
            raise ValueError("batch")
        raise TypeError(f"row {completions[0]}")

    with pytest.raises(RewardFunctionError, match=r"first failing row: 0 \(prompt 'p0', completion 'a'\): "
                                                  r"TypeError: row a$"):
        _score(differs, ["a", "b"])


def test_a_raising_task_sample_is_a_task_error_naming_it() -> None:
    import random

    from plugins.bad_plugins import make_raising_sample_task

    from areal.trainer.rollout.prompt_data import TaskPromptSource
    from areal.trainer.rollout.tasks.runtime import TaskError

    with pytest.raises(TaskError, match=r"^task RaisingSampleTask\.sample\(rng, 'train'\): ValueError: sample boom$"):
        TaskPromptSource(make_raising_sample_task(), random.Random(0)).sample(2)
