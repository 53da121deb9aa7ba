"""The PPO update: minibatches and optimiser steps, the policy and value losses, the critic.

Holds `update` (`ppo_update`, minibatch plans), `loss` (clipped, dual-clip and
decoupled PPO losses, value loss) and `critic` (`PPOCritic`). It may import
`areal_adv.trainer.parallel`, `areal_adv.api` and `areal_adv.utils`, never the advantage
pipeline: advantages arrive as tensors in the batch.
"""
