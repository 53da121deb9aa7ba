"""Prompt datasets through Hugging Face `datasets`: every local format, epochs, shuffling, training."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from areal_adv.api.cli_args import load_config
from areal_adv.api.config_checks import ConfigError
from areal_adv.trainer.rollout.prompt_data import DatasetPromptSource, load_prompt_dataset
from areal_adv.trainer.run.loop import Trainer

ROWS = [{"prompt": f"{a} + {b} =", "answer": str(a + b), "id": 10 * a + b} for a in range(4) for b in range(3)]


def _write_all_formats(folder: Path) -> dict[str, Path]:
    ds = datasets.Dataset.from_list(ROWS)
    paths = {
        "jsonl": folder / "p.jsonl",
        "json": folder / "p.json",
        "parquet": folder / "p.parquet",
        "csv": folder / "p.csv",
        "disk": folder / "saved",
        "dict": folder / "saved_dict",
    }
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    paths["json"].write_text(json.dumps(ROWS))
    ds.to_parquet(str(paths["parquet"]))
    ds.to_csv(str(paths["csv"]), index=False)
    ds.save_to_disk(str(paths["disk"]))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(str(paths["dict"]))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _write_all_formats(tmp_path_factory.mktemp("data"))


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "csv", "disk", "dict"])
def test_each_format_loads_the_same_rows(files: dict[str, Path], fmt: str) -> None:
    ds = load_prompt_dataset(str(files[fmt]), split="train", field="data.train")
    rows = [dict(r) for r in ds]
    if fmt == "csv":  # CSV has no types: the answer column comes back as integers
        rows = [{**r, "answer": str(r["answer"])} for r in rows]
    assert rows == ROWS


def test_dataset_dict_split_is_selected_and_checked(files: dict[str, Path]) -> None:
    assert len(load_prompt_dataset(str(files["dict"]), split="test", field="data.eval")) == 3
    with pytest.raises(ConfigError, match=r"data\.eval: .*splits \['test', 'train'\].*'validation'"):
        load_prompt_dataset(str(files["dict"]), split="validation", field="data.eval")


def test_bad_paths_and_formats_are_config_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"data\.train: '.*missing\.jsonl' does not exist"):
        load_config(None, [f"data.train={tmp_path / 'missing.jsonl'}"])
    monkeypatch.chdir(tmp_path)  # a relative path names the folder it was looked for in
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["data.train=data/missing.jsonl"])
    assert str(caught.value) == (
        f"data.train: 'data/missing.jsonl' (relative to {tmp_path}) does not exist (expected a local file or folder)"
    )
    (tmp_path / "p.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"data\.train: .* unknown format"):
        load_config(None, [f"data.train={tmp_path / 'p.txt'}"])
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigError, match=r"data\.train: cannot read .*broken\.jsonl"):
        load_prompt_dataset(str(tmp_path / "broken.jsonl"), split="train", field="data.train")


def test_epochs_are_seeded_permutations_and_the_state_resumes(files: dict[str, Path]) -> None:
    ds = load_prompt_dataset(str(files["jsonl"]), split="train", field="data.train")
    source = DatasetPromptSource(ds, seed=3)
    first = [r["id"] for r in source.sample(12)]
    second = [r["id"] for r in source.sample(12)]
    assert sorted(first) == sorted(second) == sorted(r["id"] for r in ROWS)  # each epoch sees every row once
    assert first != second and source.epoch == 1
    again = DatasetPromptSource(ds, seed=3)
    assert [r["id"] for r in again.sample(12)] == first  # the order is a function of (seed, epoch)
    assert [r["id"] for r in DatasetPromptSource(ds, seed=4).sample(12)] != first
    mid = DatasetPromptSource(ds, seed=3)
    mid.sample(7)
    state = json.loads(json.dumps(mid.state_dict()))
    rest = [r["id"] for r in mid.sample(10)]
    resumed = DatasetPromptSource(ds, seed=0)
    resumed.load_state_dict(state)
    assert [r["id"] for r in resumed.sample(10)] == rest
    ordered = DatasetPromptSource(ds, seed=3, shuffle=False)
    assert [r["id"] for r in ordered.sample(14)] == [r["id"] for r in ROWS] + [r["id"] for r in ROWS[:2]]


def _dataset_overrides(tmp_path: Path, train: Path, *extra: str) -> list[str]:
    return [
        "task.implementation=dataset",
        f"data.train={train}",
        "actor.max_new_tokens=3",
        "reward=[{implementation: examples.custom_task.rewards.exact_answer}]",
        "rollout.batch_size=4",
        "rollout.n_samples=2",
        "model.hidden_size=32",
        "model.num_heads=2",
        "output.progress_bar=false",
        "output.plot=false",
        f"output.dir={tmp_path}",
        *extra,
    ]


def test_training_on_a_dataset_draws_its_rows_and_passes_columns(tmp_path: Path, files: dict[str, Path]) -> None:
    trainer = Trainer(load_config(None, _dataset_overrides(tmp_path, files["parquet"], "train.steps=3")))
    assert trainer.run().steps_done == 3
    source = trainer.prompt_source
    assert (source.epoch, source.position) == (0, 12)  # 3 steps x 4 prompts: one epoch of 12 rows
    out = trainer.step(3)
    assert (source.epoch, source.position) == (1, 4)
    for rec in out.records:
        assert rec.prompt == rec.row["prompt"] and rec.rewards.keys() == {"exact_answer"}
        assert rec.reward == (1.0 if rec.completion.strip() == rec.row["answer"] else 0.0)


def test_missing_prompt_column_names_the_key(tmp_path: Path, files: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"data\.prompt_key: data\.train has no column 'question'"):
        Trainer(load_config(None, _dataset_overrides(tmp_path, files["jsonl"], "data.prompt_key=question")))


def test_dataset_task_needs_data_and_held_out_rows_for_eval(files: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"data\.train: task 'dataset' takes its prompts from data\.train"):
        load_config(None, ["task.implementation=dataset"])
    with pytest.raises(ConfigError, match=r"data\.eval: eval\.every is set but task 'dataset'"):
        load_config(None, [f"data.train={files['jsonl']}", "eval.every=5"])
    assert load_config(None, [f"data.train={files['jsonl']}"]).task.implementation == "dataset"
