"""`train.debug_param_checksum`: every rank's model checksums after each step, one JSON line per step.

The ranks of a data-parallel run must hold the same weights after every update; a line of
`param_checksums.jsonl` lists each model's sha256 on every rank (`module_checksum`), so a
divergence is seen at the step it happens. Hashing a sharded module and gathering the
digests are collectives: every rank runs this, rank 0 writes.
"""

from __future__ import annotations

import json
from typing import IO

from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.parallel.checksum import module_checksum
from areal_adv.trainer.parallel.distributed import all_gather_objects
from areal_adv.trainer.run.step_observers import Observation, Phase, StepObserver, StepServices, StepView, step_observer

__all__ = ["CHECKSUM_FILE", "ParameterChecksums"]

CHECKSUM_FILE = "param_checksums.jsonl"


@step_observer(enabled=lambda cfg: cfg.train.debug_param_checksum)
class ParameterChecksums(StepObserver):
    """After the step's row is logged: the checksums of the policy, the reference, the critic and the sampling copy."""

    name = "parameter checksums"
    phase = Phase.LOGGED

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        self.services = services
        self.file: IO[str] | None = None

    def observe(self, view: StepView) -> Observation:
        services = self.services
        mine = {name: module_checksum(m) for name, m in services.models().items() if m is not None}
        ranks = all_gather_objects(mine, services.ctx)
        if services.ctx.is_main:
            if self.file is None:  # opened on the first step, after the run directory is prepared
                self.file = (services.run_dir / CHECKSUM_FILE).open("a", encoding="utf-8")
            self.file.write(json.dumps({"step": view.step, **{name: [r[name] for r in ranks] for name in mine}}) + "\n")
            self.file.flush()
        return Observation()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
