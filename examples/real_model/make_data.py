"""Writes the task's prompt files: every one-digit sum `a + b` (a, b in 0..9), split by problem.

The 100 problems are shuffled with a fixed seed; the first `EVAL_SIZE` are the
held-out set (`data/eval.jsonl`), the rest the training set (`data/train.jsonl`),
so no evaluated problem is ever trained on. Rows: `prompt` ("What is a + b?"),
`answer` (the sum as text), `a`, `b`.

    .venv/bin/python examples/real_model/make_data.py     (rewrites data/, deterministic)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "data"
EVAL_SIZE = 40
SEED = 0


def problems() -> list[dict[str, object]]:
    rows = [
        {"prompt": f"What is {a} + {b}?", "answer": str(a + b), "a": a, "b": b} for a in range(10) for b in range(10)
    ]
    random.Random(SEED).shuffle(rows)
    return rows


def write(path: Path, rows: list[dict[str, object]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    rows = problems()
    FOLDER.mkdir(exist_ok=True)
    write(FOLDER / "eval.jsonl", rows[:EVAL_SIZE])
    write(FOLDER / "train.jsonl", rows[EVAL_SIZE:])
    print(f"{FOLDER}: {EVAL_SIZE} eval, {len(rows) - EVAL_SIZE} train problems")


if __name__ == "__main__":
    main()
