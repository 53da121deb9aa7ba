"""Estimator diagnostics: other estimators' advantages measured on the batches a run trains on.

One package for the three places that measure: the trainer (each due step's batch,
through the step observers in `areal_adv.trainer.run.diagnostics_observers`),
`areal-adv diagnose` (the batches a run saved, `areal_adv.trainer.run.diagnose`) and the
engines (AReaL, verl and TRL, `areal_adv.integrations`). They share the shadow estimators
(`shadow_estimators`), the metrics (`diagnostic_metrics`, `gradient_probe`) and the saved
rollouts (`rollout_store`), so a number means the same wherever it is logged.

It sits below `areal_adv.trainer.run` (which builds the observers and the command around it)
and above `areal_adv.trainer.rollout`, whose behaviour statistics it reads. It may import
`areal_adv.trainer.rollout`, `areal_adv.trainer.ppo`, `areal_adv.trainer.parallel`,
`areal_adv.trainer.lm`, `areal_adv.api` and `areal_adv.utils`, never `areal_adv.trainer.run`:
the engines import it without the trainer's loop.
"""
