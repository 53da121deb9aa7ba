"""The import paths besides `areal_adv.*` that keep working: the `areal.*` names and moved modules.

This package was specified as a feature of AReaL, at AReaL's module paths
(`areal.trainer.ppo.advantage`, `areal.api.cli_args`, ...), but `areal` is AReaL's
own name on the package index and in `sys.modules`. So the code lives in
`areal_adv`, and one finder, first on `sys.meta_path`, answers the other names:

* `areal` and `areal.X` resolve to `areal_adv` and `areal_adv.X`: the same module
  objects, so a plugin that imports `areal.trainer.ppo.advantage.OutcomeRewardInputs`
  gets our class and `isinstance` agrees. When AReaL is installed, every name that
  AReaL has stays AReaL's (the other finders are asked first), and only the names
  AReaL lacks resolve to ours.
* The module paths of releases before 0.1.0 (`areal.trainer.distributed`, ...; the
  table `MOVED`, in either spelling) resolve to the moved module, with a
  DeprecationWarning naming the new path.
* With `AREAL_ADV_HOOK_AREAL=1` in the environment, AReaL's actor module installs
  the areal-adv hook as it loads (docs/integrations.md, "Inside AReaL").

The finder is installed at interpreter start by `areal_adv.pth`, which the wheel and
the editable install put in site-packages (see setup.py), and again by
`import areal_adv` for a checkout used without installing. It imports nothing
but the standard library, so the start-up cost is small (docs/performance.md,
"Import paths").
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys

TYPE_CHECKING = False  # `typing` costs about 3 ms at start; type checkers read the block below
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import CodeType, ModuleType

#: The top-level name the pipeline was specified under (AReaL's), and ours.
SEED = "areal"
OURS = "areal_adv"
#: The release whose regrouping into packages moved the modules of `MOVED` (the warning names it).
MOVED_IN = "0.1.0"


def _moved(old_package: str, new_package: str, names: Sequence[str]) -> dict[str, str]:
    return {f"{OURS}.{old_package}.{m}": f"{OURS}.{new_package}.{m}" for m in names}


#: old module path -> new module path (paths within `areal_adv`; the `areal.` spelling follows)
MOVED: dict[str, str] = {
    **_moved("trainer", "trainer.lm", ("codec", "logprobs", "model", "sampling", "tokenizer")),
    **_moved(
        "trainer",
        "trainer.parallel",
        ("checksum", "cpu_threads", "distributed", "engine", "failures", "launch_env", "peer_progress"),
    ),
    **_moved(
        "trainer",
        "trainer.run",
        ("dry_run", "error_report", "evaluation", "loggers", "metrics", "plot", "preflight", "progress", "run_dir")
        + ("task_setup", "trainer_state"),
    ),
    f"{OURS}.trainer.trainer": f"{OURS}.trainer.run.loop",
    f"{OURS}.trainer.data": f"{OURS}.trainer.rollout.prompt_data",
    f"{OURS}.trainer.rewards": f"{OURS}.trainer.rollout.reward_functions",
    f"{OURS}.trainer.stage_fields": f"{OURS}.trainer.rollout.stage_fields",
    f"{OURS}.trainer.checkpoint": f"{OURS}.utils.checkpoint_folders",
    **_moved("trainer.ppo", "trainer.ppo.checks", ("aux_fields", "batch_checks", "contracts")),
    **_moved(
        "trainer.ppo",
        "trainer.ppo.estimators",
        ("entropy_shaping", "gdpo", "lambda_fn", "peer_algorithms", "prompt_table", "stateful_baselines")
        + ("step_credit",),
    ),
    f"{OURS}.trainer.ppo.reward_components": f"{OURS}.trainer.ppo.rewards.components",
    **_moved("trainer.ppo", "trainer.ppo.training", ("critic", "loss", "update")),
}


#: AReaL's own module paths (AReaL 2) whose content lives here under a moved path: answered without the
#: deprecation warning, since a config written for AReaL names them (`actor.gae_lambda:
#: areal.trainer.ppo.lambda_fn.vapo_length_adaptive_gae`). Beside AReaL 2 they are AReaL's modules.
AREAL_NAMES: frozenset[str] = frozenset({f"{SEED}.trainer.ppo.lambda_fn"})

#: With this environment variable set to 1, AReaL's actor module installs the areal-adv hook as it loads
#: (`areal_adv.integrations.areal.install()`), in every process that inherits the variable.
HOOK_ENV = "AREAL_ADV_HOOK_AREAL"
#: AReaL's module whose `PPOActor.compute_advantages` the hook replaces.
AREAL_ACTOR = f"{SEED}.trainer.ppo.actor"


def our_name(name: str) -> str:
    """`areal.X` -> `areal_adv.X`; any other name unchanged."""
    return OURS + name[len(SEED) :] if name == SEED or name.startswith(SEED + ".") else name


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    import importlib.util  # here, not at the top: this module loads at every interpreter start

    return importlib.util.find_spec(name)


class _AliasLoader:
    """Hands out the module at `target` for the requested name; nothing is executed twice.

    The import system needs only these methods; subclassing `importlib.abc.Loader` would
    import `importlib.abc` (several milliseconds) at every interpreter start.
    """

    def __init__(self, target: str, warning: str | None) -> None:
        self.target = target
        self.warning = warning

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        if self.warning:
            import warnings

            warnings.warn(self.warning, DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran already, under its own name."""

    def get_code(self, fullname: str) -> CodeType | None:
        """The target's code, so that `python -m areal.X` runs `areal_adv.X` (runpy asks for it)."""
        spec = _find_spec(self.target)
        get_code = getattr(spec.loader, "get_code", None) if spec is not None else None
        return get_code(self.target) if get_code is not None else None

    def is_package(self, fullname: str) -> bool:
        spec = _find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None


class _HookAfterLoad:
    """AReaL's own loader of its actor module, then an import of the hook module, which installs itself
    under `HOOK_ENV` when it finishes loading (also when this import is what is loading it)."""

    def __init__(self, loader: object) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> object:
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)  # type: ignore[attr-defined, no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)  # type: ignore[attr-defined]
        # Not `install()` here: AReaL's actor may be loading because the hook module imports it, and the
        # half-loaded hook module has no `install` yet; it installs itself at its end.
        importlib.import_module(f"{OURS}.integrations.areal.hook")


class ImportPathFinder:
    """Answers `areal.*` names that no other finder has, and the moved paths; everything else passes."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED:
            new = MOVED[fullname]
            return self._alias(fullname, new, f"{fullname} moved to {new} in areal-adv {MOVED_IN}")
        if not (fullname == SEED or fullname.startswith(SEED + ".")):
            return None
        if not self._parent_is_ours(fullname):
            found = self._found_elsewhere(fullname, path, target)
            if found is not None and fullname == AREAL_ACTOR and os.environ.get(HOOK_ENV) == "1":
                found.loader = _HookAfterLoad(found.loader)  # type: ignore[assignment]
            if found is not None:
                return found  # AReaL's own module
        ours = our_name(fullname)
        new = MOVED.get(ours)
        if new is not None and fullname in AREAL_NAMES:
            return self._alias(fullname, new, None)
        if new is not None:
            return self._alias(fullname, new, f"{fullname} moved to {our_name(new)} in areal-adv {MOVED_IN}")
        if _find_spec(ours) is None:
            return None  # neither AReaL nor we have it: the usual ModuleNotFoundError names `fullname`
        return self._alias(fullname, ours, None)

    @staticmethod
    def _alias(fullname: str, target: str, warning: str | None) -> importlib.machinery.ModuleSpec:
        if warning:
            warning += "; import it from there (the old path still works, with this warning)"
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(target, warning))  # type: ignore[arg-type]

    @staticmethod
    def _parent_is_ours(fullname: str) -> bool:
        """True below an `areal` that is our alias: every name there is ours (no second copies)."""
        parent = sys.modules.get(fullname.rpartition(".")[0])
        return parent is not None and getattr(parent, "__name__", "").startswith(OURS)

    def _found_elsewhere(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        """The spec another finder gives `fullname` (a real AReaL module); a bare directory does not count."""
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None and not (spec.origin is None and spec.submodule_search_locations is not None):
                return spec
        return None


def install() -> None:
    """Put the finder first on `sys.meta_path`, once."""
    if not any(isinstance(f, ImportPathFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, ImportPathFinder())
