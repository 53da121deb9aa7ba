"""A BPE checkpoint that saved `clean_up_tokenization_spaces: true` (as SmolLM2 does) decodes without a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_factory import build_checkpoint

from areal_adv.api.train_args import ModelConfig
from areal_adv.trainer.lm.tokenizer import load_checkpoint_tokenizer


def test_a_bpe_checkpoint_decodes_without_the_cleanup_warning(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    build_checkpoint(tmp_path)
    config = tmp_path / "tokenizer_config.json"
    saved = json.loads(config.read_text())
    config.write_text(json.dumps({**saved, "clean_up_tokenization_spaces": True}))  # what SmolLM2 ships
    tok = load_checkpoint_tokenizer(ModelConfig(path=str(tmp_path)))
    assert tok.clean_up_tokenization_spaces is False
    text = "a , b . c"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text  # no space was dropped
    captured = capfd.readouterr()
    assert "clean_up_tokenization_spaces" not in captured.out + captured.err
