"""Converts the SmolLM2 GGUF file once into a `save_pretrained` folder (float32 safetensors + tokenizer).

Loading the GGUF file de-quantises every tensor on each start (minutes on a loaded
2-core machine); the converted folder loads in seconds with `model.path`. Same
weights: transformers' own GGUF reader produces them either way.

    .venv/bin/python examples/real_model/convert.py [OUT_DIR]   (default runs/models/SmolLM2-135M-Instruct)
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locate import gguf_path  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "runs" / "models" / "SmolLM2-135M-Instruct"


def main(out: Path) -> None:
    path = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    # transformers marks a GGUF-loaded model as quantized and refuses save_pretrained; the tensors are
    # already de-quantised float32, so copy them into a plain model of the same architecture
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
