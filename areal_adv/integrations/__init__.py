"""The advantage pipeline inside other training engines.

- `areal_adv.integrations.verl`: the `areal` estimator in verl's advantage-estimator
  registry (loaded through verl's `verl.plugins` entry points) and a drop-in
  wrapper of verl's `compute_advantage` for critic and turn-level GAE.
- `areal_adv.integrations.trl`: `AReaLGRPOTrainer`, a `trl.GRPOTrainer` whose
  advantages come from the pipeline.
- `areal_adv.integrations.areal`: AReaL's `PPOActor.compute_advantages` (1.0.4 and 2)
  computed by the pipeline (`install()`), and AReaL experiment configs that take
  `actor.advantage`; `areal_bridge` is the part of it that needs no AReaL import.

Nothing here is imported by `import areal_adv`; each adapter imports its engine only
when it is used, so the core package never needs verl, TRL or AReaL installed. The
shadow estimators' diagnostics inside the engines are `areal_adv.trainer.diagnostics`'s
(`engine_shadows`), the trainer's own; nothing here imports the trainer's loop
(`areal_adv.trainer.run`).
"""
