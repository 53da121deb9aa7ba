"""The outcome reward step of the pipeline: reward components, length penalty, scaling, normalisation.

Holds the K reward components of a multi-reward batch and their weighted sum
(`components`) and the outcome-score steps on the [B] reward: overlong penalty,
scaling and clipping, group/batch normalisation, the logical group layout
(`scores`). It may import `areal_adv.trainer.ppo.checks`, the stage types at
`areal_adv.trainer.ppo`'s top level, `areal_adv.api` and `areal_adv.utils`; the estimators
and the orchestrator import it.
"""
