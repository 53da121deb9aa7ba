"""Checks before launch (areal_adv.trainer.run.preflight): what `areal-adv validate` and the trainer know before step 0."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.trainer.run.preflight import check_before_launch, model_facts, preflight_runtime
from areal_adv.trainer.run.task_setup import make_eval_rows, resolve_task_parts

ROOT = Path(__file__).resolve().parents[3]


def _user_run(
    tmp_path: Path,
    *overrides: str,
    chat: bool = True,
    extra_column: str | None = None,
    eval_rows: list[dict] | None = None,
):
    """A checkpoint (max_position_embeddings=256, a chat template), prompts in JSONL, the dataset task."""
    build_checkpoint(tmp_path / "ckpt")
    rows = [
        {"prompt": [{"role": "user", "content": f"{a} + 1 ="}] if chat else f"{a} + 1 =", "answer": str(a + 1)}
        for a in range(6)
    ]
    if extra_column:
        rows = [{**r, extra_column: "x"} for r in rows]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = {"train": str(tmp_path / "train.jsonl")}
    if eval_rows is not None:
        (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in eval_rows))
        data["eval"] = str(tmp_path / "eval.jsonl")
    source = {
        "model": {"path": str(tmp_path / "ckpt")},
        "task": {"implementation": "dataset", "kwargs": {"chat": chat}},
        "data": data,
        "reward": [{"implementation": "examples.custom_task.rewards.exact_answer"}],
    }
    cfg = load_config(source, list(overrides))
    parts = resolve_task_parts(cfg)
    return cfg, parts, preflight_runtime(cfg, parts)


def test_the_context_comes_from_the_checkpoint_and_the_prompts_from_its_chat_template(tmp_path):
    cfg, parts, runtime = _user_run(tmp_path)  # actor.max_new_tokens: AReaL's default 1024
    assert runtime.max_length == 256
    with pytest.raises(ConfigError) as err:
        check_before_launch(cfg, parts, runtime, make_eval_rows(cfg, parts))
    prompt_ids = runtime.codec.encode_prompt([{"role": "user", "content": "0 + 1 ="}])
    n = len(prompt_ids)
    assert str(err.value).startswith(
        f"actor.max_new_tokens: data.train row 0 (prompt \"[{{'role': 'user', 'content': "
        f"'0 + 1 ='}}]\"): a context of {n} tokens plus 1024 to generate exceeds the "
        f"model's max_position_embeddings=256; lower actor.max_new_tokens to at most "
        f"{256 - n} or shorten the prompts"
    )
    assert "model.max_position_embeddings" not in str(err.value)  # a checkpoint's architecture is its own
    report = check_before_launch(*_user_run(tmp_path / "b", f"actor.max_new_tokens={256 - n}"), [])
    assert report.fit.longest == n and report.fit.cap == 256 - n and report.fit.limit == 256


def test_a_tokenizer_larger_than_the_checkpoint_vocabulary_is_named(tmp_path):
    build_checkpoint(tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt/config.json").read_text())
    (tmp_path / "ckpt/config.json").write_text(json.dumps({**config, "vocab_size": 100}))
    cfg = load_config({"model": {"path": str(tmp_path / "ckpt")}})
    from areal_adv.trainer.lm.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(cfg.model, None)
    with pytest.raises(ConfigError, match=r"the tokenizer has \d+ tokens but the model's config has vocab_size=100"):
        model_facts(cfg.model, tokenizer)


def test_the_random_init_context_is_the_configured_architecture():
    cfg = load_config(ROOT / "examples/grpo_arith.yaml", ["model.max_position_embeddings=64"])
    parts = resolve_task_parts(cfg)
    runtime = preflight_runtime(cfg, parts)
    assert runtime.max_length == 64
    report = check_before_launch(cfg, parts, runtime, make_eval_rows(cfg, parts))
    assert [(r.field, len(r.rows)) for r in report.row_sets] == [("the task's generated problems", 64)]


def test_required_reward_columns_are_checked_against_train_and_eval_rows(tmp_path):
    """`solution` is a column of the training file only: the eval rows, scored when eval.every is set, lack it."""
    spec = "reward=[{implementation: dry_run_plugins.reward_needs_solution}]"
    cfg, parts, runtime = _user_run(tmp_path / "a", "actor.max_new_tokens=8", spec, chat=False, extra_column="solution")
    check_before_launch(cfg, parts, runtime, make_eval_rows(cfg, parts))
    eval_rows = [{"prompt": "1 + 1 =", "answer": "2"}]
    cfg, parts, runtime = _user_run(
        tmp_path / "b", "actor.max_new_tokens=8", spec, chat=False, extra_column="solution", eval_rows=eval_rows
    )
    check_before_launch(cfg, parts, runtime, make_eval_rows(cfg, parts))  # no evaluation: the eval rows are unused
    cfg, parts, runtime = _user_run(
        tmp_path / "c",
        "actor.max_new_tokens=8",
        "eval.every=10",
        spec,
        chat=False,
        extra_column="solution",
        eval_rows=eval_rows,
    )
    with pytest.raises(
        ConfigError,
        match=r"its parameter \['solution'\] is not a column of data.eval "
        r"\(columns: \['answer'\]",
    ):
        check_before_launch(cfg, parts, runtime, make_eval_rows(cfg, parts))


def test_the_check_draws_no_problem_from_the_trainers_generator(tmp_path):
    """Generated problems come from a fresh RNG: the run's own sequence is untouched (resume stays exact)."""
    from areal_adv.trainer.run.loop import Trainer

    cfg = load_config(
        ROOT / "examples/grpo_arith.yaml",
        [f"output.dir={tmp_path}", "train.steps=1", "model.hidden_size=32", "model.num_heads=2"],
    )
    trainer = Trainer(cfg)
    assert trainer.rng.getstate() == random.Random(cfg.seed).getstate()
