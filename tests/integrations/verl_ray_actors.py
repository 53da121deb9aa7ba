"""Ray actors for test_verl_ray.py: verl's advantage step run inside a Ray worker process.

Imported by the workers by module name (the test puts this folder on their
PYTHONPATH). Each actor does what verl's trainer does at its advantage step:
look `compute_advantage` up as a global of `verl.trainer.ppo.ray_trainer` at
call time and call it with the `algorithm` section as `config`.
"""

from __future__ import annotations

import os
from typing import Any

import ray
import torch
from verl.trainer.main_ppo import TaskRunnerV1

from areal_adv.integrations.verl import patch_compute_advantage, verl_compute_advantage

PATCHED_MODULES = ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils")


def advantage_step(data: Any, algorithm: Any) -> dict[str, Any]:
    """The trainer's call (a module-global lookup), its outputs, and which function answered, in this process."""
    from verl.trainer.ppo import ray_trainer

    function = ray_trainer.compute_advantage
    out = function(
        data,
        adv_estimator=algorithm.adv_estimator,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        config=algorithm,
    )
    return {
        "advantages": out.batch["advantages"].clone(),
        "returns": out.batch["returns"].clone(),
        "function": f"{function.__module__}.{function.__qualname__}",
        "pid": os.getpid(),
    }


@ray.remote(num_cpus=1)
def advantage_task(data: Any, algorithm: Any) -> dict[str, Any]:
    """A plain Ray task (in one of the job's pooled workers): the job's setup hook is all it has."""
    return advantage_step(data, algorithm)


def _unhook() -> str:
    """Put verl's own `compute_advantage` back, as in a worker of a job started without the setup hook."""
    import importlib

    from verl.trainer.ppo import ray_trainer

    own = verl_compute_advantage()
    for name in PATCHED_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if getattr(module, "compute_advantage", None) is not None:
            module.compute_advantage = own
    return f"{ray_trainer.compute_advantage.__module__}.{ray_trainer.compute_advantage.__qualname__}"


@ray.remote(num_cpus=0)
class ArealTaskRunner(TaskRunnerV1.__ray_actor_class__):  # Ray refuses a subclass of the actor class itself
    """verl's TaskRunnerV1 with the `run` prologue docs/integrations.md gives (`patch_compute_advantage()` first).

    After the prologue verl's `super().run(config)` would build the models and
    train; here the training is the advantage step alone, on the batch saved at
    `config.areal_test.batch`, and the result goes to `config.areal_test.out`
    (verl's `run_ppo` discards what `run` returns).
    """

    def run(self, config: Any) -> None:
        before = _unhook()  # this cluster runs the setup hook too (one Ray start for the test module)
        patch_compute_advantage()
        result = advantage_step(torch.load(config.areal_test.batch, weights_only=False), config.algorithm)
        torch.save({**result, "before": before}, config.areal_test.out)
