"""One training run from start to end: the loop (`loop.Trainer`) and what surrounds it.

Holds the loop, task start-up (`task_setup`), the checks before launch
(`preflight`, `dry_run`), the kernel warm-up before step 0 (`kernel_warmup`), the run directory, what a checkpoint holds for a
trainer (`trainer_state`), metrics, loggers, plot, progress, held-out evaluation
and how a failed run ends (`error_report`). It is the top of the trainer: it may
import `areal.trainer.rollout`, `areal.trainer.ppo`, `areal.trainer.parallel`,
`areal.trainer.lm`, `areal.api` and `areal.utils`; only the entry point
(`areal.trainer.main`) and `areal.cli` import it.
"""
