"""A failed run ends with one line at the bottom; the traceback is in <run dir>/error.log (issue 20, item 5).

Errors from the user's code (reward function, task, advantage stage) print no traceback unless
`--debug` or `AREAL_TRACEBACK=1` asks for it; anything else keeps its traceback on the terminal,
still followed by the one line. A raising reward function is re-scored one row at a time so that
the line names the first failing row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tiny_run  # noqa: E402

from areal_adv.trainer.main import main
from areal_adv.trainer.rollout.reward_functions import RewardFunction, RewardFunctionError, call_reward_function

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = ROOT / "examples" / "grpo_arith.yaml"
TINY = [
    *tiny_run.TINY,
    "train.steps=2",
]
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
    assert last.startswith(
        f"error in step 0 > rollout: RewardFunctionError: reward[0] (reward_raises) "
        f"'{BAD}.reward_raises': raised ZeroDivisionError: boom (on 8 completions; columns "
        "passed: ['a', 'answer', 'b', 'completion_ids']); the error is not tied to one row: every row "
        "fails on its own, e.g. row 0 (prompt '"
    ), last
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


@pytest.mark.parametrize(
    "override, start",
    [
        (
            f"actor.advantage.outcome_reward_shaping.implementation={BAD}.outcome_raises",
            "error in step 0 > advantages: StageContractError: advantage stage 'outcome_reward_shaping' "
            f"({BAD}.outcome_raises): raised RuntimeError: stage boom",
        ),
        (
            f"task.name={BAD}.make_raising_score_task",
            f"error in step 0 > rollout: TaskError: task '{BAD}.make_raising_score_task' score(row, completion), row 0 ",
        ),
    ],
)
def test_stage_and_task_errors_are_one_line_too(tmp_path, capsys, override, start) -> None:
    code, err, run_dir = _train(tmp_path, capsys, override)
    assert code == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(start), err
    assert "Traceback (most recent call last)" in (run_dir / "error.log").read_text()
    if "TaskError" in start:  # the task's own score names the completion it scored, as reward functions do
        assert re.search(r"score\(row, completion\), row 0 .*, completion '[^']*': ", err), err


def test_an_error_of_ours_keeps_its_traceback_on_the_terminal(tmp_path, capsys, monkeypatch) -> None:
    from areal_adv.trainer.run.loop import Trainer

    def broken(self, batch):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(Trainer, "_prepare", broken)
    code, err, run_dir = _train(tmp_path, capsys)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert err.strip().splitlines()[-1] == (
        f"error in step 0: RuntimeError: an internal bug (traceback in {run_dir / 'error.log'})"
    )


def _function(fn) -> RewardFunction:
    return RewardFunction("fn", "reward[0] (fn) 'pkg.fn'", fn, 1.0, None)


def _score(fn, completions: list[str]) -> None:
    prompts = [f"p{i}" for i in range(len(completions))]
    call_reward_function(
        _function(fn),
        prompts,
        completions,
        {"answer": ["1"] * len(completions)},
        [[i] for i in range(len(completions))],
    )


def test_the_failing_rows_are_found_one_row_at_a_time() -> None:
    calls = []

    def fails_on_b(prompts, completions, **columns):
        calls.append(list(completions))
        assert all(len(v) == len(prompts) for v in columns.values())  # the columns are cut to the row too
        return [{"a": 1.0}[c] for c in completions]

    with pytest.raises(RewardFunctionError) as info:
        _score(fails_on_b, ["a", "a", "b", "a", "b"])
    assert str(info.value) == (
        "reward[0] (fn) 'pkg.fn': raised KeyError: 'b' (on 5 completions; columns passed: "
        "['answer', 'completion_ids']); first failing row: 2 (prompt 'p2', completion 'b') "
        "(2 rows fail alone: [2, 4])"
    )
    # the batch, each row alone, then the batch without the rows that failed alone (it scores: they are the cause)
    assert calls == [["a", "a", "b", "a", "b"], ["a"], ["a"], ["b"], ["a"], ["b"], ["a", "a", "a"]]
    assert isinstance(info.value.__cause__, KeyError)  # error.log shows the row's own traceback


def test_a_row_failing_differently_alone_and_a_batch_only_failure_say_so() -> None:
    def batch_only(prompts, completions, **columns):
        if len(prompts) > 1:
            raise ValueError("needs one row")
        return [0.0]

    with pytest.raises(
        RewardFunctionError,
        match=r"raised ValueError: needs one row \(on 3 completions; .*\); "
        r"the error is not tied to one row: called again one row at a time, "
        r"every row scored$",
    ):
        _score(batch_only, ["a", "b", "c"])

    def differs(prompts, completions, **columns):
        if len(prompts) > 1 and "a" in completions:
            raise ValueError("batch")
        if completions == ["a"]:
            raise TypeError("row a")
        return [0.0] * len(prompts)

    with pytest.raises(
        RewardFunctionError,
        match=r"first failing row: 0 \(prompt 'p0', completion 'a'\): "
        r"TypeError: row a$",
    ):
        _score(differs, ["a", "b"])


def test_a_failure_of_the_whole_batch_is_not_blamed_on_a_row() -> None:
    """A function reading the next row's answer fails on any batch, and on each row alone: no row is the cause."""

    def next_answer(prompts, completions, answer, **columns):
        return [float(c == answer[i + 1]) for i, c in enumerate(completions)]

    with pytest.raises(RewardFunctionError) as info:
        _score(next_answer, ["0", "1", "2"])
    message = str(info.value)
    assert "first failing row" not in message
    assert message.endswith(
        "the error is not tied to one row: every row fails on its own, e.g. row 0 (prompt 'p0', "
        "completion '0'): IndexError: list index out of range"
    ), message

    def every_other_row(prompts, completions, answer, **columns):  # fails when rows 0 and 1 meet, not alone
        if len(completions) > 1 and completions[0] == "0" and completions[1] == "1":
            raise RuntimeError("rows 0 and 1 together")
        if completions == ["2"]:
            raise RuntimeError("row 2 alone")
        return [0.0] * len(completions)

    with pytest.raises(
        RewardFunctionError,
        match=r"the error is not tied to one row: rows \[2\] fail on their own, and the "
        r"batch without them fails too, e.g. row 2 \(prompt 'p2', "
        r"completion '2'\): RuntimeError: row 2 alone$",
    ):
        _score(every_other_row, ["0", "1", "2"])


@pytest.mark.parametrize(
    "fn, needle",
    [
        (lambda prompts, completions, **kw: [float("nan")] * len(completions), "got nan, expected a finite number"),
        (lambda prompts, completions, **kw: ["1"] * len(completions), "got '1', expected a finite number"),
    ],
    ids=["nan", "wrong-type"],
)
def test_every_per_row_reward_error_shows_the_completion(fn, needle) -> None:
    with pytest.raises(RewardFunctionError, match=rf"row 0 \(prompt 'p0', completion 'x'\): {needle}"):
        _score(fn, ["x", "y"])


def test_a_raising_task_sample_is_a_task_error_naming_it() -> None:
    import random

    from plugins.bad_plugins import make_raising_sample_task

    from areal_adv.trainer.rollout.prompt_data import TaskPromptSource
    from areal_adv.trainer.rollout.tasks.runtime import TaskError

    with pytest.raises(TaskError, match=r"^task RaisingSampleTask\.sample\(rng, 'train'\): ValueError: sample boom$"):
        TaskPromptSource(make_raising_sample_task(), random.Random(0)).sample(2)
