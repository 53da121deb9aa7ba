"""bench/suite/race_evidence.py and bench/suite/race_report.py: the races are the suite's runs, the rule's measures, the block."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]

from areal_adv.api.cli_args import config_to_dict, load_config  # noqa: E402
from areal_adv.trainer.race.racing import PairedInterval, paired_difference  # noqa: E402
from bench import bench_rows  # noqa: E402
from bench.suite import race_evidence  # noqa: E402
from bench.suite.race_report import (  # noqa: E402
    BLOCK,
    Judged,
    estimator_of,
    judged,
    report_text,
    score,
    score_table,
    smollm2_text,
    train_check,
    truth,
)
from bench.suite.suite_definitions import run_config  # noqa: E402
from bench.suite.suite_distinct import distinct_groups, label  # noqa: E402


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


@pytest.mark.parametrize("task", ["noisy_process", "two_rewards"])
def test_every_arm_of_a_race_is_the_suites_run_of_its_estimator(task, tmp_path, monkeypatch):
    from areal_adv.trainer.race.arms import write_arm_configs
    from areal_adv.trainer.race.race_command import build_spec, parser

    monkeypatch.setattr(race_evidence, "RUNS", tmp_path)
    argv, race_dir = race_evidence.race_argv(task, (11, 15))
    spec, _ = build_spec(parser().parse_args(argv))
    for arm, estimator in zip(write_arm_configs(spec, race_dir), race_evidence.TASKS[task].estimators):
        seeded = [f"{name}=12" for name in ("seed", *spec.seed_fields)] + ["trial_name=seed12"]
        mine = _flat(config_to_dict(load_config(arm.config, seeded)))
        theirs = _flat(config_to_dict(load_config(run_config(task, estimator, 12))))
        naming = {"experiment_name", "output.dir", "output.overwrite", "train.save_every"}
        assert {k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)} <= naming, estimator
        assert estimator_of(arm.label) == estimator


def _judged(truth: tuple[float, float], race: tuple[float, float]) -> Judged:
    t, r = PairedInterval(sum(truth) / 2, *truth, 20), PairedInterval(sum(race) / 2, *race, 5)
    return Judged(("sparse", "x"), r, t, "finished")


def test_the_measures_follow_the_rule():
    items = [
        _judged((0.01, 0.05), (0.002, 0.01)),  # clear, right call
        _judged((0.01, 0.05), (-0.01, 0.02)),  # clear, no call, right sign
        _judged((-0.05, -0.01), (0.001, 0.01)),  # clear, wrong call
        _judged((-0.02, 0.03), (0.001, 0.004)),  # unclear, a false verdict
        _judged((-0.02, 0.03), (-0.01, 0.01)),  # unclear, no call
    ]
    s = score(items)
    assert (s.clear, s.sign_right, s.right, s.wrong, s.unclear, s.false) == (3, 2, 1, 1, 2, 1)
    assert s.passes() == [
        "right calls on 1 of 3 clear pairs, under 75%",
        "1 call(s) of the wrong sign",
        "false verdicts on 1 of 2 unclear pairs, over 10%",
    ]
    assert score(items[:1] + items[4:]).passes() == []


def test_pairs_that_repeat_another_tasks_runs_count_once():
    def row(task: str, estimator: str, seed: int, reward: float) -> dict:
        return {"task": task, "estimator": estimator, "seed": seed, "train_reward": [reward], "curve": [[0, reward]]}

    rows = [
        row(t, e, s, 0.1 * s + (e == "rloo") * 0.01)
        for t in ("multiturn", "noisy_process")
        for e in ("grpo", "rloo")
        for s in (1, 2)
    ]
    rows += [row("noisy_process", "gvpo", s, 0.5) for s in (1, 2)]
    groups = distinct_groups(rows)
    assert groups[("multiturn", "rloo")] == [("multiturn", "rloo"), ("noisy_process", "rloo")]
    assert ("noisy_process", "gvpo") in groups and ("noisy_process", "rloo") not in groups
    assert label(("multiturn", "rloo"), groups) == "rloo (= noisy_process/rloo)"


def _suite_row(task: str, estimator: str, seed: int, auc: float, rewards: list[float] | None = None) -> dict:
    return {"task": task, "estimator": estimator, "seed": seed, "auc": auc, "train_reward": rewards or [0.0]}


def test_the_truth_is_the_paired_t_interval_of_the_auc_differences_over_its_seeds():
    diffs = {s: 0.01 + 0.004 * ((s * 7) % 5) - (0.05 if s > 10 else 0.0) for s in range(1, 21)}
    suite = [_suite_row("sparse", "grpo", s, 0.5 + 0.01 * s) for s in range(1, 21)]
    suite += [_suite_row("sparse", "maxrl", s, 0.5 + 0.01 * s + diffs[s]) for s in range(1, 21)]
    suite += [_suite_row("sparse", "maxrl", 21, 9.0)]  # outside both seed ranges: never read

    for seeds in (range(1, 21), range(1, 11)):
        x = [diffs[s] for s in seeds]
        ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        got = truth(suite, ("sparse", "maxrl"), seeds)
        assert (got.mean, got.low, got.high, got.n) == pytest.approx((sum(x) / len(x), ci.low, ci.high, len(x)))
    # seeds 1-10 alone lie above 0; the 20 seeds' mean is pulled below by seeds 11-20
    assert (
        truth(suite, ("sparse", "maxrl"), range(1, 11)).low > 0 > truth(suite, ("sparse", "maxrl"), range(1, 21)).mean
    )


def test_a_race_row_is_judged_per_arm_under_its_suite_estimators_name():
    suite = [_suite_row("multiturn", "grpo", s, 0.8) for s in (1, 2, 3)]
    suite += [_suite_row("multiturn", "mt_grpo", s, 0.85 + 0.01 * s) for s in (1, 2, 3)]
    verdict = {"mean": 0.02, "low": 0.01, "high": 0.03, "n": 5}
    row = {
        "task": "multiturn",
        "verdicts": [
            {"arm": "grpo", "status": "baseline"},
            {"arm": "guess_mt_grpo", "status": "dropped", **verdict},  # examples/guess_mt_grpo.yaml
        ],
    }
    (only,) = judged(row, suite, range(1, 4))
    assert only.pair == ("multiturn", "mt_grpo") and only.status == "dropped"
    assert only.race == PairedInterval(0.02, 0.01, 0.03, 5) and only.call == 1
    assert only.truth == paired_difference({1: 0.86, 2: 0.87, 3: 0.88}, {1: 0.8, 2: 0.8, 3: 0.8})
    assert only.clear and only.sign_right


def test_the_score_table_pools_the_races_and_states_the_compute_ratios():
    suite = [
        _suite_row("sparse", e, s, 0.5 + (0.02 + 0.001 * s) * (e == "maxrl"))
        for e in ("grpo", "maxrl")
        for s in range(1, 21)
    ]
    keep = {("sparse", "maxrl"): [("sparse", "maxrl")]}

    def race(block: list[int], low: float, trained: int) -> dict:
        verdict = {"arm": "maxrl", "status": "finished", "mean": low + 0.01, "low": low, "high": low + 0.02, "n": 5}
        return {"task": "sparse", "seeds": block, "verdicts": [verdict], "compute": {"trained": trained, "full": 1000}}

    rows = [race([11, 15], 0.001, 250), race([16, 20], -0.005, 200)]  # a right call, then no call of the right sign
    lines = score_table(rows, suite, keep).splitlines()
    assert lines[2] == "| seeds 11-15 | 1 | 1 of 1 | 1 | 0 | 0 | 0 | 25.0% | 6.2% | chooses |"
    # 200 of the 1000 updates of the same arms and seeds; of 1000 * 20 / 5 = 4000 for the 20-seed comparison
    assert lines[3] == (
        "| seeds 16-20 | 1 | 1 of 1 | 0 | 0 | 0 | 0 | 20.0% | 5.0% "
        "| does not choose: right calls on 0 of 1 clear pairs, under 75% |"
    )
    assert lines[4].startswith(
        "| both | 2 | 2 of 2 | 1 | 0 | 0 | 0 | 22.5% | 5.6% | does not choose: right calls on 1 of 2"
    )


def test_the_train_check_counts_arm_seeds_whose_window_repeats_the_suite_run():
    suite = [_suite_row("sparse", "maxrl", 11, 0.5, [0.1, 0.2, 0.3]), _suite_row("sparse", "grpo", 11, 0.5, [0.1, 0.2])]
    row = {
        "task": "sparse",
        "train_rewards": {
            "maxrl": {"11": [0.1, 0.2], "12": [0.0]},  # seed 12 has no suite row: not checked
            "grpo": {"11": [0.1, 0.25]},
        },
    }
    assert train_check([row], suite).startswith("1 of 2 race arm-seeds trained exactly as")


SUITE_RACES = [r for r in bench_rows.read(race_evidence.RESULTS) if r.get("race") == "suite"]


def test_the_committed_races_are_the_rules_races():
    assert sorted((r["task"], tuple(r["seeds"])) for r in SUITE_RACES) == sorted(
        (task, block) for task in race_evidence.TASKS for block in race_evidence.BLOCKS
    )
    for r in SUITE_RACES:
        task, argv = r["task"], r["argv"]
        assert r["updates"] == race_evidence.updates_of(task) == int(r["full_updates"] * 0.25)
        assert r["full_updates"] == race_evidence.TASKS[task].steps
        assert [g["updates"] for g in r["rungs"]] == [r["updates"] // 2, r["updates"]]
        assert argv[argv.index("--metric") + 1] == "train_reward" and "actor.kl_ctl=0" in argv
        assert argv[argv.index("--seeds") + 1] == "{}-{}".format(*r["seeds"])
        assert ("--seed-fields" in argv) == (task in ("multiturn", "noisy_process"))
        arms = [estimator_of(v["arm"]) for v in r["verdicts"]]
        assert arms == list(race_evidence.TASKS[task].estimators) and r["verdicts"][0]["status"] == "baseline"
        assert r["compute"]["trained"] <= r["compute"]["full"] // 4


@pytest.mark.parametrize("row", SUITE_RACES, ids=lambda r: "{}-{}-{}".format(r["task"], *r["seeds"]))
def test_each_verdict_is_the_paired_interval_of_its_arms_values_at_its_last_rung(row):
    values: dict[tuple[str, int], dict[int, float]] = {}
    for v in row["values"]:
        values.setdefault((v["arm"], v["updates"]), {})[v["seed"]] = v["value"]
    dropped = {arm: g["updates"] for g in row["rungs"] for arm in g["dropped"]}
    for v in row["verdicts"][1:]:
        assert (v["status"] == "dropped") == (v["arm"] in dropped)
        assert v["updates"] == dropped.get(v["arm"], row["updates"])
        want = paired_difference(values[(v["arm"], v["updates"])], values[("grpo", v["updates"])])
        assert (v["mean"], v["low"], v["high"], v["n"]) == pytest.approx((want.mean, want.low, want.high, 5))
        # a window's value is the mean of its train rewards (rounded to 6 places in the row)
        for seed, value in values[(v["arm"], v["updates"])].items():
            rewards = row["train_rewards"][v["arm"]][str(seed)][: v["updates"]]
            assert value == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)


def test_the_smollm2_race_is_the_rules_race_and_its_verdicts_are_in_the_block():
    (row,) = [r for r in bench_rows.read(race_evidence.RESULTS) if r.get("race") == "smollm2"]
    argv = row["argv"]
    assert argv[2] == race_evidence.SMOLLM2["config"]
    assert argv[argv.index("--updates") + 1] == "7" and argv[argv.index("--seeds") + 1] == "4-8"
    assert [v["arm"] for v in row["verdicts"]] == ["grpo", "maxrl", "rloo"]
    assert row["compute"]["trained"] == 3 * 5 * 7
    table = smollm2_text([row])[0].splitlines()
    assert [line.split(" | ")[0] for line in table[2:]] == ["| maxrl", "| rloo"]
    for line, v in zip(table[2:], row["verdicts"][1:]):
        assert f"{v['mean']:+.3f} [{v['low']:+.3f}, {v['high']:+.3f}]" in line


def test_the_docs_block_is_what_the_committed_rows_give():
    from bench.suite.estimator_suite import RESULTS, current_rows

    rows = bench_rows.read(race_evidence.RESULTS)
    committed = bench_rows.block(ROOT / "docs" / "benchmarks.md", BLOCK)
    assert committed == report_text(rows, current_rows(bench_rows.read(RESULTS)), race_evidence.RESULTS)
