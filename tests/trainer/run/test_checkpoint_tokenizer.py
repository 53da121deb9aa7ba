"""`model.path`: the checkpoint's own tokenizer and chat template drive prompts and completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from areal_adv.api.cli_args import load_config
from areal_adv.api.config_checks import ConfigError
from areal_adv.trainer.lm.codec import ChatCodec
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "examples" / "custom_task" / "data"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    path = tmp_path_factory.mktemp("ckpt")
    return path, build_checkpoint(path)


def _overrides(tmp_path: Path, ckpt: Path, *extra: str) -> list[str]:
    return [
        "task.implementation=dataset",
        f"data.train={DATA / 'train.jsonl'}",
        f"model.path={ckpt}",
        "reward=[{implementation: examples.custom_task.rewards.exact_answer}]",
        "rollout.batch_size=2",
        "rollout.n_samples=4",
        "actor.max_new_tokens=6",
        "output.progress_bar=false",
        "output.plot=false",
        f"output.dir={tmp_path}",
        *extra,
    ]


def test_checkpoint_trains_three_steps_with_its_own_tokenizer_and_chat_template(tmp_path: Path, checkpoint) -> None:
    ckpt, tok = checkpoint
    trainer = Trainer(
        load_config(
            None,
            _overrides(
                tmp_path,
                ckpt,
                "task.kwargs.chat=true",
                "task.kwargs.system_prompt=answer with a number",
                "train.steps=3",
            ),
        )
    )
    assert len(trainer.tokenizer) == len(tok) and trainer.tokenizer.get_vocab() == tok.get_vocab()
    result = trainer.run()
    assert result.steps_done == 3
    out = trainer.step(3)
    for rec in out.records:
        expected_prompt = tok.apply_chat_template(rec.prompt, tokenize=False, add_generation_prompt=True)
        assert expected_prompt.startswith("<s>[system] answer with a number</s>\n[user] ")
        n_prompt = rec.turn_spans[0][0]
        assert rec.tokens[:n_prompt] == tok.encode(expected_prompt, add_special_tokens=False)
        assert rec.completion == tok.decode(rec.completion_ids, skip_special_tokens=True)
        assert rec.prompt[-1] == {"role": "user", "content": rec.row["prompt"]}
        assert all(t < len(tok) for t in rec.tokens)
    samples = [json.loads(line) for line in (trainer.run_dir / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {0, 1, 2, 3}
    assert all(isinstance(s["completion"], str) and s["prompt"][-1]["role"] == "user" for s in samples)


def test_plain_text_prompts_use_the_tokenizers_special_tokens(tmp_path: Path, checkpoint) -> None:
    ckpt, tok = checkpoint
    trainer = Trainer(load_config(None, _overrides(tmp_path, ckpt)))
    rec = trainer.step(0).records[0]
    assert isinstance(rec.prompt, str)
    assert rec.tokens[: rec.turn_spans[0][0]] == tok.encode(rec.prompt, add_special_tokens=True)
    assert tok.eos_token_id in trainer.task.stop_token_ids


def test_observation_messages_continue_the_chat_template(checkpoint) -> None:
    _, tok = checkpoint
    codec = ChatCodec(tok, frozenset({tok.eos_token_id}))
    history = [{"role": "user", "content": "2 + 2 ="}]
    prompt_ids = codec.encode_prompt(history)
    turn = tok.encode("4", add_special_tokens=False) + [tok.eos_token_id]  # the policy ended its turn
    feedback = [{"role": "user", "content": "and 3 + 3 ="}]
    obs = codec.encode_observation(feedback, turn)
    conversation = history + [{"role": "assistant", "content": "4"}] + feedback
    whole = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    assert tok.decode(prompt_ids + turn + obs) == whole
    cut = tok.encode("4", add_special_tokens=False)  # cut by the length limit: the template closes the turn
    assert tok.decode(prompt_ids + cut + codec.encode_observation(feedback, cut)) == whole
    assert codec.encode_observation(" plain text", turn) == tok.encode(" plain text", add_special_tokens=False)


def test_architecture_fields_next_to_a_checkpoint_are_errors(checkpoint) -> None:
    ckpt, _ = checkpoint
    with pytest.raises(ConfigError, match=r"model\.hidden_size, model\.num_layers: architecture fields .*remove"):
        load_config(None, [f"model.path={ckpt}", "model.hidden_size=128", "model.num_layers=4"])


def test_checkpoint_without_tokenizer_is_an_error(tmp_path: Path) -> None:
    build_checkpoint(tmp_path, with_tokenizer=False)
    with pytest.raises(ConfigError, match=r"model\.path: the checkpoint .* has no tokenizer"):
        load_config(None, [f"model.path={tmp_path}"])


def test_chat_prompts_on_the_random_init_model_use_the_byte_tokenizers_chatml(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        [
            "task.implementation=dataset",
            f"data.train={DATA / 'train.jsonl'}",
            "task.kwargs.chat=true",
            "reward=[{implementation: examples.custom_task.rewards.exact_answer}]",
            "model.hidden_size=32",
            "model.num_heads=2",
            "rollout.batch_size=2",
            "rollout.n_samples=2",
            "actor.max_new_tokens=4",
            f"output.dir={tmp_path}",
            "output.progress_bar=false",
        ],
    )
    trainer = Trainer(cfg)  # random init, no vocabulary: the byte-level tokenizer with its ChatML template
    rec = trainer.step(0).records[0]
    assert trainer.tokenizer.decode(rec.tokens[: rec.turn_spans[0][0]]).startswith("<|im_start|>user\n")
    assert trainer.tokenizer.convert_tokens_to_ids("<|im_end|>") in trainer.task.stop_token_ids  # ends a turn


def test_chat_prompts_without_a_chat_template_are_an_error(tmp_path: Path, checkpoint) -> None:
    ckpt, tok = checkpoint
    bare = tmp_path / "bare"
    build_checkpoint(bare)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in bare.glob("chat_template.*"):
        extra.unlink()
    with pytest.raises(Exception, match=r"task 'dataset' prompt\(row\), row 0 .*has no chat template"):
        Trainer(load_config(None, _overrides(tmp_path, bare, "task.kwargs.chat=true")))  # the prompts, before launch
