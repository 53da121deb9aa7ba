"""`model.mixed_precision: auto`: bfloat16 autocast where the device multiplies bfloat16 natively.

Autocast to bfloat16 pays off only where the matrix products run in bfloat16
in hardware: on a CUDA GPU with bf16 support, and on a CPU with AVX512-BF16
or AMX, through oneDNN. Elsewhere oneDNN converts to float32 and back around
every product, which can make a step slower than float32. On SmolLM2-135M
with this project's CPU (AVX512-BF16), bf16 took the GRPO step to 0.85x
float32's and the example learned as in float32 on two seeds
(docs/performance.md); `auto` is how a config asks for that where it holds.
"""

from __future__ import annotations

import torch


def native_bf16(device: torch.device) -> str | None:
    """Why `device` multiplies bfloat16 natively (a short reason), or None when it does not."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return f"{torch.cuda.get_device_name(index)} supports bfloat16"
        return None
    if device.type == "cpu":
        flags = [
            name
            for name, probe in (("AMX", "_is_amx_tile_supported"), ("AVX512-BF16", "_is_avx512_bf16_supported"))
            if getattr(torch.cpu, probe, lambda: False)()
        ]
        return f"the CPU has {' and '.join(flags)}" if flags else None
    return None


def resolve_mixed_precision(setting: str | None, device: torch.device) -> tuple[str | None, str]:
    """The engine's `mixed_precision` for a config's `setting`, and a one-line reason to log.

    `None` and `"bf16"` are returned as they are; `"auto"` becomes `"bf16"` when
    `native_bf16(device)` names a reason, else None (no autocast).
    """
    if setting != "auto":
        return setting, f"model.mixed_precision={setting}"
    reason = native_bf16(device)
    if reason is not None:
        return "bf16", f"model.mixed_precision=auto: bf16 autocast ({reason})"
    return None, f"model.mixed_precision=auto: no autocast ({device.type} without native bfloat16 products)"
