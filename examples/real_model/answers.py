"""Whether a skill run's held-out gain is the skill or a learned prior: its greedy answers at each evaluation.

    .venv/bin/python examples/real_model/answers.py runs/grpo_smollm2_char_count/pilot

Reads the run's `samples.jsonl` (the config must log every held-out answer:
`eval.samples_per_step` at least the held-out size) and prints, per
evaluation, for the strict accuracy (`solved`: the whole completion) and the
format-fixed one (`solved_lenient`: its last integer): how often each answer
was given, the accuracy for each right answer, and `chance`: the accuracy the
same answers would have if they ignored the question (sum over answers a of
P(model says a) x P(a is right)).
A policy that learned only the answers' prior (say, always "1") reaches at most
`best constant` (the most common right answer's share) and its accuracy stays
near `chance`; an accuracy well above both is the skill.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

_INTEGER = re.compile(r"-?\d+")


def evaluations(samples: Path) -> dict[int, list[dict[str, Any]]]:
    """The held-out rows of `samples.jsonl` by evaluation (the number of updates before it)."""
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in samples.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["split"] == "eval":
            out[int(row["step"])].append(row)
    return dict(sorted(out.items()))


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracies, the answers given, the accuracy per right answer and the question-ignoring `chance`.

    Each is given twice: for the whole completion (strict) and for the answer
    read out of any wording (lenient: the last integer, `skill_tasks.lenient_answer`).
    """
    n, right = len(rows), Counter(r["row"]["answer"] for r in rows)
    out: dict[str, Any] = {"n": n, "best_constant": max(right.values()) / n}
    for kind, key in (("strict", "solved"), ("lenient", "solved_lenient")):
        given = Counter(_read(r, kind) for r in rows)
        out[kind] = {
            "accuracy": sum(r["rewards"][key] for r in rows) / n,
            "chance": sum(given[a] * right[a] for a in right) / n**2,
            "given": dict(given.most_common(5)),
            "per_answer": {
                a: sum(r["rewards"][key] for r in rows if r["row"]["answer"] == a) / count
                for a, count in sorted(right.items())
            },
        }
    return out


def _read(row: dict[str, Any], kind: str) -> str | None:
    """The answer a held-out row's completion gives: all of it (strict), or its last integer (lenient)."""
    if kind == "strict":
        return row["completion"].strip()
    found = _INTEGER.findall(row["completion"].replace(",", ""))
    return found[-1] if found else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a run directory (with samples.jsonl)")
    opts = p.parse_args(argv)
    for updates, rows in evaluations(opts.run / "samples.jsonl").items():
        s = summary(rows)
        print(f"after {updates} updates (n={s['n']}, best constant {s['best_constant']:.2f}):")
        for kind in ("strict", "lenient"):
            k = s[kind]
            per = " ".join(f"{a}:{acc:.2f}" for a, acc in k["per_answer"].items())
            print(
                f"  {kind}: accuracy {k['accuracy']:.2f} chance {k['chance']:.2f} | per right answer {per} | "
                f"answers given {k['given']}"
            )


if __name__ == "__main__":
    main()
