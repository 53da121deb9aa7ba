"""The real-model skill task without its checkpoint: data, rewards (strict and format-fixed), its compare run.

The skill run's rewards are reasoning-gym's own `score_answer`; here they are
checked against reasoning-gym called directly, the held-out file against the
training file, and `bench/real_model/compare_estimators.py --task spell_backward` end to
end on the tiny random-init model (the 135 M model is a documented benchmark,
not a CI test).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import warm_python

pytest.importorskip("reasoning_gym")

from examples.real_model import skill_rewards, skill_tasks
from examples.real_model.make_skill_data import main as make_data

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "real_model" / "data"
TASK = "spell_backward_3_6"


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", [TASK, "char_count_3_6", "basic_arithmetic_1_2digit_add"])
def test_committed_data_is_what_the_script_writes_and_held_out_shares_no_question(tmp_path: Path, name: str):
    make_data([name, "--out", str(tmp_path)])
    for split in ("train", "eval"):
        assert (tmp_path / name / f"{split}.jsonl").read_text() == (DATA / name / f"{split}.jsonl").read_text()
    train, held_out = _read(DATA / name / "train.jsonl"), _read(DATA / name / "eval.jsonl")
    assert (len(train), len(held_out)) == (2000, 100)
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held_out}
    assert len({r["prompt"] for r in held_out}) == 100
    for r in held_out:
        meta = json.loads(r["metadata"])
        if name == TASK:
            expected = meta["word"][::-1]
        elif name == "char_count_3_6":
            expected = str(meta["word"].split("-").count(meta["char"]))
        else:  # "Calculate 48 + 16."
            expected = str(sum(int(t) for t in r["prompt"].removeprefix("Calculate ").rstrip(".").split(" + ")))
        assert r["answer"] == expected and r["task"] == name


@pytest.mark.parametrize("name", sorted(skill_tasks.TASKS))
def test_every_candidate_generates_the_same_rows_from_a_seed(name: str):
    task = skill_tasks.TASKS[name]
    first, again = skill_tasks.rows(task, 3, 20), skill_tasks.rows(task, 3, 20)
    assert first == again and first != skill_tasks.rows(task, 4, 20)
    assert all(r["task"] == name and r["answer"] for r in first)
    if task.dataset == "char_count":  # verl's recipe: the answer is the letter's count in the dashed word
        for r in first:
            meta = json.loads(r["metadata"])
            assert r["answer"] == str(meta["word"].split("-").count(meta["char"]))


def _score_directly(dataset: str, answer: str | None, row: dict) -> float:
    import reasoning_gym as rg

    entry = {"answer": row["answer"], "metadata": json.loads(row["metadata"])}
    return rg.create_dataset(dataset, seed=0, size=1).score_answer(answer=answer, entry=entry)


ENDED, CUT = [5, 2], [5, 7]  # completion ids ending with a stop token (2) or cut by the budget


@pytest.mark.parametrize(
    ("completion", "ids", "score", "strict", "lenient"),
    [
        ("noea", ENDED, 1.0, 1.0, 1.0),
        (" Noea \n", ENDED, 1.0, 1.0, 1.0),  # reasoning-gym's spell_backward ignores case
        ("noea", CUT, 0.0, 0.0, 1.0),  # cut by the budget: no strict credit
        ("The word backward is noea.", ENDED, None, 0.0, 1.0),  # right skill, wrong format
        ("noe", ENDED, None, 0.0, 0.0),  # partial credit for the right prefix, not solved
        ("aeon", ENDED, None, 0.0, 0.0),  # the word itself
        ("", ENDED, 0.0, 0.0, 0.0),
    ],
)
def test_spell_backward_rewards_are_reasoning_gyms_score(completion, ids, score, strict, lenient):
    row = _read(DATA / TASK / "eval.jsonl")[0]
    assert row["answer"] == "noea"
    args = dict(
        prompts=[row["prompt"]],
        completions=[completion],
        answer=[row["answer"]],
        task=[row["task"]],
        metadata=[row["metadata"]],
    )
    got = skill_rewards.score(**args, completion_ids=[ids], end_ids=[1, 2])
    expected = score if score is not None else _score_directly("spell_backward", completion.strip(), row)
    assert got == [expected]
    assert skill_rewards.solved(**args, completion_ids=[ids], end_ids=[1, 2]) == [strict]
    assert skill_rewards.solved_lenient(**args) == [lenient]
    # TRL's chat completions score the same as text
    chat = dict(args, completions=[[{"role": "assistant", "content": completion}]])
    assert skill_rewards.solved_lenient(**chat) == [lenient]


@pytest.mark.parametrize(
    ("completion", "strict", "lenient"),
    [("2", 1.0, 1.0), ("There are 2 i's.", 0.0, 1.0), ("2 or 3", 0.0, 0.0), ("two", 0.0, 0.0)],
)
def test_counting_answers_strict_and_lenient(completion: str, strict: float, lenient: float):
    (row,) = [r for r in skill_tasks.rows(skill_tasks.TASKS["char_count_verl"], 5, 5) if r["answer"] == "2"][:1]
    args = dict(
        prompts=[row["prompt"]],
        completions=[completion],
        answer=[row["answer"]],
        task=[row["task"]],
        metadata=[row["metadata"]],
    )
    assert skill_rewards.solved(**args, completion_ids=[ENDED]) == [strict]
    assert skill_rewards.solved_lenient(**args) == [lenient]
    assert skill_rewards.score(**args, completion_ids=[ENDED]) == [
        _score_directly("letter_counting", completion.strip(), row)
    ]


def test_compare_estimators_runs_the_skill_task_and_reports_the_format_fixed_accuracy(tmp_path: Path):
    cmd = [
        sys.executable,
        "-m",
        "bench.real_model.compare_estimators",
        "--task",
        "spell_backward",
        "--tiny",
        "--estimators",
        "grpo",
        "rloo",
        "--seeds",
        "1",
        "--steps",
        "2",
        "--chunk-steps",
        "0",
        "--runs-dir",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path / "results.jsonl"),
        "--plot",
        str(tmp_path / "plot.png"),
    ]
    proc = warm_python.run(cmd, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = _read(tmp_path / "results.jsonl")
    assert [(r["tag"], r["estimator"], r["metric"]) for r in rows] == [
        ("spell_backward", "grpo", "eval/reward/solved"),
        ("spell_backward", "rloo", "eval/reward/solved"),
    ]
    metrics = _read(tmp_path / "runs" / "spell_backward" / "grpo" / "seed1" / "metrics.jsonl")
    last = [m for m in metrics if "eval/updates" in m][-1]
    assert rows[0]["curve"][-1] == {
        "updates": 2,
        "train_seconds": pytest.approx(rows[0]["train_seconds"]),
        "accuracy": last["eval/reward/solved"],
        "format": last["eval/reward/solved_lenient"],
    }
    assert "format-fixed accuracy (solved_lenient) after" in proc.stdout
    doc = tmp_path / "page.md"
    doc.write_text(
        "<!-- compare_estimators:begin -->\nsums\n<!-- compare_estimators:end -->\n"
        "<!-- compare_estimators:spell_backward:begin -->\nold\n"
        "<!-- compare_estimators:spell_backward:end -->\n"
    )
    proc = warm_python.run([*cmd, "--report-only", "--doc", str(doc)], cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = doc.read_text()
    assert "\nsums\n" in page and "old" not in page and "| grpo | 1 |" in page  # only the task's block changed
    probes = _probe_a_tiny_checkpoint(tmp_path)
    proc = warm_python.run([*cmd, "--report-only", "--probe-results", str(probes)], cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Skill test: greedy accuracy on the same held-out rows with the answer's start forced" in proc.stdout
    (untrained,) = _read(probes)[:1]
    assert f"| untrained | - | {untrained['prefix']:.3f} | - | - |" in proc.stdout
    # the same checkpoint under the runs' labels: no change from the untrained model or from grpo
    assert "| grpo | 1 | " in proc.stdout and "| +0.000 [+0.000, +0.000] | - |" in proc.stdout
    assert "| rloo | 1 | " in proc.stdout and "| +0.000 [+0.000, +0.000] | +0.000 [+0.000, +0.000] |" in proc.stdout


def _probe_a_tiny_checkpoint(tmp_path: Path) -> Path:
    """probe.py --results on a tiny checkpoint (3 held-out rows), its row copied under two runs' labels."""
    sys.path.insert(0, str(ROOT / "tests" / "trainer"))
    from checkpoint_factory import build_checkpoint

    build_checkpoint(tmp_path / "tiny")
    probes, held_out = tmp_path / "probes.jsonl", DATA / TASK / "eval.jsonl"
    proc = warm_python.run(
        [
            sys.executable,
            str(ROOT / "examples" / "real_model" / "probe.py"),
            *("--skills", "--rows", str(held_out), "--n", "3", "--k", "2", "--sampled-prompts", "1"),
            *("--model", str(tmp_path / "tiny"), "--threads", "1", "--results", str(probes), "--label", "untrained"),
        ],
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = _read(probes)
    assert row["label"] == "untrained" and row["task"] == TASK and row["rows"] == str(held_out)
    assert row["n"] == 3 and len(row["prefix_hits"]) == 3 and row["prefix"] == sum(row["prefix_hits"]) / 3
    assert row["command"].startswith("examples/real_model/probe.py --skills") and "examples" not in row
    with probes.open("a") as f:
        for estimator in ("grpo", "rloo"):
            f.write(json.dumps({**row, "label": f"spell_backward/{estimator}/seed1"}) + "\n")
    return probes


def test_probe_table_pairs_each_run_with_the_untrained_model_and_grpo_over_the_same_prompts() -> None:
    from bench.real_model.probe_table import probe_table

    def row(label: str, hits: list[int]) -> dict:
        return {"label": label, "prefix": sum(hits) / len(hits), "prefix_hits": hits}

    probes = [
        row("untrained", [0, 0, 1, 0]),
        row("t/grpo/seed1", [1, 0, 1, 0]),
        row("t/grpo/seed2", [1, 1, 1, 0]),
        row("t/maxrl/seed1", [1, 1, 1, 1]),
        row("t/maxrl/seed1", [1, 1, 1, 0]),  # a re-probe replaces the earlier row
        row("other/maxrl/seed2", [0, 0, 0, 0]),  # another campaign's run: not this table's
    ]
    text = probe_table(probes, "t", [("grpo", 1), ("grpo", 2), ("maxrl", 1), ("maxrl", 2)])
    lines = text.splitlines()
    assert lines[2] == "| untrained | - | 0.250 | - | - |"
    assert lines[3].startswith("| grpo | 1 2 | 0.625 (0.500, 0.750) | +0.375 [")  # per prompt: (1+1)/2 - 0, ...
    assert lines[4].startswith("| maxrl | 1 | 0.750 (0.750) | +0.500 [") and "| +0.125 [" in lines[4]
    assert len(lines) == 5
    assert "no `untrained` probe row" in probe_table(probes[1:], "t", [("grpo", 1)])
    elsewhere = [*probes[:1], {**probes[1], "rows": "other/eval.jsonl"}]
    with pytest.raises(ValueError, match="t/grpo/seed1 was probed on the rows of other/eval.jsonl"):
        probe_table(elsewhere, "t", [("grpo", 1)])


def test_answers_separates_the_skill_from_a_learned_prior(tmp_path: Path):
    from examples.real_model.answers import evaluations, summary

    def row(step: int, completion: str, answer: str) -> dict:
        solved = float(completion == answer)
        return {
            "step": step,
            "split": "eval",
            "completion": completion,
            "rewards": {"solved": solved, "solved_lenient": solved},
            "row": {"answer": answer},
        }

    right = ["0", "1", "1", "2"]
    prior = [row(10, "1", a) for a in right]  # always "1": right on the two "1" rows, by the prior alone
    skill = [row(20, a, a) for a in right]
    train = {"step": 10, "split": "train", "completion": "x", "rewards": {}, "row": {"answer": "0"}}
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*prior, train, *skill]))
    by_step = evaluations(tmp_path / "samples.jsonl")
    assert sorted(by_step) == [10, 20] and len(by_step[10]) == 4
    before, after = summary(by_step[10]), summary(by_step[20])
    assert before["strict"]["accuracy"] == before["strict"]["chance"] == before["best_constant"] == 0.5
    assert before["strict"]["per_answer"] == {"0": 0.0, "1": 1.0, "2": 0.0}
    assert after["strict"]["accuracy"] == 1.0 and after["strict"]["chance"] == pytest.approx(6 / 16)
    assert after["strict"]["given"] == {"1": 2, "0": 1, "2": 1}
    # the lenient reading takes the last integer of any wording
    worded = summary(
        [row(30, f"There are {a} of them.", a) | {"rewards": {"solved": 0.0, "solved_lenient": 1.0}} for a in right]
    )
    assert worded["strict"]["accuracy"] == 0.0 and worded["lenient"]["accuracy"] == 1.0
    assert worded["lenient"]["given"] == {"1": 2, "0": 1, "2": 1} and worded["lenient"]["chance"] == pytest.approx(
        6 / 16
    )


def test_compare_estimators_task_char_count_puts_each_preset_on_the_counting_run(tmp_path: Path):
    from areal_adv.api.cli_args import load_config
    from bench.real_model import compare_estimators

    opts = compare_estimators.parse_args(["--task", "char_count", "--runs-dir", str(tmp_path)])
    assert opts.config == ROOT / "examples" / "real_model" / "char_count.yaml"
    assert (opts.metric, opts.format_metric) == ("eval/reward/solved", "eval/reward/solved_lenient")
    assert compare_estimators.TASKS["char_count"].doc_block == "compare_estimators:char_count"
    from omegaconf import OmegaConf

    def actor(path: Path) -> dict:
        return OmegaConf.to_container(OmegaConf.structured(load_config(path).actor), enum_to_str=True)

    grpo = compare_estimators.preset_actor("grpo")  # the run's own algorithm is GRPO's preset
    assert {k: actor(opts.config)[k] for k in grpo} == grpo
    run = compare_estimators.Run(opts.tag, "maxrl", 1, tmp_path)
    generated = compare_estimators.write_config(run, opts.config)
    assert load_config(generated).data.train.endswith("char_count_3_6/train.jsonl")
    maxrl = compare_estimators.preset_actor("maxrl")
    assert {k: actor(generated)[k] for k in maxrl} == maxrl and maxrl != {k: grpo.get(k) for k in maxrl}
