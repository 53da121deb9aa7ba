"""Batch metadata, batch concatenation, normalisation and KL estimators (the public module path).

`areal.utils.data` is the import path of these names in AReaL and in
the docs; each concern lives in a module of its own and is re-exported here:

* `areal.utils.batch_meta` - `TrajBatchMeta`, `RolloutGroup` (row -> prompt -> logical rollout layout);
* `areal.utils.concat` - `concat_batch` (per-prompt groups -> one padded batch and its metadata);
* `areal.utils.normalization` - `Normalization` (batch / group mean and std);
* `areal.utils.kl` - `KLEstimator`, `KL_ESTIMATORS`.
"""

from __future__ import annotations

from areal.utils.batch_meta import RolloutGroup, TrajBatchMeta
from areal.utils.concat import concat_batch
from areal.utils.kl import KL_ESTIMATORS, KLEstimator
from areal.utils.normalization import Normalization

__all__ = [
    "RolloutGroup",
    "TrajBatchMeta",
    "concat_batch",
    "Normalization",
    "KLEstimator",
    "KL_ESTIMATORS",
]
