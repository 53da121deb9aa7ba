"""`model.mixed_precision: auto` (areal_adv.trainer.parallel.precision): bf16 only where products are native.

The CPU probes are torch's own (`torch.cpu._is_avx512_bf16_supported`,
`_is_amx_tile_supported`); they are replaced here so both answers are tested on
any machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_run
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.parallel.precision import native_bf16, resolve_mixed_precision
from areal_adv.trainer.run.loop import Trainer

CPU = torch.device("cpu")
CONFIG = Path(__file__).resolve().parents[3] / "examples" / "grpo_arith.yaml"


def _cpu_flags(patch: pytest.MonkeyPatch, *, avx512_bf16: bool, amx: bool) -> None:
    patch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    patch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)


@pytest.mark.parametrize(
    "avx512_bf16, amx, want, reason",
    [
        (True, False, "bf16", "the CPU has AVX512-BF16"),
        (False, True, "bf16", "the CPU has AMX"),
        (True, True, "bf16", "the CPU has AMX and AVX512-BF16"),
        (False, False, None, "no autocast (cpu without native bfloat16 products)"),
    ],
)
def test_auto_picks_bf16_only_on_a_cpu_with_native_bfloat16_products(
    monkeypatch: pytest.MonkeyPatch, avx512_bf16: bool, amx: bool, want: str | None, reason: str
) -> None:
    _cpu_flags(monkeypatch, avx512_bf16=avx512_bf16, amx=amx)
    precision, note = resolve_mixed_precision("auto", CPU)
    assert precision == want
    assert note.startswith("model.mixed_precision=auto: ") and note.endswith(reason + (")" if want else ""))


def test_explicit_settings_are_kept_whatever_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpu_flags(monkeypatch, avx512_bf16=False, amx=False)
    assert resolve_mixed_precision(None, CPU) == (None, "model.mixed_precision=None")
    assert resolve_mixed_precision("bf16", CPU) == ("bf16", "model.mixed_precision=bf16")
    assert native_bf16(torch.device("meta")) is None


@pytest.mark.parametrize("native", [True, False])
def test_the_trainer_runs_what_auto_resolves_to_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, native: bool
) -> None:
    _cpu_flags(monkeypatch, avx512_bf16=native, amx=False)
    overrides = [*tiny_run.TINY, f"output.dir={tmp_path}", "train.steps=1", "model.mixed_precision=auto"]
    trainer = Trainer(load_config(CONFIG, overrides))
    assert trainer.engine.mixed_precision == ("bf16" if native else None)
    trainer.run()
    expected = "bf16 autocast (the CPU has AVX512-BF16)" if native else "no autocast"
    assert f"precision: model.mixed_precision=auto: {expected}" in capsys.readouterr().out
    assert "mixed_precision: auto" in (trainer.run_dir / "config.yaml").read_text()  # the setting as written
