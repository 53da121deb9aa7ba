"""Batch metadata, batch concatenation, normalisation and KL estimators (the public module path).

`areal_adv.utils.data` is the import path of these names in AReaL and in
the docs; each concern lives in a module of its own and is re-exported here:

* `areal_adv.utils.batch_meta` - `TrajBatchMeta`, `RolloutGroup` (row -> prompt -> logical rollout layout);
* `areal_adv.utils.concat` - `concat_batch` (per-prompt groups -> one padded batch and its metadata);
* `areal_adv.utils.normalization` - `Normalization` (batch / group mean and std);
* `areal_adv.utils.kl` - `KLEstimator`, `KL_ESTIMATORS`.
"""

from __future__ import annotations

from areal_adv.utils.batch_meta import RolloutGroup, TrajBatchMeta
from areal_adv.utils.concat import concat_batch
from areal_adv.utils.kl import KL_ESTIMATORS, KLEstimator
from areal_adv.utils.normalization import Normalization

__all__ = [
    "RolloutGroup",
    "TrajBatchMeta",
    "concat_batch",
    "Normalization",
    "KLEstimator",
    "KL_ESTIMATORS",
]
