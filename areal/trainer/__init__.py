"""The trainer, as packages that import only downwards, in this order (top first):

`run` (the loop, start-up, checkpoints of a run, loggers, evaluation) >
`rollout` (tasks, episodes, reward functions, prompt data) > `ppo` (the advantage
pipeline, the PPO update) > `parallel` (torchrun, DDP/FSDP2 engines, failures) >
`lm` (models, tokenizers, sampling); all of them may import `areal.api` and
`areal.utils`. `main` is the entry point (`python -m areal.trainer.main`) above
them all. tests/test_layout.py checks the order.
"""

from areal.trainer.moved_paths import install as _install_moved_paths

_install_moved_paths()  # the modules' paths before the packages (areal.trainer.moved_paths)
