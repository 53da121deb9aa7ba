"""The advantage pipeline inside verl 0.9.x.

- `algorithm.adv_estimator=areal` works after `pip install areal-adv[verl]`: the
  `verl.plugins` entry point registers `areal_advantage` when verl is imported.
  The pipeline YAML is `+algorithm.areal_config=...` (or `$AREAL_VERL_CONFIG`).
- `compute_advantage` is a drop-in for verl's, for what the registry call does not
  pass (critic values, log-probs for the KL reward, turn ids, process rewards);
  `patch_compute_advantage()` puts it in place of verl's, and `compute_data_metrics`
  (verl's, plus the shadow estimators' `diagnostics/*`) in place of the trainer's.

See docs/integrations.md. verl itself is imported only when these are called.
"""

from areal_adv.integrations.verl.compute import (
    DIAGNOSTICS_KEY,
    compute_advantage,
    compute_data_metrics,
    patch_compute_advantage,
    verl_compute_advantage,
)
from areal_adv.integrations.verl.estimator import (
    CONFIG_KEY,
    ENV_CONFIG,
    ESTIMATOR_NAME,
    OVERRIDES_KEY,
    areal_advantage,
    register,
    resolve_pipeline,
)
from areal_adv.integrations.verl.layout import from_data_proto, from_registry_call

__all__ = [
    "CONFIG_KEY",
    "DIAGNOSTICS_KEY",
    "ENV_CONFIG",
    "ESTIMATOR_NAME",
    "OVERRIDES_KEY",
    "areal_advantage",
    "compute_advantage",
    "compute_data_metrics",
    "from_data_proto",
    "from_registry_call",
    "patch_compute_advantage",
    "register",
    "resolve_pipeline",
    "verl_compute_advantage",
]
