"""`AReaLGRPOTrainer(model=...)` given as a string: a local folder, or else a Hugging Face hub id, checked first.

TRL accepts a loaded model, a hub id (`org/name`, downloaded) or a local folder. A string that is
neither reaches `transformers` as a hub id, and a mistyped or not yet created folder ends in a
multi-screen traceback about repository ids or the network, after TRL has built its config.
`check_model_argument` answers in one line before that: the folder that does not exist (with the
folder a relative path was resolved in), a file given where a folder is expected, or a folder
without `config.json`. A string that is a valid hub id and no local path is left to TRL.
"""

from __future__ import annotations

import os
from typing import Any

from areal_adv.api.cli_args import ConfigError
from areal_adv.api.config_checks import shown_path

__all__ = ["check_model_argument"]

_WHERE = "AReaLGRPOTrainer(model=...)"
_EXPECTED = "expected a folder written by save_pretrained (with config.json), a hub id such as 'org/name' or a model"


def _is_hub_id(text: str) -> bool:
    """Whether `text` has the form of a hub repository id (`name` or `org/name`), as huggingface_hub checks it."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def check_model_argument(model: Any) -> None:
    """Raise one `ConfigError` for a string `model` that can be neither a checkpoint folder nor a hub id."""
    if not isinstance(model, (str, os.PathLike)):
        return  # a loaded model: TRL's business
    path = os.fspath(model)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise ConfigError(f"{_WHERE}: the folder {shown_path(path)} has no config.json; {_EXPECTED}")
        return
    if os.path.exists(path):
        gguf = " (a GGUF file: convert it to a folder once, as examples/real_model/convert.py does)"
        gguf = gguf if path.endswith(".gguf") else ""
        raise ConfigError(f"{_WHERE}: {shown_path(path)} is a file, not a folder{gguf}; {_EXPECTED}")
    if not _is_hub_id(path):
        raise ConfigError(f"{_WHERE}: {shown_path(path)} is not a folder (nothing is there); {_EXPECTED}")
