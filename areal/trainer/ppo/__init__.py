"""The advantage pipeline and the PPO update.

Holds the orchestration of the pipeline (`advantage`, the seed's path, with
`actor.PPOActor`), its stage types, checks and estimators, the GAE kernels
(`kernels`) and the PPO update, loss and critic. It may import
`areal.trainer.parallel`, `areal.trainer.lm`, `areal.api` and `areal.utils`;
`areal.trainer.rollout`, `areal.trainer.run` and the integrations import it.
"""
