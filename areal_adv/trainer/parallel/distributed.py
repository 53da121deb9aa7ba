"""Data-parallel actor workers on `torch.distributed`: launch context, group dispatch, metrics.

Each actor worker is one rank started by `torchrun`. The rollout batch of a step
is a list of prompt (trajectory) groups; `assign_groups_to_ranks` hands WHOLE
groups to ranks, balancing tokens, because group-level reward and advantage
normalisation must see every member of a group and is therefore computed
locally without communication. Batch-level statistics are all-reduced inside
`areal_adv.utils.data.Normalization`; training metrics are averaged across ranks
with `reduce_metrics`.

The trainer dispatches *prompts* before rollout with `assign_prompts_to_ranks`
(round-robin by prompt index: token counts do not exist yet), so each rank rolls
out and trains on whole groups only. Replicas start equal through
`broadcast_module`; gradients are synchronised by torch's own engines (DDP or
FSDP2, see `areal_adv.trainer.parallel.engine`).

The dispatch functions are pure functions of their arguments, so every rank
computes the same assignment from the same global list of prompts or groups;
the other helpers are collectives that every rank must call in the same order.
"""

from __future__ import annotations

import gc
import heapq
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from areal_adv.api.config_checks import is_integer, is_number
from areal_adv.trainer.parallel.job_attempt import ATTEMPT_KEYS, agree_on_attempt

__all__ = [
    "DistContext",
    "all_gather_objects",
    "all_reduce_tensor",
    "assign_groups_to_ranks",
    "assign_prompts_to_ranks",
    "barrier",
    "broadcast_module",
    "destroy",
    "group_token_counts",
    "init_distributed",
    "reduce_metrics",
    "shard_groups",
]

#: torchrun's environment contract.
_ENV_RANK, _ENV_WORLD, _ENV_LOCAL = "RANK", "WORLD_SIZE", "LOCAL_RANK"
_ENV_ADDR, _ENV_PORT = "MASTER_ADDR", "MASTER_PORT"
_BACKENDS = ("gloo", "nccl")
#: The id of the job attempt this process joined (`init_distributed`), None before it did.
_ATTEMPT: str | None = None


# ---------------------------------------------------------------------------
# Dispatching prompt groups to ranks (pure)
# ---------------------------------------------------------------------------


def _check_world_size(world_size: Any) -> int:
    if not is_integer(world_size, low=1):
        raise ValueError(f"world_size: got {world_size!r}, expected an integer >= 1")
    return world_size


def _check_rank(rank: Any, world_size: int) -> int:
    if not is_integer(rank, low=0, high=world_size - 1):
        raise ValueError(f"rank: got {rank!r}, expected an integer in [0, {world_size}) for world_size={world_size}")
    return rank


def assign_groups_to_ranks(group_token_counts: Sequence[int], world_size: int) -> list[list[int]]:
    """Group indices per rank: whole groups only, total tokens balanced (greedy LPT).

    Groups are taken longest first (ties: lower index first) and each goes to the
    rank with the fewest tokens so far (ties: fewer groups, then lower rank), so
    the result is deterministic and identical on every rank. Longest-first keeps
    the most loaded rank within 4/3 of the optimum. Each rank's indices come back
    in ascending (original) order, so a rank's concatenated batch keeps the
    global row order of its groups. Every rank gets at least one group; fewer
    groups than ranks is an error, because splitting a group would change
    group-level normalisation.
    """
    world_size = _check_world_size(world_size)
    if isinstance(group_token_counts, (str, bytes)) or not isinstance(group_token_counts, Sequence):
        raise ValueError(
            f"group_token_counts: got {type(group_token_counts).__name__}, expected a sequence of integers"
        )
    counts: list[int] = []
    for i, value in enumerate(group_token_counts):
        if not is_integer(value, low=0):
            raise ValueError(f"group_token_counts[{i}]: got {value!r}, expected an integer >= 0 (tokens of group {i})")
        counts.append(value)
    if len(counts) < world_size:
        raise ValueError(
            f"assign_groups_to_ranks: {len(counts)} prompt groups cannot be spread over {world_size} ranks "
            "without splitting a group; every rank needs at least one whole group, so use at least "
            f"{world_size} prompts per step (or fewer ranks)"
        )
    order = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    # (tokens so far, groups so far, rank): the smallest entry receives the next group.
    heap = [(0, 0, rank) for rank in range(world_size)]
    assignment: list[list[int]] = [[] for _ in range(world_size)]
    for index in order:
        tokens, n_groups, rank = heapq.heappop(heap)
        assignment[rank].append(index)
        heapq.heappush(heap, (tokens + counts[index], n_groups + 1, rank))
    return [sorted(indices) for indices in assignment]


def assign_prompts_to_ranks(n_prompts: int, world_size: int) -> list[list[int]]:
    """Prompt indices per rank, round-robin (`rank, rank + W, ...`), for dispatch BEFORE rollout.

    The trainer samples the step's global prompt list identically on every rank
    and each rank rolls out only its own prompts, so a prompt's whole group is
    born on one rank. Token counts (what `assign_groups_to_ranks` balances) exist
    only after rollout, hence the index rule: ranks differ by at most one prompt,
    and with `n_prompts` a multiple of `world_size * n_minibatches` and equal
    group sizes, the ranks' k-th local minibatches together are exactly the k-th
    minibatch of the whole batch (so the update equals the 1-process update).
    """
    world_size = _check_world_size(world_size)
    if not is_integer(n_prompts, low=world_size):
        raise ValueError(
            f"assign_prompts_to_ranks: {n_prompts!r} prompts per step cannot be spread over {world_size} ranks "
            f"without splitting a prompt group; use rollout.batch_size >= {world_size} (the number of ranks)"
        )
    return [list(range(rank, n_prompts, world_size)) for rank in range(world_size)]


def group_token_counts(groups: Sequence[Mapping[str, Any]]) -> list[int]:
    """Tokens of each trajectory group: the sum of its `attention_mask` (padding excluded)."""
    counts = []
    for i, group in enumerate(groups):
        mask = group.get("attention_mask") if isinstance(group, Mapping) else None
        if not isinstance(mask, torch.Tensor):
            raise ValueError(
                f"shard_groups: group {i} has no 'attention_mask' tensor (got {type(group).__name__}); "
                "expected the trajectory-group dicts that concat_batch takes"
            )
        counts.append(int(mask.sum().item()))
    return counts


def shard_groups(groups: Sequence[Mapping[str, Any]], rank: int, world_size: int) -> list[Mapping[str, Any]]:
    """This rank's whole trajectory groups, in their original order (see `assign_groups_to_ranks`).

    Every rank must pass the same global list; `concat_batch` of the result gives
    the rank's batch and a `TrajBatchMeta` describing exactly those rows.
    """
    world_size = _check_world_size(world_size)
    rank = _check_rank(rank, world_size)
    if isinstance(groups, Mapping) or not isinstance(groups, Sequence):
        raise ValueError(f"shard_groups: got {type(groups).__name__}, expected a sequence of trajectory-group dicts")
    assignment = assign_groups_to_ranks(group_token_counts(groups), world_size)
    return [groups[i] for i in assignment[rank]]


# ---------------------------------------------------------------------------
# Process-group context
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DistContext:
    """Where this worker sits in the data-parallel job (rank 0 of 1 when not launched by torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    is_main: bool = True
    device: torch.device = torch.device("cpu")
    #: The job attempt's id, the same on every rank (`job_attempt`); None in a single process or a group
    #: initialised elsewhere. Store keys of this attempt live under it.
    attempt: str | None = None

    @property
    def is_distributed(self) -> bool:
        """True when collectives are live (a process group is initialised)."""
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()


def _env_int(name: str, env: Mapping[str, str], *, minimum: int) -> int:
    raw = env.get(name)
    if raw is None:
        raise ValueError(
            f"init_distributed: environment variable {name} is not set, but WORLD_SIZE is; launch with "
            "torchrun (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT)"
        )
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"init_distributed: environment variable {name}={raw!r}, expected an integer") from None
    if value < minimum:
        raise ValueError(f"init_distributed: environment variable {name}={value}, expected an integer >= {minimum}")
    return value


def _pick_device(local_rank: int, backend: str | None) -> torch.device:
    """cuda:<local_rank> when CUDA is usable (and not explicitly gloo-only), else CPU."""
    if backend == "gloo" or not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise ValueError(
            f"init_distributed: LOCAL_RANK={local_rank} but only {count} CUDA device(s) are visible; "
            "use --nproc_per_node <= the number of GPUs per node"
        )
    return torch.device("cuda", local_rank)


def _pick_backend(backend: str | None, device: torch.device) -> str:
    if backend is None:
        return "nccl" if device.type == "cuda" else "gloo"
    if backend not in _BACKENDS:
        raise ValueError(f"init_distributed: backend={backend!r}, expected one of {list(_BACKENDS)} or None (auto)")
    if backend == "nccl" and device.type != "cuda":
        raise ValueError("init_distributed: backend='nccl' needs CUDA, but no CUDA device is available; use 'gloo'")
    return backend


def _as_timedelta(timeout: float | timedelta | None) -> timedelta | None:
    if timeout is None or isinstance(timeout, timedelta):
        return timeout
    if not is_number(timeout, low=0.0, low_open=True):
        raise ValueError(f"init_distributed: timeout={timeout!r}, expected a positive number of seconds")
    return timedelta(seconds=float(timeout))


def _context_from_group(local_rank: int, device: torch.device) -> DistContext:
    rank = dist.get_rank()
    return DistContext(
        rank=rank,
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        is_main=rank == 0,
        device=device,
        attempt=_ATTEMPT,
    )


def _attempt_store(rank: int, world_size: int, timeout: timedelta) -> tuple[Any, str]:
    """torchrun's store (`env://`) scoped to this job attempt, and the attempt's id.

    The store may outlive an attempt (torchrun's agent hosts it, and `--max-restarts` restarts only the
    workers), so the process group's keys go under an id the ranks agree on first (`job_attempt`): a
    restarted rank then never reads the gloo address of a peer that died.
    """
    store, _, _ = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    attempt = agree_on_attempt(store, rank, world_size, timeout_s=timeout.total_seconds())
    return dist.PrefixStore(f"{ATTEMPT_KEYS}/{attempt}/process_group", store), attempt


def init_distributed(backend: str | None = None, *, timeout: float | timedelta | None = None) -> DistContext:
    """Join the data-parallel process group described by torchrun's environment.

    Without WORLD_SIZE in the environment this is a single-process run: nothing
    is initialised and rank 0 of 1 is returned, so the same trainer code runs
    with and without torchrun. `backend=None` picks nccl when CUDA is available
    and gloo otherwise. `timeout` (seconds) bounds every collective, so a rank
    that dies makes the others fail instead of hanging forever (default: torch's
    30 minutes). Calling it again in a process that already joined a group
    returns that group's context. The group's store keys are scoped to this job
    attempt (`DistContext.attempt`), so a torchrun restart joins afresh.
    """
    global _ATTEMPT
    env = os.environ
    timeout_td = _as_timedelta(timeout)
    if dist.is_available() and dist.is_initialized():
        local_rank = _env_int(_ENV_LOCAL, env, minimum=0) if _ENV_LOCAL in env else dist.get_rank()
        return _context_from_group(local_rank, _pick_device(local_rank, backend))
    if _ENV_WORLD not in env:
        return DistContext(device=_pick_device(0, backend))
    world_size = _env_int(_ENV_WORLD, env, minimum=1)
    rank = _env_int(_ENV_RANK, env, minimum=0)
    if rank >= world_size:
        raise ValueError(f"init_distributed: RANK={rank} is not below WORLD_SIZE={world_size}")
    local_rank = _env_int(_ENV_LOCAL, env, minimum=0) if _ENV_LOCAL in env else rank
    for name in (_ENV_ADDR, _ENV_PORT):
        if not env.get(name):
            raise ValueError(
                f"init_distributed: environment variable {name} is not set (RANK={rank}, WORLD_SIZE={world_size}); "
                "torchrun sets it, a hand-written launcher must too"
            )
    device = _pick_device(local_rank, backend)
    backend = _pick_backend(backend, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if timeout_td is None:
        timeout_td = default_pg_timeout
    store, attempt = _attempt_store(rank, world_size, timeout_td)
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size, timeout=timeout_td)
    _ATTEMPT = attempt
    return _context_from_group(local_rank, device)


def _live(ctx: DistContext | None) -> bool:
    return (ctx is None or ctx.world_size > 1) and dist.is_available() and dist.is_initialized()


def barrier(ctx: DistContext | None = None) -> None:
    """Wait for every rank (a no-op in a single-process run)."""
    if not _live(ctx):
        return
    if ctx is not None and ctx.device.type == "cuda" and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()


def destroy(ctx: DistContext | None = None) -> None:
    """Leave the process group (safe to call when none was initialised).

    Free DDP/FSDP-wrapped modules before calling it: a DDP Reducer that outlives the
    group holds its last reference, and the gloo group's destructor run from there can
    deadlock with the group's own worker threads (both need the GIL), so the rank
    never exits. The trainer's entry point drops its Trainer first; the collection
    here frees what only a reference cycle still keeps alive.
    """
    global _ATTEMPT
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
    _ATTEMPT = None


# ---------------------------------------------------------------------------
# Collectives used by the trainer (no-ops in a single process)
# ---------------------------------------------------------------------------


def _comm_device(ctx: DistContext | None, tensor: torch.Tensor) -> torch.device:
    """nccl only moves CUDA tensors: communicate on the rank's device there, in place elsewhere."""
    if ctx is not None and ctx.device.type == "cuda" and dist.get_backend() == "nccl":
        return ctx.device
    return tensor.device


def all_reduce_tensor(tensor: torch.Tensor, ctx: DistContext | None, op: Any = None) -> torch.Tensor:
    """A reduced copy of `tensor` over all ranks (`op` defaults to SUM); the input itself when not live."""
    if not _live(ctx):
        return tensor
    work = tensor.detach().to(_comm_device(ctx, tensor), copy=True)
    dist.all_reduce(work, op=dist.ReduceOp.SUM if op is None else op)
    return work.to(tensor.device)


def all_gather_objects(obj: Any, ctx: DistContext | None) -> list[Any]:
    """Every rank's `obj`, in rank order (`[obj]` in a single process)."""
    if not _live(ctx):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_module(module: torch.nn.Module, ctx: DistContext | None, src: int = 0) -> None:
    """Copy rank `src`'s parameters and buffers into every replica.

    Ranks seed their initialisation identically already; the broadcast makes
    "replicas start equal" a guarantee rather than a property of the init code.
    DDP repeats it at construction; FSDP2 needs it, because `fully_shard` keeps
    each rank's slice of its *local* tensors, and the frozen reference policy is
    copied from the broadcast weights.
    """
    if not _live(ctx):
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            work = tensor.data.to(_comm_device(ctx, tensor.data), copy=True)
            dist.broadcast(work, src=src)
            tensor.data.copy_(work)


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------


def _metric_weights(metrics: Mapping[str, float], weights: float | Mapping[str, float] | None) -> dict[str, float]:
    """One non-negative weight per metric: a rank weight (e.g. its token count) or per-metric weights."""
    if weights is None:
        return {key: 1.0 for key in metrics}
    if isinstance(weights, Mapping):
        missing = sorted(set(metrics) - set(weights))
        if missing:
            raise ValueError(f"reduce_metrics: weights lack metrics {missing}; give a weight per metric or one number")
        out = {key: float(weights[key]) for key in metrics}
    else:
        out = {key: float(weights) for key in metrics}
    bad = {k: w for k, w in out.items() if not (math.isfinite(w) and w >= 0)}
    if bad:
        raise ValueError(f"reduce_metrics: weights {bad}, expected finite numbers >= 0")
    return out


def _weighted_means(reports: Sequence[tuple[dict[str, float], dict[str, float]]]) -> dict[str, float]:
    """Per metric: sum(w*m)/sum(w) over the ranks that report it (plain mean if all weights are 0)."""
    keys: list[str] = []
    for values, _ in reports:
        keys.extend(k for k in values if k not in keys)
    out = {}
    for key in keys:
        pairs = [(values[key], w[key]) for values, w in reports if key in values]
        total = math.fsum(w for _, w in pairs)
        if total > 0:
            out[key] = math.fsum(v * w for v, w in pairs if w > 0) / total
        else:
            out[key] = math.fsum(v for v, _ in pairs) / len(pairs)
    return out


def reduce_metrics(
    metrics: Mapping[str, float],
    ctx: DistContext | None = None,
    weights: float | Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Average scalar metrics across ranks, weighted (e.g. by each rank's token count).

    Every rank must call it (it is a collective) and gets the same result. A
    metric reported by only some ranks is averaged over those ranks, so a rank
    with nothing to report does not drag means towards zero. Single process:
    the metrics come back as floats.
    """
    values = {str(k): float(v) for k, v in metrics.items()}
    local = (values, _metric_weights(values, weights))
    if not _live(ctx):
        return _weighted_means([local])
    reports: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(reports, local)
    return _weighted_means(reports)
