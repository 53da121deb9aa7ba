"""The advantage pipeline inside other training engines.

- `areal.integrations.verl`: the `areal` estimator in verl's advantage-estimator
  registry (loaded through verl's `verl.plugins` entry points) and a drop-in
  wrapper of verl's `compute_advantage` for critic and turn-level GAE.
- `areal.integrations.trl`: `AReaLGRPOTrainer`, a `trl.GRPOTrainer` whose
  advantages come from the pipeline.

Nothing here is imported by `import areal`; each adapter imports its engine only
when it is used, so the core package never needs verl or TRL installed.
"""
