"""areal-adv installed beside the real AReaL: names, AReaL's files, and the pipeline inside AReaL's actor.

Every test runs beside AReaL 1.0.4 from the package index (`.venv-areal`, scripts/setup_areal.sh) and, when
`AREAL_SOURCE` names an AReaL source tree, beside that tree too (`.venv-areal-source`; AReaL 2 and later, which
the index does not serve: opt-in, as building it needs the tree and the package index). The checks run in
those venvs through tests/integrations/areal_checks.py (and areal2_checks.py); this module asserts on what they
report. Without AReaL, tests/integrations/test_areal2_layout.py covers AReaL 2's layouts against plain loops.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
from areal_venv import CHECKS, ROOT, SOURCE_ENV, ensure_venv, experiment_config, run_json

#: float32 round-off between two orders of the same sums (AReaL's loop GAE, our kernels)
TOL = 1e-6
#: the same, through AReaL 2's turn and λ loops and the plain reference (measured up to 7.2e-7)
TOL_AREAL2 = 1e-5

pytestmark = pytest.mark.xdist_group("areal")

KINDS = [
    "release",
    pytest.param(
        "source",
        marks=pytest.mark.skipif(
            not os.environ.get(SOURCE_ENV), reason=f"{SOURCE_ENV} names no AReaL source tree (opt-in)"
        ),
    ),
]


def _public_paths():
    spec = importlib.util.spec_from_file_location("public_paths", ROOT / "tests" / "test_public_paths.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_areal_paths(kind: str = "release") -> list[str]:
    """The dotted names to resolve beside AReaL: those in README and docs that exist only beside AReaL
    (tests/test_public_paths.py leaves them here); beside a source tree every documented `areal.*` name."""
    module = _public_paths()
    if kind == "release":
        return sorted({path for _, path in module.all_page_paths() if module.needs_areal(path)})
    seed = {path for path in module.SEED}
    return sorted(seed | {path for _, path in module.all_page_paths() if path.startswith("areal.")})


@pytest.fixture(scope="module", params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    ensure_venv(request.param)
    return request.param


@pytest.fixture(scope="module")
def report(kind: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp(f"areal-{kind}")
    env = {**os.environ, "AREAL_ADV_HOOK_AREAL": "1"}  # the documented switch for every AReaL process
    args = [str(CHECKS), "all", str(experiment_config(tmp)), *documented_areal_paths(kind)]
    (result,) = run_json(*args, cwd=tmp, env=env, kind=kind)
    return result


def test_installing_beside_areal_leaves_areal_as_it_was(kind: str, report: dict) -> None:
    install = report["install"]
    if kind == "source":
        assert install["areal_is_source"] and install["same_class"]
        assert int(install["version"].split(".")[0]) >= 2 and re.fullmatch(r"[0-9a-f]{40}", install["commit"])
        return
    assert install["version"] == "1.0.4" and install["files"] > 300
    assert install["changed"] == [], "AReaL files differ from its RECORD"
    assert install["areal_is_areal"] and install["areal_adv"] == "areal_adv"


def test_the_documented_names_resolve_beside_areal(kind: str, report: dict) -> None:
    if kind == "release":
        assert len(documented_areal_paths()) >= 3
        assert report["unresolved"] == []
        return
    paths = report["paths"]
    assert paths["undocumented"] == [] and paths["twins_missing"] == [], paths
    assert paths["ours"] >= 10
    assert {"areal.trainer.ppo.gae.compute_gae_lambda", "areal.trainer.ppo.lambda_fn"} <= set(paths["areal_documented"])


def test_the_environment_switch_installs_the_hook_when_areal_loads_its_actor(report: dict) -> None:
    assert report["install"]["hook_installed_at_import"]


def test_the_environment_switch_also_works_when_the_integration_is_imported_first(kind: str, tmp_path: Path) -> None:
    """The documented script imports `areal_adv.integrations.areal` first, which loads AReaL's actor mid-import."""
    code = (
        "import json\nimport areal_adv.integrations.areal as adv\nprint(json.dumps({'installed': adv.installed()}))\n"
    )
    env = {**os.environ, "AREAL_ADV_HOOK_AREAL": "1"}
    assert run_json("-", cwd=tmp_path, stdin=code, env=env, kind=kind) == [{"installed": True}]


def test_beside_areal_the_seed_path_is_ours_and_the_shared_paths_are_areal_s(kind: str, report: dict) -> None:
    install = report["install"]
    assert install["same_class"], "areal.trainer.ppo.advantage.OutcomeRewardInputs is not areal_adv's"
    if kind == "source":
        assert all(install["areal_modules_are_areal"]), install
        assert install["shared_fields"] == install["both_have"] and len(install["shared_fields"]) == 23
        assert {"gae_lambda_kwargs", "gae_timestep_unit"} <= set(install["shared_fields"])
        assert install["extra_fields"] == ["advantage", "token_rewards_as_adv"]
        return
    assert install["shared_are_areal"] == [True] * 4
    assert install["shared_fields"], "SHARED_FIELDS is not the 21 actor fields both configs have"


@pytest.mark.parametrize("config", ["default", "grpo", "ppo"])
def test_the_hook_equals_areal_s_own_computation(report: dict, config: str) -> None:
    worst = report[f"equal_{config}"]
    assert {"advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs"} <= set(worst)
    assert max(worst.values()) <= TOL, worst


def test_variable_group_sizes_are_normalised_per_prompt(kind: str, report: dict) -> None:
    """Ours equals AReaL's own computation run on each group alone. AReaL 1.0.4's fixed group size mixes
    prompts; AReaL 2 uses the real group sizes, as ours does."""
    ours, areal = report["variable_groups"]["ours_vs_per_group"], report["variable_groups"]["areal_vs_per_group"]
    assert max(ours.values()) <= TOL, ours
    if kind == "release":
        assert areal["advantages"] > 0.1, "the batch does not show the difference it is built to show"
    else:
        assert max(areal.values()) <= TOL, areal


def test_a_plugin_named_by_its_areal_path_runs_inside_areal_s_actor(report: dict) -> None:
    plugin = report["plugin"]
    assert plugin["calls"] == ["areal_adv.trainer.ppo.stage_types"]
    assert max(plugin["diff"].values()) <= TOL and plugin["rewards_vs_half"] <= TOL, plugin


def test_areal_s_loader_takes_actor_advantage_with_the_subclass(report: dict) -> None:
    loaded = report["config_loader"]
    assert loaded["refused"] == "ConfigKeyError", "AReaL's own GRPOConfig accepted actor.advantage"
    assert loaded["actor_class"] == "AdvPPOActorConfig"
    assert loaded["outcome"] == ["examples.custom_advantage.plugins.scale_outcome", {"factor": 0.5}]
    assert loaded["kl_ctl"] == 0.0 and loaded["reward_norm"] == ["group", "group"]
    assert loaded["areal_group_size"] == 4  # AReaL's field, as loaded (the hook uses the recorded groups instead)


def test_two_ranks_share_batch_statistics_as_areal_does(kind: str, tmp_path: Path) -> None:
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    ranks = run_json(*torchrun, str(CHECKS), "two_ranks", "grpo", cwd=tmp_path, kind=kind)
    ranks = sorted(ranks, key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1]
    assert not any(r["hooked_at_import"] for r in ranks), "the hook came without AREAL_ADV_HOOK_AREAL=1"
    for r in ranks:
        assert max(r["worst"].values()) <= TOL, r
        assert r["global_vs_local"] > 1e-3, "the two ranks' statistics were not shared"


def test_shadow_diagnostics_reach_areal_s_stats_tracker_and_leave_advantages_alone(report: dict) -> None:
    diagnostics = report["diagnostics"]
    expected = {
        f"diagnostics/{name}/{metric}"
        for name in ("active", "rloo", "maxrl")
        for metric in ("zero_adv_frac", "length_corr", "reward_rank_corr")
    }
    assert expected <= set(diagnostics["keys"]) and diagnostics["finite"]
    assert not any("/ppo/" in k or "noise_proxy" in k for k in diagnostics["keys"])  # no critic values, no Σπ²
    assert diagnostics["untracked"] == []
    assert max(diagnostics["vs_plain"].values()) == 0.0


# --- AReaL 2 and later (the source tree) ----------------------------------------------------------------


def _source_only(kind: str) -> None:
    if kind != "source":
        pytest.skip("AReaL 2's layouts: beside the AReaL source tree (test_areal2_layout.py covers them without it)")


def test_the_hook_equals_areal_2_on_its_workflows_batches(kind: str, report: dict) -> None:
    """Every case of areal2_reference.CASES (configs, λ functions both ways, turn GAE, variable groups), on
    batches joined by AReaL's own concat_padded_tensors: the hook against AReaL's own method."""
    _source_only(kind)
    cases = report["workflow_cases"]
    assert len(cases) >= 15
    for name, worst in cases.items():
        assert {"advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs"} <= set(worst), name
        assert max(worst.values()) <= TOL_AREAL2, (name, worst)


def test_the_plain_loop_reference_is_areal_2_s_behaviour(kind: str, report: dict) -> None:
    """The reference the suite uses without AReaL (test_areal2_layout.py) against AReaL itself."""
    _source_only(kind)
    for name, worst in report["reference_vs_areal"].items():
        assert max(worst.values()) <= TOL_AREAL2, (name, worst)


def test_our_lambda_functions_are_areal_s_bit_for_bit(kind: str, report: dict) -> None:
    _source_only(kind)
    functions = report["lambda_functions"]
    assert len(functions["bitwise"]) >= 10 and all(functions["bitwise"].values()), functions["bitwise"]
    assert functions["areal_keys"] == ["effective_token_lengths", "timestep_lengths", "turn_counts"]
    assert all(all(unit.values()) for unit in functions["contexts"].values()), functions["contexts"]
