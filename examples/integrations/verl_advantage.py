"""The areal estimator inside verl's own `compute_advantage`, on a DataProto built by hand (CPU, no Ray).

    .venv/bin/python examples/integrations/verl_advantage.py

Three prompts, four responses each, a reward-manager score at each response's last
token; critic values and log-probs as verl's workers would add them. `import verl`
registers `adv_estimator=areal` through the `verl.plugins` entry point.
"""

from __future__ import annotations

import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.ray_trainer import compute_advantage

from areal_adv.integrations.verl import compute_advantage as areal_compute_advantage


def rollout_batch(seed: int = 0, width: int = 8) -> DataProto:
    gen = torch.Generator().manual_seed(seed)
    uid = np.array([f"prompt-{i // 4}" for i in range(12)], dtype=object)
    lengths = torch.randint(2, width + 1, (12,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    scores = torch.zeros(12, width)
    scores[torch.arange(12), lengths - 1] = torch.randint(0, 2, (12,), generator=gen).float()
    old = -torch.rand(12, width, generator=gen) * mask
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones(12, 4), mask], 1).long(),
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "values": torch.randn(12, width, generator=gen) * mask,
            "old_log_probs": old,
            "ref_log_prob": old + 0.1 * torch.randn(12, width, generator=gen) * mask,
        },
        non_tensors={"uid": uid},
    )


def main() -> None:
    # 1. Critic-free: verl's own compute_advantage, through the registry (what verl's trainer calls).
    algorithm = OmegaConf.create({"adv_estimator": "areal", "gamma": 1.0, "lam": 1.0, "areal_config": "preset:grpo"})
    ours = compute_advantage(rollout_batch(), adv_estimator="areal", config=algorithm).batch["advantages"]
    grpo = compute_advantage(rollout_batch(), adv_estimator="grpo", config=algorithm).batch["advantages"]
    print(f"areal[grpo preset] vs verl grpo: max |diff| = {float((ours - grpo).abs().max()):.2e}")

    # 2. Critic GAE with the KL reward: the wrapper reads values and log-probs from the DataProto.
    algorithm = OmegaConf.create(
        {"adv_estimator": "areal", "gamma": 1.0, "lam": 0.95, "use_pf_ppo": False, "areal_config": "preset:ppo"}
    )
    data = areal_compute_advantage(rollout_batch(), adv_estimator="areal", config=algorithm)
    adv = data.batch["advantages"]
    mask = data.batch["response_mask"].bool()
    print(
        f"areal[ppo preset]: advantages mean {float(adv[mask].mean()):+.3f}, std {float(adv[mask].std()):.3f}; "
        f"returns[0, :4] = {data.batch['returns'][0, :4].tolist()}"
    )


if __name__ == "__main__":
    main()
