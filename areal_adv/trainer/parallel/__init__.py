"""The processes of a run and what they share: torchrun, DDP/FSDP2 engines, failures.

Holds the torch.distributed launch context and group dispatch (`distributed`),
the policy and value engines on DDP or FSDP2 (`engine`), the failure protocol
(`failures`, `peer_progress`), thread counts (`cpu_threads`, `launch_env`) and
weight checksums (`checksum`). It may import `areal_adv.trainer.lm`, `areal_adv.api` and
`areal_adv.utils` only: the PPO update and the run loop sit above it.
"""
