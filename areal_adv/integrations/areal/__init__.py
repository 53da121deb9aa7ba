"""The advantage pipeline inside AReaL's trainer (AReaL 1.0.4 from the package index, AReaL 2 from its source).

One line in the training script, before AReaL builds its actor, on every process that
runs one (with AReaL's SPMD launchers the script runs on every trainer rank):

    import areal_adv.integrations.areal as adv; adv.install()

Then load the experiment config with `AdvGRPOConfig` (or `AdvPPOConfig`) in place of
AReaL's class, so the YAML may carry `actor.advantage`. Importing this package imports
AReaL; see docs/integrations.md, "Inside AReaL".
"""

import importlib

if importlib.import_module("areal").__name__ != "areal":
    # Without AReaL, `areal` is our own package under AReaL's name (areal_adv.import_paths).
    raise ImportError(
        "areal_adv.integrations.areal: AReaL is not installed (`import areal` gives areal-adv's own alias); "
        "expected AReaL 1.0.4 (pip install areal==1.0.4) or AReaL 2 from its source tree"
    )

from areal_adv.integrations.areal.experiment_configs import (
    EXTRA_FIELDS,
    SHARED_FIELDS,
    AdvGRPOConfig,
    AdvPPOActorConfig,
    AdvPPOConfig,
    areal_config_to_ours,
)
from areal_adv.integrations.areal.hook import compute_advantages, install, installed, uninstall

__all__ = [
    "EXTRA_FIELDS",
    "SHARED_FIELDS",
    "AdvGRPOConfig",
    "AdvPPOActorConfig",
    "AdvPPOConfig",
    "areal_config_to_ours",
    "compute_advantages",
    "install",
    "installed",
    "uninstall",
]
