"""`AReaLGRPOTrainer`: TRL's GRPOTrainer with advantages from the pipeline.

TRL 1.16 has no advantage hook (`_generate_and_score_completions` computes the
rewards, the group statistics and the advantages in one method), so the subclass
lets TRL generate and score as usual, captures what the advantages need where
TRL exposes it (`_calculate_rewards`: gathered rewards, per-completion ids), and
replaces `advantages` in the batch TRL returns. TRL's loss takes [B, T]
advantages, so token-level estimators and process rewards reach it unchanged;
its loss options (`loss_type`, clipping, `beta`) stay TRL's. When a configured
stage reads `sum_pi_squared` (the optimal token baseline), one extra forward pass
gives the completions' log-probs and Σπ² (`token_stats`). With
`diagnostics.estimators` in the pipeline YAML, the shadow estimators'
gradient-free diagnostics join TRL's logged metrics as `diagnostics/<name>/<metric>`
(`areal_adv.trainer.diagnostics.engine_shadows`; `noise_proxy` only when Σπ² is computed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from trl import GRPOTrainer

from areal_adv.api.cli_args import ConfigError
from areal_adv.integrations.config import PipelineSpec, load_pipeline
from areal_adv.integrations.trl.advantages import (
    GatheredRollouts,
    group_advantages_and_diagnostics,
    process_rows,
    weighted_rewards,
)
from areal_adv.integrations.trl.model_path import check_model_argument
from areal_adv.integrations.trl.token_stats import completion_token_stats
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.ppo.checks.aux_fields import SUM_PI_SQUARED, declared_fields

__all__ = ["AReaLGRPOTrainer", "TokenRewardFunc"]

#: (prompts=, completions=, completion_ids=, **dataset columns) -> one per-token reward sequence per completion
TokenRewardFunc = Callable[..., Sequence[Sequence[float]]]
logger = logging.getLogger("areal_adv.integrations.trl")
_WHERE = "AReaLGRPOTrainer(areal_config=...)"


def _check_spec(spec: PipelineSpec) -> None:
    """What GRPOTrainer cannot provide: a critic and per-token reference log-probs for a KL reward."""
    if spec.critic_enabled:
        raise ConfigError(
            f"{_WHERE}: {spec.source} enables a critic (critic.enabled: true); GRPOTrainer trains no "
            "value model, so use a critic-free config (e.g. preset:grpo)"
        )
    if spec.actor.kl_ctl != 0:
        raise ConfigError(
            f"{_WHERE}: actor.kl_ctl={spec.actor.kl_ctl} asks for a KL reward, but GRPOTrainer regularises KL with its "
            "loss term (GRPOConfig.beta); set actor.kl_ctl=0.0 (areal_overrides=['actor.kl_ctl=0.0']) and use beta"
        )


class AReaLGRPOTrainer(GRPOTrainer):
    """A `trl.GRPOTrainer` whose advantages come from the areal-adv pipeline.

    `areal_config` is a pipeline YAML path (an `actor:` section, e.g. a
    preset such as `preset:grpo`, areal_adv/presets/) or a `PPOActorConfig`; `areal_overrides` are dotted
    overrides of the YAML. Outcome shaping, reward normalisation over each prompt's
    `num_generations` completions, the estimator, advantage normalisation and
    process shaping are the pipeline's, including any configured plugin.
    `token_reward_func`, called like a TRL reward function, returns per-token
    process rewards (one value per completion token) for process shaping.
    Every other argument is GRPOTrainer's.
    """

    def __init__(
        self,
        *args: Any,
        areal_config: Any,
        areal_overrides: Sequence[str] | None = None,
        token_reward_func: TokenRewardFunc | None = None,
        **kwargs: Any,
    ):
        check_model_argument(args[0] if args else kwargs.get("model"))  # before TRL loads anything
        spec = load_pipeline(areal_config, areal_overrides, where=_WHERE)
        _check_spec(spec)
        if token_reward_func is not None and not callable(token_reward_func):
            raise TypeError(
                f"AReaLGRPOTrainer(token_reward_func=...): got {type(token_reward_func).__name__}, expected a callable"
            )
        super().__init__(*args, **kwargs)
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ConfigError(
                f"{_WHERE}: GRPOConfig.multi_objective_aggregation={self.multi_objective_aggregation!r} is TRL's own "
                "advantage formula; with areal_config the weighted reward sum is normalised by the pipeline, so use "
                "'sum_then_normalize'"
            )
        if self.scale_rewards != "group":
            logger.warning(
                "GRPOConfig.scale_rewards=%r is not used: actor.reward_norm / actor.adv_norm of %s apply",
                self.scale_rewards,
                spec.source,
            )
        self.areal_spec = spec
        self.areal_actor = PPOActor(spec.actor)  # resolves the plugins in every process (they agree on failure)
        resolved = self.areal_actor.resolved
        self.areal_reads_sum_pi_squared = any(
            SUM_PI_SQUARED in declared_fields(s.fn)
            for s in (resolved.outcome, resolved.estimator, resolved.process)
            if s is not None
        )
        self.token_reward_func = token_reward_func
        self._areal_local: dict[str, torch.Tensor | None] | None = None

    # -- capture what TRL computes ------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        device = rewards_per_func.device
        stops = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        self._areal_local = {
            "rewards_per_func": rewards_per_func,  # already gathered by TRL
            "lengths": torch.tensor([len(ids) for ids in completion_ids_list], dtype=torch.long, device=device),
            "is_truncated": torch.tensor(
                [bool(ids) and int(ids[-1]) not in stops for ids in completion_ids_list],
                dtype=torch.bool,
                device=device,
            ),
            "token_rewards": self._token_rewards(inputs, prompts, completions, completion_ids_list, device),
        }
        return rewards_per_func

    def _token_rewards(self, inputs, prompts, completions, completion_ids_list, device) -> torch.Tensor | None:
        if self.token_reward_func is None:
            return None
        name = getattr(self.token_reward_func, "__name__", type(self.token_reward_func).__name__)
        columns = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")}
        values = self.token_reward_func(
            prompts=prompts,
            completions=completions,
            completion_ids=completion_ids_list,
            trainer_state=self.state,
            **columns,
        )
        if len(values) != len(completion_ids_list):
            raise ValueError(
                f"token_reward_func {name!r}: returned {len(values)} sequences, expected one per "
                f"completion ({len(completion_ids_list)})"
            )
        width = max((len(ids) for ids in completion_ids_list), default=0)
        out = torch.zeros((len(values), width), dtype=torch.float32)
        for i, (row, ids) in enumerate(zip(values, completion_ids_list)):
            row = torch.as_tensor(row, dtype=torch.float32).reshape(-1)
            if row.numel() != len(ids):
                raise ValueError(
                    f"token_reward_func {name!r}: completion {i} has {len(ids)} tokens but "
                    f"{row.numel()} token rewards, expected one per completion token"
                )
            out[i, : row.numel()] = row
        if not bool(torch.isfinite(out).all()):
            raise ValueError(f"token_reward_func {name!r}: returned a non-finite token reward")
        return out.to(device)

    # -- replace the advantages -----------------------------------------------------

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        local, self._areal_local = self._areal_local, None
        if local is None:
            raise RuntimeError(
                "AReaLGRPOTrainer: TRL computed advantages without calling _calculate_rewards; this "
                "TRL version is not supported (tested with trl 1.16)"
            )
        mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            mask = mask * output["tool_mask"]
        if self.areal_reads_sum_pi_squared:
            local["logprobs"], local["sum_pi_squared"] = completion_token_stats(
                self.model,
                output["prompt_ids"],
                output["prompt_mask"],
                output["completion_ids"],
                output["completion_mask"],
                self.temperature,
            )
        gathered = self._gather_rollouts(local, mask.to(torch.float32))
        advantages, diagnostics = group_advantages_and_diagnostics(
            self.areal_actor, gathered, self.areal_spec.diagnostics.estimators
        )
        mode = "train" if self.model.training else "eval"
        for key, value in diagnostics.items():  # shadow estimators: logged with TRL's own metrics
            self._metrics[mode][key].append(value)
        n_local, width = mask.shape
        output["advantages"] = advantages[process_rows(n_local, self.accelerator.process_index), :width].contiguous()
        self._log_advantages(advantages, gathered.loss_mask)
        return output

    def _gather_rollouts(self, local: dict[str, Any], mask: torch.Tensor) -> GatheredRollouts:
        acc = self.accelerator
        token_rewards = local["token_rewards"]
        if token_rewards is not None:  # TRL pads completions to its batch's longest; match the mask's width
            padded = torch.zeros_like(mask)
            width = min(mask.shape[1], token_rewards.shape[1])
            padded[:, :width] = token_rewards[:, :width]
            token_rewards = acc.gather(acc.pad_across_processes(padded, dim=1))
        per_token = {}
        for key in ("logprobs", "sum_pi_squared"):
            if local.get(key) is not None:
                per_token[key] = acc.gather(acc.pad_across_processes(local[key].to(torch.float32), dim=1))
        mode = "train" if self.model.training else "eval"
        return GatheredRollouts(
            rewards=weighted_rewards(local["rewards_per_func"], self.reward_weights),
            loss_mask=acc.gather(acc.pad_across_processes(mask, dim=1)),
            lengths=acc.gather(local["lengths"]),
            is_truncated=acc.gather(local["is_truncated"]),
            num_generations=self.num_generations if mode == "train" else self.num_generations_eval,
            token_rewards=token_rewards,
            **per_token,
        )

    def _log_advantages(self, advantages: torch.Tensor, mask: torch.Tensor) -> None:
        """The completions table shows one advantage per completion: ours, the mean over its tokens."""
        logged = self._logs["advantages"]
        per_row = (advantages * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        n = min(per_row.shape[0], len(logged))
        for _ in range(n):
            logged.pop()
        logged.extend(per_row.tolist())
