"""The outcome reward step of the pipeline: reward components, length penalty, scaling, normalisation.

Holds the K reward components of a multi-reward batch and their weighted sum
(`components`) and the outcome-score steps on the [B] reward: overlong penalty,
scaling and clipping, group/batch normalisation, the logical group layout
(`scores`). It may import `areal.trainer.ppo.checks`, the stage types at
`areal.trainer.ppo`'s top level, `areal.api` and `areal.utils`; the estimators
and the orchestrator import it.
"""
