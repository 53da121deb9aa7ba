"""`areal-adv train` and `areal-adv export`: a run's policy as a folder plain transformers loads and generates with."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from checkpoint_factory import CHAT_TEMPLATE, build_checkpoint
from transformers import AutoModelForCausalLM, AutoTokenizer

from areal_adv.cli import main
from areal_adv.trainer.lm.model import build_policy, special_ids
from areal_adv.trainer.run.export import export_run
from areal_adv.trainer.run.trainer_state import load_module

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "examples" / "custom_task" / "data"
TINY = [
    "task.implementation=dataset",
    f"data.train={DATA / 'train.jsonl'}",
    "task.kwargs.chat=true",
    "reward=[{implementation: plugins.graded_rewards.char_length}]",
    "rollout.batch_size=2",  # graded: learns
    "rollout.n_samples=4",
    "actor.max_new_tokens=4",
    "output.progress_bar=false",
    "output.plot=false",
    "train.steps=2",
    "train.save_every=1",
    "train.num_threads=1",
    "train.lr=1e-2",
]
LORA = "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj]}"
pytestmark = pytest.mark.xdist_group("export")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A full fine-tuning run and a LoRA run of a tiny local checkpoint, each through `areal-adv train`."""
    base = tmp_path_factory.mktemp("base")
    build_checkpoint(base)
    out = tmp_path_factory.mktemp("runs")
    dirs = {}
    for name, extra in (("full", []), ("lora", [LORA])):
        assert main(["train", *TINY, f"model.path={base}", f"output.dir={out}", f"experiment_name={name}", *extra]) == 0
        dirs[name] = out / name / "trial0"
    return {**dirs, "base": base}


def _answer(folder: Path) -> str:
    """Plain transformers: load, apply the chat template, generate a few greedy tokens."""
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    assert tok.chat_template == CHAT_TEMPLATE
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "7 + 8 ="}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]
    return tok.decode(out[0, ids["input_ids"].shape[1] :])


@pytest.mark.parametrize("kind", ["full", "lora"])
def test_export_loads_in_plain_transformers_and_generates(
    runs: dict[str, Path], kind: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "model"
    assert main(["export", str(runs[kind]), str(out)]) == 0
    assert f"exported {runs[kind] / 'checkpoints' / 'step_2'} to {out}" in capsys.readouterr().out
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not (out / "adapter_model.safetensors").exists()
    assert isinstance(_answer(out), str)
    trained = AutoModelForCausalLM.from_pretrained(out, local_files_only=True).state_dict()
    start = AutoModelForCausalLM.from_pretrained(runs["base"], local_files_only=True).state_dict()
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[k], start[k]) for k in trained)  # the trained policy, not the base


def test_merged_lora_weights_give_the_adapter_model_logits(runs: dict[str, Path], tmp_path: Path) -> None:
    exported = export_run(runs["lora"], tmp_path / "model", step=1)
    assert exported.merged_lora and exported.checkpoint.name == "step_1"
    merged = AutoModelForCausalLM.from_pretrained(exported.out_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(exported.out_dir, local_files_only=True)
    from areal_adv.api.train_args import LoraConfig, ModelConfig

    adapter = build_policy(
        ModelConfig(path=str(runs["base"]), lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "v_proj"])),
        len(tok),
        special_ids(tok),
    )
    load_module(adapter, exported.checkpoint / "policy")
    ids = torch.tensor([[2, 40, 41, 42, 43, 44, 45]])
    with torch.no_grad():
        expected = adapter(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    with torch.no_grad(), adapter.disable_adapter():
        assert (adapter(input_ids=ids).logits - expected).abs().max() > 1e-4  # the adapters changed something


def test_export_errors_name_the_folder(runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["export", str(runs["full"]), str(tmp_path / "a"), "--step", "7"]) == 1
    assert f"error: {runs['full']}: no checkpoint at step 7" in capsys.readouterr().err
    assert main(["export", str(tmp_path), str(tmp_path / "b")]) == 1
    assert "no checkpoints/ folder; expected a run directory" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["export", str(runs["full"]), str(tmp_path / "full")]) == 1
    assert "exists and is not empty" in capsys.readouterr().err


def test_every_file_of_a_run_and_an_export_has_the_umask_mode(runs: dict[str, Path], tmp_path: Path) -> None:
    import stat

    from areal_adv.utils.file_modes import default_file_mode

    out = tmp_path / "model"
    assert main(["export", str(runs["full"]), str(out)]) == 0
    files = [p for folder in (runs["full"], runs["lora"], out) for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "model.safetensors" for p in files) and any(p.suffix == ".json" for p in files)
    modes = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
    assert set(modes.values()) == {oct(default_file_mode())}, modes
