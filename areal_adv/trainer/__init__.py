"""The trainer, as packages that import only downwards, in this order (top first):

`run` (the loop, start-up, checkpoints of a run, loggers, evaluation) >
`diagnostics` (other estimators measured on a run's batches: the trainer's, `areal-adv
diagnose`'s and the engines') > `rollout` (tasks, episodes, reward functions, prompt data) > `ppo` (the advantage
pipeline, the PPO update) > `parallel` (torchrun, DDP/FSDP2 engines, failures) >
`lm` (models, tokenizers, sampling); all of them may import `areal_adv.api` and
`areal_adv.utils`. `main` is the entry point (`python -m areal_adv.trainer.main`) above
them all, and `race` (races of estimators, `areal-adv race`) runs whole trainings
through it. tests/test_layout.py checks the order.
"""
