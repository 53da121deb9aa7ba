"""The racing evidence, read by its rule: each race's verdicts against the suite's full runs, and the block.

The rule is docs/benchmarks.md, "Can a short race choose the estimator?" (written
before any race row). Pure functions of the rows of bench/suite/race_evidence.py and
bench/suite/estimator_suite.py (and, for the SmolLM2 race, bench/real_model/compare_estimators.py's
`sums_2digit` rows); every interval is a paired Student-t interval, so the block
is the same every time it is built from the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal_adv.trainer.race.racing import PairedInterval, paired_difference
from bench import bench_rows
from bench.suite.estimator_suite import RESULTS as SUITE_RESULTS
from bench.suite.estimator_suite import current_rows
from bench.suite.suite_definitions import ESTIMATORS, TASKS
from bench.suite.suite_distinct import distinct_groups, label

BLOCK = "race_evidence"
COMMAND = ".venv/bin/python -m bench.suite.race_evidence --report --write-docs"
TRUTH_SEEDS, INDEPENDENT_SEEDS = range(1, 21), range(1, 11)
SIGN_SHARE, FALSE_SHARE = 0.75, 0.10

Pair = tuple[str, str]


@dataclass(frozen=True)
class Judged:
    """One (task, estimator) pair of one race: the race's interval and the full runs' truth."""

    pair: Pair
    race: PairedInterval
    truth: PairedInterval
    status: str

    @property
    def clear(self) -> bool:
        return self.truth.excludes_zero()

    @property
    def call(self) -> int:
        """+1 / -1: the race's interval lies above / below 0; 0: no call."""
        return 0 if not self.race.excludes_zero() else (1 if self.race.low > 0 else -1)

    @property
    def sign_right(self) -> bool:
        return (self.race.mean > 0) == (self.truth.mean > 0) and self.race.mean != 0


def estimator_of(label: str) -> str:
    """The suite's estimator an arm label stands for (an example runs under its file's stem)."""
    stems = {source.path.stem: name for name, source in ESTIMATORS.items() if source.full_run}
    return stems.get(label, label)


def truth(suite: list[dict[str, Any]], pair: Pair, seeds: range) -> PairedInterval:
    """AUC(E) − AUC(GRPO) of the full runs over `seeds`, with its paired Student-t interval."""
    auc = {(r["task"], r["estimator"], r["seed"]): r["auc"] for r in suite if r["seed"] in seeds}
    mine = {s: auc[(pair[0], pair[1], s)] for s in seeds if (pair[0], pair[1], s) in auc}
    base = {s: auc[(pair[0], "grpo", s)] for s in seeds if (pair[0], "grpo", s) in auc}
    return paired_difference(mine, base)


def judged(row: dict[str, Any], suite: list[dict[str, Any]], seeds: range) -> list[Judged]:
    """Every non-baseline arm of one race row against the truth over `seeds`."""
    out = []
    for v in row["verdicts"]:
        if v["status"] == "baseline":
            continue
        pair = (row["task"], estimator_of(v["arm"]))
        race = PairedInterval(v["mean"], v["low"], v["high"], v["n"])
        out.append(Judged(pair, race, truth(suite, pair, seeds), v["status"]))
    return out


@dataclass(frozen=True)
class Score:
    """The rule's measures over a set of judged pairs."""

    clear: int
    sign_right: int
    right: int
    wrong: int
    unclear: int
    false: int

    def passes(self) -> list[str]:
        """The conditions the rule's reading fails (empty: the race chooses)."""
        failed = []
        if self.clear and self.right < SIGN_SHARE * self.clear:
            failed.append(f"right calls on {self.right} of {self.clear} clear pairs, under {SIGN_SHARE:.0%}")
        if self.wrong:
            failed.append(f"{self.wrong} call(s) of the wrong sign")
        if self.unclear and self.false > FALSE_SHARE * self.unclear:
            failed.append(f"false verdicts on {self.false} of {self.unclear} unclear pairs, over {FALSE_SHARE:.0%}")
        return failed


def score(items: Sequence[Judged]) -> Score:
    clear = [j for j in items if j.clear]
    unclear = [j for j in items if not j.clear]
    return Score(
        clear=len(clear),
        sign_right=sum(j.sign_right for j in clear),
        right=sum(j.call != 0 and j.call == (1 if j.truth.mean > 0 else -1) for j in clear),
        wrong=sum(j.call != 0 and j.call != (1 if j.truth.mean > 0 else -1) for j in clear),
        unclear=len(unclear),
        false=sum(j.call != 0 for j in unclear),
    )


def _seeds(suite: list[dict[str, Any]], seeds: range) -> str:
    """The seeds of `seeds` the suite's rows have: `seeds 1-20`, or what there is."""
    have = sorted({r["seed"] for r in suite if r["seed"] in seeds})
    return f"seeds {have[0]}-{have[-1]}" if have == list(range(have[0], have[-1] + 1)) else f"seeds {have}"


def _cell(d: PairedInterval) -> str:
    return f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"


def _call(j: Judged) -> str:
    words = {1: "sooner", -1: "later", 0: "no call"}[j.call]
    return words + (" (dropped)" if j.status == "dropped" else "")


def pair_table(rows: list[dict[str, Any]], suite: list[dict[str, Any]], keep: dict[Pair, list[Pair]]) -> str:
    """One line per distinct pair: the full-run truth (20 and 10 seeds), then each race's interval and call."""
    by_block: dict[tuple, dict[Pair, Judged]] = {}
    for r in rows:
        by_block.setdefault(tuple(r["seeds"]), {}).update({j.pair: j for j in judged(r, suite, TRUTH_SEEDS)})
    blocks = sorted(by_block)
    head = f"| task | estimator | full runs, AUC − GRPO ({_seeds(suite, TRUTH_SEEDS)}) | clear? | seeds 1-10 only |"
    head += "".join(f" race seeds {a}-{b}: train reward − GRPO | call |" for a, b in blocks)
    lines = [head, "| " + " | ".join(["---"] * (5 + 2 * len(blocks))) + " |"]
    for task in TASKS:
        for estimator in TASKS[task].estimators[1:]:
            pair = (task, estimator)
            if pair not in keep or not all(pair in by_block[b] for b in blocks):
                continue
            first = by_block[blocks[0]][pair]
            line = f"| {task} | {label(pair, keep)} | {_cell(first.truth)} | {'yes' if first.clear else 'no'} | "
            line += _cell(truth(suite, pair, INDEPENDENT_SEEDS)) + " |"
            line += "".join(f" {_cell(by_block[b][pair].race)} | {_call(by_block[b][pair])} |" for b in blocks)
            lines.append(line)
    return "\n".join(lines)


def score_table(rows: list[dict[str, Any]], suite: list[dict[str, Any]], keep: dict[Pair, list[Pair]]) -> str:
    """Per race and pooled: the rule's measures, the compute and the reading."""
    lines = [
        "| race | clear pairs | sign right | right calls | wrong calls | unclear pairs | false verdicts | updates "
        "trained / same arms and seeds in full | / the 20-seed full comparison | reading |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    pooled: list[Judged] = []
    for a, b in sorted({tuple(r["seeds"]) for r in rows}):
        block = [r for r in rows if tuple(r["seeds"]) == (a, b)]
        items = [j for r in block for j in judged(r, suite, TRUTH_SEEDS) if j.pair in keep]
        pooled += items
        lines.append(_score_line(f"seeds {a}-{b}", score(items), block))
    lines.append(_score_line("both", score(pooled), rows))
    return "\n".join(lines)


def _score_line(name: str, s: Score, rows: list[dict[str, Any]]) -> str:
    trained = sum(r["compute"]["trained"] for r in rows)
    full = sum(r["compute"]["full"] for r in rows)
    twenty = sum(r["compute"]["full"] * 20 // len(range(r["seeds"][0], r["seeds"][1] + 1)) for r in rows)
    failed = s.passes()
    reading = "chooses" if not failed else "does not choose: " + "; ".join(failed)
    return (
        f"| {name} | {s.clear} | {s.sign_right} of {s.clear} | {s.right} | {s.wrong} | {s.unclear} | {s.false} | "
        f"{trained / full:.1%} | {trained / twenty:.1%} | {reading} |"
    )


def train_check(rows: list[dict[str, Any]], suite: list[dict[str, Any]]) -> str:
    """How many race arm-seeds trained exactly as the suite's run of the same seed over the window."""
    kept = {(r["task"], r["estimator"], r["seed"]): r["train_reward"] for r in suite}
    same = checked = 0
    for row in rows:
        for arm, by_seed in row["train_rewards"].items():
            for seed, rewards in by_seed.items():
                full = kept.get((row["task"], estimator_of(arm), int(seed)))
                if full is not None:
                    checked += 1
                    same += full[: len(rewards)] == rewards
    return (
        f"{same} of {checked} race arm-seeds trained exactly as the suite's full run of the same seed over their window"
    )


def report_text(rows: list[dict[str, Any]], suite: list[dict[str, Any]], results: Path) -> str:
    """The docs block: the measures per race, the pairs, the SmolLM2 race."""
    races = [r for r in rows if r.get("race") == "suite"]
    keep = distinct_groups(suite)
    parts = [bench_rows.generated_note(COMMAND, results, len(rows))]
    if races:
        wall = sum(r["wall_s"] for r in races)
        cpu = sum(r["cpu_s"] for r in races)
        loads = [r["load1_start"] for r in races]
        parts += [
            score_table(races, suite, keep),
            f"{len(races)} races, {cpu:.0f} CPU s and {wall / 60:.0f} min of wall time in all (1-min load "
            f"{min(loads):.1f}-{max(loads):.1f} at their starts); {train_check(races, suite)}.",
            pair_table(races, suite, keep),
        ]
    parts += smollm2_text(rows)
    return "\n\n".join(parts)


def smollm2_text(rows: list[dict[str, Any]]) -> list[str]:
    """The SmolLM2 race against the full runs of "The real model from a sparse start"."""
    row = next((r for r in rows if r.get("race") == "smollm2"), None)
    if row is None:
        return ["The SmolLM2 race has no row yet (`.venv/bin/python -m bench.suite.race_evidence --smollm2`)."]
    from bench.real_model import real_model_diagnostics as rmd

    auc = rmd.outcomes(bench_rows.read(rmd.RUN_ROWS), [])["AUC"]
    lines = ["| arm | race seeds 4-8: train reward − GRPO | call | full runs (seeds 1-3): AUC − GRPO | clear? |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for v in (v for v in row["verdicts"] if v["status"] != "baseline"):
        race = PairedInterval(v["mean"], v["low"], v["high"], v["n"])
        full = paired_difference(auc.get(v["arm"], {}), auc.get("grpo", {}))
        call = {True: "sooner" if race.low > 0 else "later", False: "no call"}[race.excludes_zero()]
        clear = "yes" if full.excludes_zero() else "no"
        lines.append(f"| {v['arm']} | {_cell(race)} | {call} | {_cell(full)} | {clear} |")
    c = row["compute"]
    return [
        "\n".join(lines),
        f"SmolLM2 race: {c['trained']} updates trained in {row['wall_s'] / 60:.0f} min of wall time "
        f"({row['cpu_s']:.0f} CPU s in the race's process; 1-min load {row['load1_start']:.1f} at the start, "
        f"{row['load1_end']:.1f} at the end), {c['step_seconds'] / 60:.0f} min of it in steps.",
    ]


def report(results: Path, write_docs: bool = False, doc: Path = bench_rows.ROOT / "docs" / "benchmarks.md") -> int:
    rows = bench_rows.read(results)
    suite = current_rows(bench_rows.read(SUITE_RESULTS))
    text = report_text(rows, suite, results)
    print(text)
    if write_docs:
        bench_rows.write_block(doc, BLOCK, text)
    return 0
