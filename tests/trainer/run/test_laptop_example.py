"""examples/real_model/laptop.yaml is the real-model sums run with LoRA adapters, nothing else changed."""

from __future__ import annotations

from pathlib import Path

from areal_adv.api.cli_args import config_to_dict, load_config

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "real_model"


def _flat(data: object, prefix: str = "") -> dict[str, object]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, object] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def test_laptop_run_is_the_sums_run_with_lora_in_float32() -> None:
    laptop = _flat(config_to_dict(load_config(EXAMPLE / "laptop.yaml")))
    full = _flat(config_to_dict(load_config(EXAMPLE / "grpo_smollm2.yaml")))
    changed = {k for k in laptop.keys() | full.keys() if laptop.get(k) != full.get(k)}
    assert changed == {
        "experiment_name",
        "model.mixed_precision",
        "model.lora.r",
        "model.lora.alpha",
        "model.lora.dropout",
        "train.lr",
    }
    assert full["model.lora"] is None and laptop["model.lora.target_modules"] is None  # peft's default modules
    assert laptop["model.lora.r"] == 8 and laptop["train.lr"] == 3e-4 and laptop["model.mixed_precision"] is None
    assert laptop["actor.ppo_micro_batch_size"] == 4
