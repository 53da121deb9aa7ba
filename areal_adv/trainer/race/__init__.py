"""Races of estimators: short paired runs of candidate estimators from one start, the clearly worse dropped early.

`areal-adv race` trains every candidate estimator (the same run otherwise,
`areal_adv.api.estimator_algorithm`'s rule) on the same seeds for a short
window, in rungs, and between rungs drops the arms a paired test shows worse;
`areal-adv race --compare` reads runs made elsewhere (our `metrics.jsonl`,
TensorBoard event files of verl, TRL and AReaL) and gives the same verdict.

Modules: `race_spec` (what a race is, its declaration file), `arms` (each arm's
config and run directory), `arm_runs` (training arms to a rung through the
trainer's entry point), `series` (reading a run's metrics), `racing` (the paired
statistics and the elimination), `verdicts` (words, table, rows), `race_plot`,
`compare_runs` and `race_command` (the command line). It treats the trainer as a
black box: configs in, run directories out. It may import `areal_adv.trainer.run`
and everything below it; only `areal_adv.cli` imports it.
"""
