"""Writes the small example prompt files in data/ (JSONL rows: prompt, answer).

python examples/custom_task/make_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path


def rows(seed: int, n: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 4), rng.randint(0, 4)
        out.append({"prompt": f"{a} + {b} =", "answer": str(a + b)})
    return out


def main() -> None:
    folder = Path(__file__).resolve().parent / "data"
    folder.mkdir(exist_ok=True)
    for name, seed, n in (("train.jsonl", 0, 200), ("eval.jsonl", 1, 32)):
        with (folder / name).open("w", encoding="utf-8") as fh:
            for row in rows(seed, n):
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
