"""Import paths of the modules moved in 0.1.0: the old name loads the module at its new path.

Before the trainer was regrouped into packages (`run`, `rollout`, `parallel`,
`lm`; ppo's `checks`, `estimators`, `rewards`, `training`), user code and
earlier docs imported e.g. `areal.trainer.distributed.init_distributed` or
`areal.trainer.ppo.gdpo`. A finder on `sys.meta_path` (installed by
`areal.trainer`'s `__init__`) answers those names with the moved module itself
(the same object, so state and `isinstance` agree) and a DeprecationWarning
naming the new path. An alias module per old name would do the same, but would
put a second file of each name beside the real one (tests/test_layout.py allows
one). Two old modules cannot be aliased: `areal.trainer.rollout` and
`areal.trainer.ppo.rewards` are package names now (their contents are in
`rollout.episodes` and `ppo.rewards.scores`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

#: The release whose regrouping into packages moved these modules (the warning names it).
MOVED_IN = "0.1.0"
#: old module path -> new module path
MOVED: dict[str, str] = {
    **{f"areal.trainer.{m}": f"areal.trainer.lm.{m}" for m in ("codec", "logprobs", "model", "sampling", "tokenizer")},
    **{
        f"areal.trainer.{m}": f"areal.trainer.parallel.{m}"
        for m in ("checksum", "cpu_threads", "distributed", "engine", "failures", "launch_env", "peer_progress")
    },
    **{
        f"areal.trainer.{m}": f"areal.trainer.run.{m}"
        for m in (
            "dry_run",
            "error_report",
            "evaluation",
            "loggers",
            "metrics",
            "plot",
            "preflight",
            "progress",
            "run_dir",
            "task_setup",
            "trainer_state",
        )
    },
    "areal.trainer.trainer": "areal.trainer.run.loop",
    "areal.trainer.data": "areal.trainer.rollout.prompt_data",
    "areal.trainer.rewards": "areal.trainer.rollout.reward_functions",
    "areal.trainer.stage_fields": "areal.trainer.rollout.stage_fields",
    "areal.trainer.checkpoint": "areal.utils.checkpoint_folders",
    **{f"areal.trainer.ppo.{m}": f"areal.trainer.ppo.checks.{m}" for m in ("aux_fields", "batch_checks", "contracts")},
    **{
        f"areal.trainer.ppo.{m}": f"areal.trainer.ppo.estimators.{m}"
        for m in (
            "entropy_shaping",
            "gdpo",
            "lambda_fn",
            "peer_algorithms",
            "prompt_table",
            "stateful_baselines",
            "step_credit",
        )
    },
    "areal.trainer.ppo.reward_components": "areal.trainer.ppo.rewards.components",
    **{f"areal.trainer.ppo.{m}": f"areal.trainer.ppo.training.{m}" for m in ("critic", "loss", "update")},
}


class _MovedLoader(importlib.abc.Loader):
    """Hands out the module at its new path for the old name (nothing is executed twice)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new} in areal {MOVED_IN}; import it from there (the old "
            "path still works, with this warning)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran already, under its new name."""


class MovedPathFinder(importlib.abc.MetaPathFinder):
    """Finds only the old names in `MOVED`; every other import goes to the next finder."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _MovedLoader(new))


def install() -> None:
    """Put the finder on `sys.meta_path` once (after the standard finders: a real module always wins)."""
    if not any(isinstance(f, MovedPathFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedPathFinder())
