"""One training run from start to end: the loop (`loop.Trainer`) and what surrounds it.

Holds the loop, task start-up (`task_setup`), the checks before launch
(`preflight`, `dry_run`), the kernel warm-up before step 0 (`kernel_warmup`), the run directory, what a checkpoint holds for a
trainer (`trainer_state`), metrics, loggers, plot, progress, held-out evaluation,
how a failed run ends (`error_report`), the step observers (`step_observers`; the
diagnostics' in `diagnostics_observers`) and the `areal-adv diagnose` command (`diagnose`).
It is the top of the trainer: it may import `areal_adv.trainer.diagnostics`,
`areal_adv.trainer.rollout`, `areal_adv.trainer.ppo`, `areal_adv.trainer.parallel`,
`areal_adv.trainer.lm`, `areal_adv.api` and `areal_adv.utils`; only the entry point
(`areal_adv.trainer.main`) and `areal_adv.cli` import it.
"""
