"""What the pipeline checks on its way: the batch, each stage's result, the extra fields stages read.

Holds the batch checks (`batch_checks`: structure, values, metadata), the stage
contracts (`contracts`: a stage's result against its declared type and the
batch) and the fields a stage declares it reads (`aux_fields`). It may import the
stage types and GAE primitives at `areal_adv.trainer.ppo`'s top level (`stage_types`,
`gae`), `areal_adv.trainer.ppo.kernels`, `areal_adv.api` and `areal_adv.utils`, nothing that
runs stages.
"""
