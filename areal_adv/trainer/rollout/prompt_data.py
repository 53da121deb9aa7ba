"""Where a step's prompts come from: a prompt dataset (Hugging Face `datasets`) or a procedural task.

Both sources implement the trainer's prompt-source interface: `sample(n)` gives
the step's global list of rows (identical on every rank, which all hold the
same source state), `state_dict()` / `load_state_dict()` capture the position
for exact resume. Datasets are read from local files only: JSONL/JSON,
Parquet, CSV (`datasets.load_dataset` with the matching builder), or a folder
written by `save_to_disk` (`datasets.load_from_disk`).
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np

from areal_adv.api.config_checks import ConfigError
from areal_adv.api.extras import install_hint

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def _import_datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        raise ConfigError(
            f"data.train / data.eval: prompt datasets need Hugging Face datasets; {install_hint('data')}"
        ) from exc
    datasets.disable_progress_bars()
    return datasets


def load_prompt_dataset(path: str, *, split: str, field: str) -> Any:
    """A `datasets.Dataset` from a local file or `save_to_disk` folder (`field` names the config key)."""
    datasets = _import_datasets()
    try:
        if os.path.isdir(path):
            loaded = datasets.load_from_disk(path)
        else:
            builder = _BUILDERS.get(os.path.splitext(path)[1].lower())
            if builder is None:
                raise ConfigError(
                    f"{field}: {path!r} has an unknown format; expected one of {sorted(_BUILDERS)} "
                    "or a folder written by save_to_disk"
                )
            loaded = datasets.load_dataset(builder, data_files=path, split="train")
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"{field}: cannot read {path!r} with datasets ({type(exc).__name__}: {exc})") from exc
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ConfigError(
                f"{field}: {path!r} is a DatasetDict with splits {sorted(loaded)}, and the configured "
                f"split {split!r} is not one of them (set data.train_split / data.eval_split)"
            )
        loaded = loaded[split]
    if len(loaded) == 0:
        raise ConfigError(f"{field}: {path!r} has no rows")
    return loaded


def check_prompt_column(dataset: Any, prompt_key: str, field: str) -> None:
    if prompt_key not in dataset.column_names:
        raise ConfigError(f"data.prompt_key: {field} has no column {prompt_key!r} (columns: {dataset.column_names})")


def rows_of(dataset: Any, indices: list[int]) -> list[dict[str, Any]]:
    """Row dicts for `indices` (one columnar read, not one per row)."""
    if not indices:
        return []
    columns = dataset[indices]
    return [{k: columns[k][i] for k in columns} for i in range(len(indices))]


class DatasetPromptSource:
    """Rows of a dataset in epochs; epoch e is the permutation of `default_rng([seed, e])`.

    The order is a pure function of (seed, epoch), so the state is just the
    epoch and the position in it.
    """

    def __init__(self, dataset: Any, *, seed: int, shuffle: bool = True) -> None:
        self.dataset = dataset
        self.seed = int(seed)
        self.shuffle = shuffle
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def sample(self, n: int) -> list[dict[str, Any]]:
        indices: list[int] = []
        while len(indices) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            take = min(n - len(indices), len(self._order) - self.position)
            indices += self._order[self.position : self.position + take].tolist()
            self.position += take
        return rows_of(self.dataset, indices)

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "dataset",
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "size": len(self.dataset),
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "dataset" or state.get("size") != len(self.dataset):
            raise ValueError(f"prompt source state {state} does not belong to this dataset ({len(self.dataset)} rows)")
        self.seed, self.shuffle = int(state["seed"]), bool(state["shuffle"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)


class TaskPromptSource:
    """Fresh rows from a procedural task's `sample(rng, split)`; the state is the RNG's."""

    def __init__(self, task: Any, rng: random.Random, split: str = "train") -> None:
        self.task = task
        self.rng = rng
        self.split = split

    def sample(self, n: int) -> list[dict[str, Any]]:
        try:
            return [self.task.sample(self.rng, self.split) for _ in range(n)]
        except Exception as exc:  # the task's own code: a one-line error naming it (areal_adv.trainer.run.error_report)
            from areal_adv.trainer.rollout.tasks.runtime import TaskError

            raise TaskError(
                f"task {type(self.task).__name__}.sample(rng, {self.split!r}): {type(exc).__name__}: {exc}"
            ) from exc

    def state_dict(self) -> dict[str, Any]:
        version, internal, gauss = self.rng.getstate()
        return {"kind": "task", "split": self.split, "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != "task":
            raise ValueError(f"prompt source state {state.get('kind')!r} does not belong to a procedural task")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.split = state["split"]
