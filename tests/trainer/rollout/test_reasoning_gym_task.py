"""reasoning-gym as a task source: its prompts, its own scorer, a 3-step run."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import reasoning_gym  # the `reasoning` extra; scripts/test.sh installs it

from areal_adv.api.cli_args import load_config
from areal_adv.api.train_args import TaskConfig
from areal_adv.trainer.rollout.tasks import make_task
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics

RG = {"dataset": "basic_arithmetic", "size": 50, "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def test_prompt_and_scoring_follow_reasoning_gym() -> None:
    task = make_task(TaskConfig(implementation="reasoning_gym", kwargs=RG), seed=3)
    ref = reasoning_gym.create_dataset(
        "basic_arithmetic", seed=3, size=50, min_terms=2, max_terms=2, min_digits=1, max_digits=1
    )

    row = task.sample(random.Random(0), "train")
    entry = ref[row["index"]]
    assert row["question"] == entry["question"] and row["answer"] == entry["answer"]
    prompt = task.prompt(row)
    assert prompt[0]["role"] == "system" and "<answer>" in prompt[0]["content"]
    assert prompt[-1] == {"role": "user", "content": entry["question"]}
    assert task.score(row, f"thinking... <answer>{entry['answer']}</answer>") == 1.0
    assert task.score(row, entry["answer"]) == 0.0  # no answer tags: nothing extracted
    wrong = str(int(entry["answer"]) + 1)
    assert task.score(row, f"<answer>{wrong}</answer>") == ref.score_answer(wrong, entry)
    held_out = task.sample(random.Random(0), "eval")
    assert held_out["split"] == "eval" and task.datasets["eval"].seed == 3 + 50


def test_unknown_dataset_and_bad_options_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"task\.kwargs\.dataset: reasoning-gym has no dataset 'no_such'"):
        make_task(TaskConfig(implementation="reasoning_gym", kwargs={"dataset": "no_such"}))
    with pytest.raises(ValueError, match=r"task\.kwargs: reasoning-gym rejected the config of 'basic_arithmetic'"):
        make_task(TaskConfig(implementation="reasoning_gym", kwargs={"dataset": "basic_arithmetic", "colour": 1}))


def test_reasoning_gym_task_trains_three_steps_with_eval(tmp_path: Path) -> None:
    kwargs = ", ".join(f"{k}: {v}" for k, v in RG.items())
    cfg = load_config(
        None,
        [
            "task.implementation=reasoning_gym",
            f"task.kwargs={{{kwargs}}}",
            "task.kwargs.chat=false",
            "task.kwargs.system_prompt=null",
            "task.kwargs.answer_tag=null",
            "actor.max_new_tokens=4",
            "rollout.batch_size=2",
            "rollout.n_samples=4",
            "model.hidden_size=32",
            "model.num_heads=2",
            "model.max_position_embeddings=256",
            "train.steps=3",
            "eval.every=2",
            "eval.n_prompts=4",
            "output.progress_bar=false",
            "output.plot=false",
            f"output.dir={tmp_path}",
        ],
    )
    trainer = Trainer(cfg)
    result = trainer.run()
    assert result.steps_done == 3
    rows = read_metrics(result.metrics_path)
    assert [r.get("eval/updates") for r in rows] == [0.0, None, 3.0]
    assert all(0.0 <= r["reward/reasoning_gym"] <= 1.0 for r in rows)
    out = trainer.step(3)
    for rec in out.records:
        entry = {"question": rec.row["question"], "answer": rec.row["answer"], "metadata": rec.row["metadata"]}
        assert rec.rewards["reasoning_gym"] == trainer.task.task.datasets["train"].score_answer(rec.completion, entry)
