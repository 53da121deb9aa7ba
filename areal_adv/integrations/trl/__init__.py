"""The advantage pipeline inside TRL 1.16: `AReaLGRPOTrainer`.

Importing this package imports `trl`; see docs/integrations.md. `AReaLGRPOTrainer` hooks into
`GRPOTrainer`'s internals (`_calculate_rewards`, `_generate_and_score_completions`, `eos_token_ids`),
which changed across TRL releases, so an older TRL is refused at import with the version to install.
"""

import trl
from packaging.version import Version

from areal_adv.api.extras import install_hint

#: The oldest TRL release `AReaLGRPOTrainer` runs on (the one the tests pin; older ones lack or change the
#: internals it hooks into).
MINIMUM_TRL = "1.16.0"


def require_trl(version: str) -> None:
    """ImportError naming the minimum version when `version` is older."""
    if Version(version) < Version(MINIMUM_TRL):
        raise ImportError(
            f"areal_adv.integrations.trl: trl {version} is installed, expected trl >= {MINIMUM_TRL} (AReaLGRPOTrainer "
            f"hooks into GRPOTrainer internals that older releases lack or differ in); {install_hint('trl')}"
        )


require_trl(trl.__version__)

from areal_adv.integrations.trl.advantages import GatheredRollouts, group_advantages, process_rows  # noqa: E402
from areal_adv.integrations.trl.trainer import AReaLGRPOTrainer, TokenRewardFunc  # noqa: E402

__all__ = [
    "MINIMUM_TRL",
    "AReaLGRPOTrainer",
    "GatheredRollouts",
    "TokenRewardFunc",
    "group_advantages",
    "process_rows",
    "require_trl",
]
