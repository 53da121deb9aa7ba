"""reasoning-gym procedural datasets as a task, scored by their own `score_answer`.

reasoning-gym (the `reasoning` extra) generates verifiable problems (countdown,
basic arithmetic, ...) from a seed; an entry is `{question, answer, metadata}`
and each dataset scores an answer string against its entry. Training rows are
drawn from a dataset of `size` entries; held-out rows from a second dataset
whose seed lies past every training index, so the two never share an entry's
generator seed.
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.api.extras import install_hint
from areal_adv.api.task_specs import ReasoningGymSpec
from areal_adv.trainer.lm.codec import Text
from areal_adv.trainer.rollout.tasks.base import Task


def _import_reasoning_gym() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(
            f"task.implementation=reasoning_gym needs the reasoning-gym package; {install_hint('reasoning')}"
        ) from exc
    return reasoning_gym


class ReasoningGymTask(Task):
    name = "reasoning_gym"

    def __init__(self, spec: ReasoningGymSpec, run_seed: int = 1) -> None:
        rg = _import_reasoning_gym()
        from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

        self.spec = spec
        self._extract = extract_answer
        seed = spec.seed if spec.seed is not None else run_seed
        self.datasets = {"train": self._create(rg, seed), "eval": self._create(rg, seed + spec.size)}
        prompt = spec.system_prompt
        self.system_prompt = SYSTEM_PROMPTS.get(prompt, prompt) if prompt is not None else None

    def _create(self, rg: Any, seed: int) -> Any:
        spec = self.spec
        if spec.dataset not in rg.factory.DATASETS:
            raise ValueError(
                f"task.kwargs.dataset: reasoning-gym has no dataset {spec.dataset!r} "
                f"(it has {len(rg.factory.DATASETS)}, e.g. {sorted(rg.factory.DATASETS)[:8]})"
            )
        try:
            return rg.create_dataset(spec.dataset, seed=seed, size=spec.size, **spec.dataset_config)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ValueError(
                f"task.kwargs: reasoning-gym rejected the config of {spec.dataset!r} "
                f"{spec.dataset_config}: {type(exc).__name__}: {exc}"
            ) from exc

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        index = rng.randrange(self.spec.size)
        entry = self.datasets[split][index]
        return {
            "question": entry["question"],
            "answer": entry["answer"],
            "metadata": entry["metadata"],
            "split": split,
            "index": index,
        }

    def prompt(self, row: dict[str, Any]) -> Text:
        if not self.spec.chat:
            return row["question"] if self.system_prompt is None else f"{self.system_prompt}\n{row['question']}"
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": row["question"]}]

    def score(self, row: dict[str, Any], completion: str) -> float:
        answer = completion if self.spec.answer_tag is None else self._extract(completion, self.spec.answer_tag)
        entry = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
        dataset = self.datasets[row.get("split", "train")]
        return float(dataset.score_answer(answer=answer, entry=entry))
