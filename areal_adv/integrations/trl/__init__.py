"""The advantage pipeline inside TRL 1.16: `AReaLGRPOTrainer`.

Importing this package imports `trl`; see docs/integrations.md.
"""

from areal_adv.integrations.trl.advantages import GatheredRollouts, group_advantages, process_rows
from areal_adv.integrations.trl.trainer import AReaLGRPOTrainer, TokenRewardFunc

__all__ = ["AReaLGRPOTrainer", "GatheredRollouts", "TokenRewardFunc", "group_advantages", "process_rows"]
