"""Writes a skill task's prompt files: `data/<task>/train.jsonl` and `data/<task>/eval.jsonl` (deterministic).

Training rows come from reasoning-gym seed `TRAIN_SEED`, held-out rows from
seed `TRAIN_SEED + train size` (reasoning-gym seeds entry i of seed s with
s + i, so this seed shares no entry's generator with the training rows); a
held-out row whose question is also a training question (the same word drawn
twice) or repeats an earlier held-out one is dropped and the next one taken, so
no evaluated problem is ever trained on. Rows: `prompt` (the question), `answer`,
`task` (the name in skill_tasks.py) and `metadata` (reasoning-gym's, as JSON).

    .venv/bin/python examples/real_model/make_skill_data.py spell_backward_3_6 [--train 2000 --eval 100]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.real_model import skill_tasks  # noqa: E402

FOLDER = Path(__file__).resolve().parent / "data"
TRAIN_SEED = 1


def held_out(task: skill_tasks.SkillTask, train: list[dict[str, str]], size: int) -> list[dict[str, str]]:
    """`size` rows of the held-out seed whose questions are neither training questions nor repeated."""
    seen, out, drawn = {r["prompt"] for r in train}, [], size
    while len(out) < size:
        drawn *= 2  # reasoning-gym's rows for a seed are a fixed sequence: a larger draw extends it
        out, kept = [], set(seen)
        for row in skill_tasks.rows(task, TRAIN_SEED + len(train), drawn):
            if row["prompt"] not in kept and len(out) < size:
                out.append(row)
                kept.add(row["prompt"])
        if drawn > 64 * size:
            raise SystemExit(f"{task.name}: only {len(out)} held-out questions not in the training set")
    return out


def write(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=sorted(skill_tasks.TASKS))
    p.add_argument("--train", type=int, default=2000, help="training rows")
    p.add_argument("--eval", type=int, default=100, help="held-out rows")
    p.add_argument("--out", type=Path, default=FOLDER)
    opts = p.parse_args(argv)
    task = skill_tasks.TASKS[opts.task]
    train = skill_tasks.rows(task, TRAIN_SEED, opts.train)
    evaluation = held_out(task, train, opts.eval)
    write(opts.out / task.name / "train.jsonl", train)
    write(opts.out / task.name / "eval.jsonl", evaluation)
    print(f"{opts.out / task.name}: {len(train)} train, {len(evaluation)} eval rows (no shared question)")


if __name__ == "__main__":
    main()
