"""verl's advantage step inside Ray actors (a local, loopback-only Ray), both ways docs/integrations.md gives.

One Ray start for the module, with the job-level
`runtime_env.worker_process_setup_hook=areal_adv.integrations.verl.patch_compute_advantage`
(Ray runs that hook only for a whole job, never per actor). In it: a plain Ray
task, patched by the hook alone, and a `TaskRunnerV1` subclass launched by verl's own
`run_ppo`, whose `run` patches first (it undoes the hook before, so the patch is
its own). The PPO preset is the probe: it needs critic values and log-probs, which
only the wrapper reads, so verl's unpatched function refuses it. Every result
must equal, bit for bit, the same call in this (the driver's) process.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import ray
import torch
import verl_batches as vb
from omegaconf import OmegaConf

from areal_adv.api.cli_args import ConfigError
from areal_adv.integrations import verl as areal_verl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HOOK = "areal_adv.integrations.verl.patch_compute_advantage"
WRAPPER = "areal_adv.integrations.verl.compute.compute_advantage"
#: one local Ray (the `cluster` fixture) for the module: its tests stay on one pytest-xdist worker (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("verl_ray")


def algorithm(preset: str) -> object:
    """verl's `algorithm` section naming our pipeline (as in test_verl.py)."""
    return OmegaConf.create(
        {
            "adv_estimator": "areal",
            "gamma": 1.0,
            "lam": 1.0,
            "use_pf_ppo": False,
            "norm_adv_by_std_in_grpo": True,
            "areal_config": str(ROOT / "examples" / "presets" / f"{preset}.yaml"),
            "areal_overrides": [],
        }
    )


@pytest.fixture(scope="module")
def cluster():
    """A local Ray on 127.0.0.1, no dashboard, no usage report; the workers import the test helpers."""
    saved = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    path = os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": HOOK, "env_vars": {"PYTHONPATH": path}},
    )
    try:
        import verl_ray_actors

        yield verl_ray_actors
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("RAY_USAGE_STATS_ENABLED", None)
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = saved


def in_process(batch: vb.VerlBatch, preset: str) -> dict[str, torch.Tensor]:
    return areal_verl.compute_advantage(batch.proto(), adv_estimator="areal", config=algorithm(preset)).batch


def assert_equal(got: dict, batch: vb.VerlBatch, preset: str) -> None:
    expected = in_process(batch, preset)
    assert torch.equal(got["advantages"], expected["advantages"])
    assert torch.equal(got["returns"], expected["returns"])


def test_setup_hook_patches_verl_in_a_ray_worker(cluster):
    batch = vb.make_batch(3, [3, 2, 4])
    ppo = ray.get(cluster.advantage_task.remote(batch.proto(), algorithm("ppo")))  # values + KL: the wrapper only
    assert ppo["function"] == WRAPPER and ppo["pid"] != os.getpid()
    assert_equal(ppo, batch, "ppo")
    grpo = ray.get(cluster.advantage_task.remote(batch.proto(), algorithm("grpo")))  # the registry path, through it
    assert_equal(grpo, batch, "grpo")


def test_task_runner_subclass_patches_verl_when_run_by_run_ppo(cluster, tmp_path):
    from verl.trainer.main_ppo import run_ppo

    batch = vb.make_batch(7, [2, 5, 3])
    torch.save(batch.proto(), tmp_path / "batch.pt")
    config = OmegaConf.create(
        {  # what run_ppo reads before it starts the runner, then the runner's own keys
            "actor_rollout_ref": {"rollout": {"full_determinism": False}},
            "reward": {"reward_model": {"enable": False, "rollout": {"full_determinism": False}}},
            "trainer": {"logger": []},
            "global_profiler": {"tool": None},
            "ray_kwargs": {},
            "algorithm": algorithm("ppo"),
            "areal_test": {"batch": str(tmp_path / "batch.pt"), "out": str(tmp_path / "out.pt")},
        }
    )
    run_ppo(config, task_runner_class=cluster.ArealTaskRunner)
    got = torch.load(tmp_path / "out.pt", weights_only=False)
    assert got["before"] == "verl.trainer.ppo.ray_trainer.compute_advantage"  # verl's own until run patched it
    assert got["function"] == WRAPPER and got["pid"] != os.getpid()
    assert_equal(got, batch, "ppo")


def test_unpatched_verl_refuses_the_wrapper_only_preset_in_process():
    """The probe is a real one: verl's own function (the registry call) cannot run the PPO preset."""
    batch = vb.make_batch(3, [3, 2, 4])
    with pytest.raises(ConfigError, match="registry call passes no critic values"):
        areal_verl.verl_compute_advantage()(batch.proto(), adv_estimator="areal", config=algorithm("ppo"))
