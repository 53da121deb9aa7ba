"""`rollout.filter_zero_advantage`: drop prompt groups whose advantages are all zero before the update.

A group whose samples all got the same reward has, under GRPO-style group
normalisation, advantage exactly 0 on every token: it adds tokens to the loss's
denominator (the token mean over the minibatch) but no policy-gradient signal,
so it dilutes the step. DAPO's dynamic sampling (arXiv 2503.14476; verl's
`algorithm.filter_groups`) and SPIRAL's `filter_zero_adv` drop such samples;
this does the same after the advantages are computed. The update (policy and
critic) then runs on the kept groups' rows only, so the loss is the token mean
over the kept groups' generated tokens: the effective batch is the kept groups,
and each of their tokens weighs (all tokens) / (kept tokens) times more than
without the filter. DAPO also samples more prompts until the batch is full;
this does not (the batch simply shrinks).

A group counts as zero when every generated token of every one of its rows has
advantage == 0 exactly (a KL penalty or process reward makes it non-zero).
Under data parallelism the ranks agree: a rank left without a group keeps one
with its loss mask zeroed (it joins the gradient reduction with no tokens), and
when no rank keeps any group the update is skipped on all of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from areal_adv.api.train_args import ExperimentConfig
from areal_adv.trainer.parallel.distributed import DistContext, all_reduce_tensor
from areal_adv.trainer.run.step_observers import Observation, Phase, StepObserver, StepServices, StepView, step_observer

__all__ = ["FilterResult", "ZeroAdvantageFilter", "filter_zero_advantage_groups", "zero_advantage_groups"]


@dataclass(frozen=True)
class FilterResult:
    data: dict[str, Any]  # the kept rows (all ranks: at least one row, maybe with its loss mask zeroed)
    filtered: int  # groups filtered, over all ranks
    groups: int  # groups before the filter, over all ranks
    skip_update: bool  # no rank kept a group: nothing to train on


def zero_advantage_groups(data: Mapping[str, Any], group_sizes: Sequence[int]) -> torch.Tensor:
    """BoolTensor[G]: the groups (consecutive rows) with advantage 0 on every generated token."""
    adv, mask = data["advantages"], data["loss_mask"].bool()
    row_signal = ((adv != 0) & mask).any(dim=1)
    sizes = torch.as_tensor(list(group_sizes), dtype=torch.long, device=adv.device)
    group = torch.repeat_interleave(torch.arange(sizes.shape[0], device=adv.device), sizes)
    signal = torch.zeros(sizes.shape[0], dtype=torch.long, device=adv.device).index_add_(0, group, row_signal.long())
    return signal == 0


def _rows(data: Mapping[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    n = data["input_ids"].shape[0]
    return {k: (v[rows] if torch.is_tensor(v) and v.dim() >= 1 and v.shape[0] == n else v) for k, v in data.items()}


def filter_zero_advantage_groups(
    data: Mapping[str, Any], group_sizes: Sequence[int], ctx: DistContext | None = None
) -> FilterResult:
    """The batch without its zero-advantage groups, and how many were filtered (see the module docstring)."""
    zero = zero_advantage_groups(data, group_sizes)
    sizes = torch.as_tensor(list(group_sizes), dtype=torch.long)
    keep_rows = torch.repeat_interleave(~zero.cpu(), sizes).to(data["input_ids"].device)
    counts = all_reduce_tensor(torch.tensor([float(zero.sum()), float(zero.numel())], dtype=torch.float64), ctx)
    filtered, groups = int(counts[0]), int(counts[1])
    if filtered == groups:
        return FilterResult(dict(data), filtered, groups, skip_update=True)
    if bool(keep_rows.any()):
        return FilterResult(_rows(data, keep_rows.nonzero(as_tuple=True)[0]), filtered, groups, skip_update=False)
    # this rank kept nothing, others did: it still takes part in the update, with no active token
    first = torch.arange(int(sizes[0]), device=data["input_ids"].device)
    kept = _rows(data, first)
    kept["loss_mask"] = torch.zeros_like(kept["loss_mask"])
    return FilterResult(kept, filtered, groups, skip_update=False)


@step_observer(enabled=lambda cfg: cfg.rollout.filter_zero_advantage)
class ZeroAdvantageFilter(StepObserver):
    """`rollout.filter_zero_advantage`: the update trains on the groups with a non-zero advantage only.

    It changes what the update trains on, so the update's forward would not see every sampled
    token: the trained weights' log-probs (and `rollout_mismatch/*`) come from a pass of their own.
    """

    name = "zero-advantage filter"
    phase = Phase.ADVANTAGES
    reads = frozenset({"advantages", "loss_mask"})
    changes_batch = True

    def __init__(self, cfg: ExperimentConfig, services: StepServices) -> None:
        self.ctx = services.ctx

    def observe(self, view: StepView) -> Observation:
        filtered = filter_zero_advantage_groups(view.data, view.meta.traj_group_sizes, self.ctx)
        metrics = {  # over all ranks (the same numbers on every rank)
            "filtered_groups": filtered.filtered,
            "filtered_group_frac": filtered.filtered / filtered.groups,
        }
        return Observation(metrics, data=filtered.data, skip_update=filtered.skip_update)
