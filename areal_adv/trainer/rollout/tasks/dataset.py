"""The `dataset` task: single-turn prompts from `data.train`, scored by `reward:` only."""

from __future__ import annotations

from typing import Any

from areal_adv.api.task_specs import DatasetTaskSpec
from areal_adv.trainer.lm.codec import Text, check_text
from areal_adv.trainer.rollout.tasks.base import Task


class DatasetTask(Task):
    """The prompt is the row's `prompt_key` column; `chat` wraps plain text as a user message."""

    name = "dataset"

    def __init__(self, spec: DatasetTaskSpec, prompt_key: str = "prompt") -> None:
        self.spec = spec
        self.prompt_key = prompt_key

    def prompt(self, row: dict[str, Any]) -> Text:
        if self.prompt_key not in row:
            raise KeyError(f"data.prompt_key: the row has no column {self.prompt_key!r} (columns: {sorted(row)})")
        prompt = check_text(row[self.prompt_key], f"data.prompt_key column {self.prompt_key!r}")
        if isinstance(prompt, str) and self.spec.chat:
            system = [{"role": "system", "content": self.spec.system_prompt}] if self.spec.system_prompt else []
            return [*system, {"role": "user", "content": prompt}]
        return prompt
