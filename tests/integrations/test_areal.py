"""areal-adv installed beside the real AReaL 1.0.4: names, AReaL's files, and the pipeline inside AReaL's actor.

The checks run in `.venv-areal` (scripts/setup_areal.sh: AReaL from the index, areal-adv with
`pip install -e .`), through tests/integrations/areal_checks.py; this module asserts on what they report.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from areal_venv import CHECKS, ROOT, ensure_venv, experiment_config, run_json

#: float32 round-off between two orders of the same sums (AReaL's loop GAE, our kernels)
TOL = 1e-6

pytestmark = pytest.mark.xdist_group("areal")


def documented_areal_paths() -> list[str]:
    """The dotted names in README and docs that exist only beside AReaL (tests/test_public_paths.py leaves them here)."""
    spec = importlib.util.spec_from_file_location("public_paths", ROOT / "tests" / "test_public_paths.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted({path for _, path in module.all_page_paths() if module.needs_areal(path)})


@pytest.fixture(scope="module")
def areal_venv() -> Path:
    return ensure_venv()


@pytest.fixture(scope="module")
def report(areal_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("areal")
    env = {**os.environ, "AREAL_ADV_HOOK_AREAL": "1"}  # the documented switch for every AReaL process
    args = [str(CHECKS), "all", str(experiment_config(tmp)), *documented_areal_paths()]
    (result,) = run_json(*args, cwd=tmp, env=env)
    return result


def test_installing_beside_areal_leaves_areal_as_it_was(report: dict) -> None:
    install = report["install"]
    assert install["version"] == "1.0.4" and install["files"] > 300
    assert install["changed"] == [], "AReaL files differ from its RECORD"
    assert install["areal_is_areal"] and install["areal_adv"] == "areal_adv"


def test_the_documented_names_that_need_areal_resolve_beside_it(report: dict) -> None:
    assert len(documented_areal_paths()) >= 3
    assert report["unresolved"] == []


def test_the_environment_switch_installs_the_hook_when_areal_loads_its_actor(report: dict) -> None:
    assert report["install"]["hook_installed_at_import"]


def test_the_environment_switch_also_works_when_the_integration_is_imported_first(
    areal_venv: Path, tmp_path: Path
) -> None:
    """The documented script imports `areal_adv.integrations.areal` first, which loads AReaL's actor mid-import."""
    code = (
        "import json\nimport areal_adv.integrations.areal as adv\nprint(json.dumps({'installed': adv.installed()}))\n"
    )
    env = {**os.environ, "AREAL_ADV_HOOK_AREAL": "1"}
    assert run_json("-", cwd=tmp_path, stdin=code, env=env) == [{"installed": True}]


def test_beside_areal_the_seed_path_is_ours_and_the_shared_paths_are_areal_s(report: dict) -> None:
    install = report["install"]
    assert install["same_class"], "areal.trainer.ppo.advantage.OutcomeRewardInputs is not areal_adv's"
    assert install["shared_are_areal"] == [True] * 4
    assert install["shared_fields"], "SHARED_FIELDS is not the 21 actor fields both configs have"


@pytest.mark.parametrize("config", ["default", "grpo", "ppo"])
def test_the_hook_equals_areal_s_own_computation(report: dict, config: str) -> None:
    worst = report[f"equal_{config}"]
    assert {"advantages", "returns", "kl_rewards", "tot_rewards", "loss_mask", "logprobs"} <= set(worst)
    assert max(worst.values()) <= TOL, worst


def test_variable_group_sizes_are_normalised_per_prompt(report: dict) -> None:
    """AReaL's fixed group size mixes prompts; ours equals AReaL's own computation run on each group alone."""
    ours, areal = report["variable_groups"]["ours_vs_per_group"], report["variable_groups"]["areal_vs_per_group"]
    assert max(ours.values()) <= TOL, ours
    assert areal["advantages"] > 0.1, "the batch does not show the difference it is built to show"


def test_a_plugin_named_by_its_areal_path_runs_inside_areal_s_actor(report: dict) -> None:
    plugin = report["plugin"]
    assert plugin["calls"] == ["areal_adv.trainer.ppo.stage_types"]
    assert max(plugin["diff"].values()) <= TOL and plugin["rewards_vs_half"] <= TOL, plugin


def test_areal_s_loader_takes_actor_advantage_with_the_subclass(report: dict) -> None:
    loaded = report["config_loader"]
    assert loaded["refused"] == "ConfigKeyError", "AReaL's own GRPOConfig accepted actor.advantage"
    assert loaded["actor_class"] == "AdvPPOActorConfig"
    assert loaded["outcome"] == ["examples.custom_advantage.plugins.scale_outcome", {"factor": 0.5}]
    assert loaded["kl_ctl"] == 0.0 and loaded["reward_norm"] == ["group", 4]


def test_two_ranks_share_batch_statistics_as_areal_does(areal_venv: Path, tmp_path: Path) -> None:
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    ranks = sorted(run_json(*torchrun, str(CHECKS), "two_ranks", "grpo", cwd=tmp_path), key=lambda r: r["rank"])
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
