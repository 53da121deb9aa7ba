"""The PPO update: minibatches and optimiser steps, the policy and value losses, the critic.

Holds `update` (`ppo_update`, minibatch plans), `loss` (clipped, dual-clip and
decoupled PPO losses, value loss) and `critic` (`PPOCritic`). It may import
`areal.trainer.parallel`, `areal.api` and `areal.utils`, never the advantage
pipeline: advantages arrive as tensors in the batch.
"""
