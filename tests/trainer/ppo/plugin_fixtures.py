"""Plugins used by the tests, referenced by dotted path (`plugin_fixtures.<name>`)."""

from __future__ import annotations

import torch

from areal_adv.trainer.ppo.advantage import AdvantageResult, OutcomeResult, compute_default_advantages
from areal_adv.trainer.ppo.advantage_algorithms import TemporalResult, token_gae

SEEN: dict[str, object] = {}


def halve(inputs):
    return OutcomeResult(rewards=inputs.data["rewards"].float() * 0.5)


def shift(inputs, *, offset: float):
    return OutcomeResult(rewards=inputs.data["rewards"].float() + offset)


def int_rewards(inputs):
    return OutcomeResult(rewards=inputs.data["rewards"].long())


def wrong_shape(inputs):
    return OutcomeResult(rewards=inputs.data["rewards"].float()[:-1])


def nan_rewards(inputs):
    r = inputs.data["rewards"].float().clone()
    r[0] = float("nan")
    return OutcomeResult(rewards=r)


def not_a_result(inputs):
    return inputs.data["rewards"].float()


def inplace_outcome(inputs):
    inputs.data["rewards"].mul_(2)
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def adds_key(inputs):
    inputs.data["sneaky"] = torch.zeros(1)
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def raises(inputs):
    raise RuntimeError("boom")


def per_row_noise(inputs):
    r = inputs.data["rewards"].float()
    return OutcomeResult(rewards=r + torch.arange(r.numel(), dtype=r.dtype))


def refs_wrong_count(inputs):
    return OutcomeResult(
        rewards=inputs.data["rewards"].float(),
        normalization_rewards=torch.zeros(sum(inputs.meta.logical_group_sizes) + 1),
    )


def record_lambda(ctx, *, value: float = 0.9):
    SEEN["timestep_unit"] = ctx.timestep_unit
    SEEN["timestep_lengths"] = ctx.timestep_lengths.clone()
    SEEN["turn_counts"] = ctx.turn_counts.clone()
    SEEN["effective_token_lengths"] = ctx.effective_token_lengths.clone()
    return torch.full_like(ctx.timestep_lengths, value, dtype=torch.float32)


def vapo_from_turns(ctx, *, alpha: float):
    turns = ctx.turn_counts.float()
    return torch.where(turns > 0, (1 - 1 / (alpha * turns.clamp(min=1))).clamp(0, 1), torch.ones_like(turns))


def estimator_bad_shape(inputs):
    r = token_gae(inputs)
    return TemporalResult(advantages=r.advantages[:, :-1], returns=r.returns, total_rewards=r.total_rewards)


def estimator_nan(inputs):
    r = token_gae(inputs)
    adv = r.advantages.clone()
    adv[0, 0] = float("inf")
    return TemporalResult(advantages=adv, returns=r.returns, total_rewards=r.total_rewards)


def estimator_inplace(inputs):
    inputs.values.add_(1.0)
    return token_gae(inputs)


def estimator_tuple(inputs):
    r = token_gae(inputs)
    return r.advantages, r.returns


def process_double(inputs):
    return inputs.advantages * 2


def process_bad(inputs):
    return inputs.advantages[0]


def replace_with_extra(inputs, *, key: str):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "extras": {**r.extras, key: r.advantages}})


def replace_non_binary_mask(inputs):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "loss_mask": r.loss_mask * 0.5})


def replace_wrong_shape(inputs):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "returns": r.returns[:, 1:]})


not_callable = 42


# --- plugins that try to reach the caller, exit, or return non-finite values (issue 14) ------------


def exits(inputs):
    import sys

    sys.exit(3)


def estimator_exits(inputs):
    raise SystemExit("bye")


def lambda_raises(ctx):
    raise KeyError("no such length")


def lambda_exits(ctx):
    raise SystemExit(0)


def rescale_references(inputs):
    """Rescales the explicit references of the metadata it was handed, in place."""
    for group in inputs.meta.rollout_groups:
        if group is not None and group.rewards is not None:
            group.rewards.mul_(10.0)
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def replace_group_sizes(inputs):
    object.__setattr__(inputs.meta, "traj_group_sizes", (inputs.meta.n_rows,) + (1,) * 0)
    object.__setattr__(inputs.meta, "n_trajs", 1)
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def write_through_data(inputs):
    inputs.data["rewards"].data.mul_(2)
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def write_through_numpy(inputs):
    inputs.data["rewards"].numpy()[0] += 1.0
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def write_logprobs_through_numpy(inputs):
    inputs.data["logprobs"].numpy()[:] = 0.0
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def estimator_writes_data(inputs):
    inputs.values.data.add_(1.0)
    return token_gae(inputs)


def estimator_setattr(inputs):
    object.__setattr__(inputs, "values", inputs.values + 1.0)
    return token_gae(inputs)


def estimator_edits_meta(inputs):
    object.__setattr__(inputs.meta, "traj_seqlens", ())
    return token_gae(inputs)


def outcome_edits_config(inputs):
    inputs.config.kl_ctl = 5.0
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def outcome_edits_nested_config(inputs):
    inputs.config.advantage.outcome_reward_shaping.kwargs["sneaky"] = 1
    return OutcomeResult(rewards=inputs.data["rewards"].float())


def process_edits_meta(inputs):
    object.__setattr__(inputs.meta, "n_trajs", inputs.meta.n_trajs + 1)
    return inputs.advantages


def process_writes_mask(inputs):
    inputs.loss_mask.numpy()[:] = 1.0
    return inputs.advantages


def process_nan(inputs):
    adv = inputs.advantages.clone()
    adv[0, 0] = float("nan")
    return adv


def replace_writes_values(inputs):
    inputs.data["values"].numpy()[:] = 0.0
    return compute_default_advantages(inputs)


def replace_nan_advantages(inputs):
    r = compute_default_advantages(inputs)
    adv = r.advantages.clone()
    adv[-1, -1] = float("inf")
    return AdvantageResult(**{**r.__dict__, "advantages": adv})


def replace_float_truncation(inputs):
    r = compute_default_advantages(inputs)
    return AdvantageResult(**{**r.__dict__, "extras": {**r.extras, "is_truncated": r.extras["is_truncated"].float()}})


def refs_nan(inputs):
    refs = torch.zeros(inputs.meta.n_logical)
    refs[0] = float("nan")
    return OutcomeResult(rewards=inputs.data["rewards"].float(), normalization_rewards=refs)


KWARGS_SEEN: list[list[int]] = []


def appends_to_kwargs(inputs, *, history: list):
    """Mutates its (list) kwarg: without fresh copies per call, later calls would see the change."""
    history.append(len(history))
    KWARGS_SEEN.append(list(history))
    return OutcomeResult(rewards=inputs.data["rewards"].float())


SEEN_SHAPING: list[tuple] = []


def replace_recording_shaping(inputs):
    """The default computation; records the call-time shaping under its flat names and as `shaping`."""
    from examples.custom_advantage.plugins import default_replica

    flat = (inputs.advantage_shaping_mode, inputs.gvpo_negative_scale, inputs.gvpo_zero_penalty, inputs.gvpo_zero_eps)
    SEEN_SHAPING.append((flat, inputs.shaping))
    return default_replica(inputs)
