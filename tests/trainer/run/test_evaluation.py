"""Held-out greedy evaluation (`eval/*` metrics) and `samples.jsonl`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import tiny_run  # noqa: E402
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.api.train_args import EvalConfig
from areal_adv.trainer.run.evaluation import Evaluator, eval_rows_from_task
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[3]
TINY = [
    *tiny_run.TINY,
]


def test_schedule_before_every_nth_update_and_after_the_last() -> None:
    ev = Evaluator(EvalConfig(every=3), [{"x": 1}], total_steps=8)
    before = [s for s in range(8) if ev.due(s, after_update=False)]
    after = [s for s in range(8) if ev.due(s, after_update=True)]
    assert before == [0, 3, 6] and after == [7]
    assert not any(Evaluator(EvalConfig(), [{"x": 1}], 8).due(s, after_update=a) for s in range(8) for a in (0, 1))


def test_eval_metrics_are_greedy_accuracy_on_fixed_held_out_rows(tmp_path: Path) -> None:
    cfg = load_config(
        ROOT / "examples" / "grpo_arith.yaml",
        [*TINY, "train.steps=3", "eval.every=2", "eval.n_prompts=12", f"output.dir={tmp_path}"],
    )
    trainer = Trainer(cfg)
    rows = trainer.evaluator.rows
    assert rows == eval_rows_from_task(trainer.task.task, cfg.seed, 12)
    train_rng = random.Random(cfg.seed)
    assert rows != [trainer.task.task.sample(train_rng, "train") for _ in range(12)]  # a separate stream
    result = trainer.run()
    metrics = read_metrics(result.metrics_path)
    assert [m.get("eval/updates") for m in metrics] == [0.0, None, 3.0]
    last = metrics[-1]
    # independent check: the answer is one token, so greedy decoding is the arg-max after the prompt
    tok = trainer.tokenizer
    correct = 0
    with torch.no_grad():
        for row in rows:
            ids = torch.tensor([tok.encode(trainer.task.task.prompt(row), add_special_tokens=True)])
            best = trainer.policy(input_ids=ids).logits[0, -1].argmax().item()
            correct += tok.decode([best], skip_special_tokens=True) == row["answer"]
    assert last["eval/accuracy"] == correct / len(rows)
    assert last["eval/reward/arith"] == last["eval/accuracy"] == last["eval/reward_mean"]
    assert last["eval/seconds"] > 0
    again = trainer.evaluate(3)
    assert again["eval/accuracy"] == last["eval/accuracy"]  # greedy: deterministic
    samples = [json.loads(line) for line in (result.run_dir / "samples.jsonl").read_text().splitlines()]
    evals = [s for s in samples if s["split"] == "eval"]
    trains = [s for s in samples if s["split"] == "train"]
    assert [s["step"] for s in trains] == [0] * 4 + [1] * 4 + [2] * 4
    assert len(evals) == 4 * 3 and {s["step"] for s in evals} == {0, 3}
    for s in samples:
        assert set(s) >= {"prompt", "completion", "reward", "rewards", "row"}
        assert s["reward"] == (1.0 if s["completion"].strip() == s["row"]["answer"] else 0.0)


def test_eval_on_a_held_out_file_takes_its_first_rows(tmp_path: Path) -> None:
    cfg = load_config(
        ROOT / "examples" / "custom_task" / "dataset.yaml",
        [*TINY, "train.steps=1", "eval.every=1", "eval.n_prompts=5", f"output.dir={tmp_path}"],
    )
    trainer = Trainer(cfg)
    lines = (ROOT / "examples" / "custom_task" / "data" / "eval.jsonl").read_text().splitlines()[:5]
    assert trainer.evaluator.rows == [json.loads(line) for line in lines]
    row = trainer.step(0).metrics
    assert row["eval/updates"] == 1.0 and 0.0 <= row["eval/accuracy"] <= 1.0
    assert row["eval/reward/exact_answer"] == row["eval/accuracy"]
