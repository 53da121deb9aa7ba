"""Model + optimiser engines on torch's data-parallel engines: aligned forwards, one clipped AdamW step.

`PolicyEngine` is what `areal_adv.trainer.ppo.training.update.ppo_update` drives and what
`PPOActor(config, engine)` holds; `ValueEngine` does the same for the critic.
All per-position outputs are next-token aligned: position t refers to the
prediction of token t+1 (the last column is 0).

Data parallelism (`train.parallel`, only when the engine gets a live `DistContext`):

* ``ddp`` — `DistributedDataParallel` wraps the module for the training forward
  (`engine.train_module`); gradients are averaged over ranks inside `backward()`.
  No-grad forwards (proximal log-probs, values), sampling and `save_pretrained`
  use the plain module `engine.model`, which shares DDP's parameters.
* ``fsdp`` — FSDP2 (`torch.distributed.fsdp.fully_shard`) on every transformer
  block (the model's `_no_split_modules`) and on the root: parameters, gradients
  and AdamW state are sharded in place, so `engine.model` *is* the sharded module
  and every forward through it is a collective (the trainer calls each forward
  equally often on every rank). Sampling needs independent, unequal forwards per
  rank, so `PolicyEngine.sampler` is a full plain copy of the policy,
  refreshed from the shards by `sync_copies()` (one all-gather).

Loss scaling: the losses passed in are each rank's *share* of the global loss
(`areal_adv.trainer.ppo.training.update` scales them by local / global active tokens, so the
shares sum to the global token mean). DDP and FSDP average gradients over the W
ranks, so the engine backpropagates `share * W` (`backward_scale`): the reduced
gradient is then the gradient of the global token mean, as in one process.

Gradient accumulation (`actor.ppo_micro_batch_size`): `optimizer_step(loss)` is
one forward's step; with micro-batches the update runs each forward and
`backward` inside `micro_batch(j, n)` and then `apply_gradients()` once (DDP
synchronises only the last micro-batch's backward). `mixed_precision='bf16'`
runs every forward under `torch.autocast` (`autocast()`), float32 state kept.

Non-finite losses: DDP/FSDP reduce inside `backward()`, so a rank that skipped
backward would leave the others waiting there. The ranks therefore all-reduce
their losses *before* backward, and every rank raises the same
`NonFiniteLossError` naming the culprit ranks.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import functools
import inspect
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from areal_adv.trainer.lm.logprobs import token_logprobs
from areal_adv.trainer.parallel.distributed import DistContext, all_reduce_tensor
from areal_adv.trainer.parallel.embedding_gradient import add_lookup_gradient_sparsely

PARALLEL_MODES = ("ddp", "fsdp")


class NonFiniteLossError(FloatingPointError):
    """A non-finite loss or gradient norm; raised on every rank together (`failed_ranks`: the culprits, or None)."""

    def __init__(self, message: str, failed_ranks: list[int] | None) -> None:
        super().__init__(message)
        self.failed_ranks = failed_ranks


# ---------------------------------------------------------------------------
# FSDP2 helpers
# ---------------------------------------------------------------------------


def _block_class_names(model: nn.Module) -> set[str]:
    """Class names of the transformer blocks: what `transformers` lists in `_no_split_modules`."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return names


def shard_module(model: nn.Module, ctx: DistContext) -> nn.Module:
    """FSDP2-shard `model` in place over all ranks: each transformer block, then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    blocks = _block_class_names(model)
    for module in list(model.modules())[1:]:
        if type(module).__name__ in blocks:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(module: nn.Module) -> bool:
    return any(isinstance(p, DTensor) for p in module.parameters())


def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """The module's complete, unsharded state dict (a collective for an FSDP-sharded module)."""
    if not is_sharded(module):
        return module.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))


def materialise(skeleton: nn.Module, sharded: nn.Module) -> nn.Module:
    """A plain module with the full weights of `sharded`, built from its meta-device `skeleton` (a collective).

    Parameters come from the gathered state dict; buffers (FSDP2 leaves them
    unsharded on every rank, including non-persistent ones such as rotary
    frequencies) are copied from `sharded` itself.
    """
    state = full_state_dict(sharded)
    plain = copy.deepcopy(skeleton).to_empty(device=next(iter(state.values())).device)
    with torch.no_grad():
        plain.load_state_dict(state, strict=False)
        for name, buffer in sharded.named_buffers():
            plain.get_buffer(name).copy_(buffer)
    return plain


# ---------------------------------------------------------------------------
# Engines
# ---------------------------------------------------------------------------


@functools.cache
def _malloc_trim() -> Any:
    """glibc's `malloc_trim`, or None off glibc (then nothing is trimmed)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def return_freed_memory() -> None:
    """Hand freed heap memory back to the OS (glibc `malloc_trim(0)`).

    Gradients and activations are a few MiB per tensor, below glibc's dynamic
    mmap threshold, so they live on the heap; once freed, glibc keeps those
    pages mapped, and the next step's tensors land beside them instead of in
    them. Measured on SmolLM2-135M (docs/performance.md): the process held
    about 0.5 GiB more between steps and peaked 0.3 GiB higher without this.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def make_adamw(params: list[nn.Parameter], *, lr: float, weight_decay: float, sharded: bool) -> torch.optim.AdamW:
    """torch's AdamW in its fused form (one kernel over all parameters), or foreach where fused does not apply.

    On CPU the default (single-tensor) AdamW runs about ten element-wise
    passes per parameter; the fused kernel one (measured on SmolLM2-135M's
    parameters: 0.07 instead of 0.24-0.55 CPU seconds per step, see
    docs/performance.md). FSDP2's DTensor shards take the foreach form.
    """
    devices = {p.device.type for p in params}
    fused = not sharded and bool(params) and all(p.is_floating_point() for p in params) and devices <= {"cpu", "cuda"}
    if fused:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=bool(params))


def _check_parallel(parallel: Any) -> str:
    if parallel not in PARALLEL_MODES:
        raise ValueError(f"engine parallel: got {parallel!r}, expected one of {list(PARALLEL_MODES)}")
    return parallel


class _OptimEngine:
    """Shared AdamW + gradient clipping for a trainable module (one replica or shard per rank)."""

    _keeps_skeleton = True  # FSDP: keep a storage-free copy of the module to gather full copies into

    def __init__(
        self,
        model: nn.Module,
        *,
        lr: float,
        weight_decay: float = 0.0,
        grad_clip: float = 1.0,
        ctx: DistContext | None = None,
        parallel: str = "ddp",
        mixed_precision: str | None = None,
    ) -> None:
        self.ctx = ctx if ctx is not None else DistContext()
        _check_parallel(parallel)
        if mixed_precision not in (None, "bf16"):
            raise ValueError(f"engine mixed_precision: got {mixed_precision!r}, expected None or 'bf16'")
        self.mixed_precision = mixed_precision
        self.parallel: str | None = parallel if self.ctx.is_distributed else None  # None: one process, no wrapper
        self.grad_clip = grad_clip
        self.model = model
        self._keep_gradients = False  # inside a later micro-batch: the forward keeps the accumulated gradients
        # FSDP2 shards `model` in place: keep its structure (no storage) for full copies in checkpoints
        self._skeleton = None
        if self.parallel == "fsdp" and self._keeps_skeleton:
            self._skeleton = copy.deepcopy(model).to("meta")
        self.train_module = self._wrap(model)
        self.optimizer = make_adamw(
            [p for p in self.train_module.parameters() if p.requires_grad],
            lr=lr,
            weight_decay=weight_decay,
            sharded=self.parallel == "fsdp",
        )

    def autocast(self) -> contextlib.AbstractContextManager:
        """The forward's precision: `torch.autocast` to bfloat16 under `mixed_precision='bf16'`, else unchanged.

        Matrix products run in bfloat16 (on CPU through oneDNN, which uses
        AVX512-BF16 where the CPU has it); parameters, gradients and AdamW
        state keep the model's dtype (float32 master weights), and the
        log-softmax over the vocabulary stays float32 (`areal_adv.trainer.lm.logprobs`).
        """
        if self.mixed_precision is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.ctx.device.type, dtype=torch.bfloat16)

    def _wrap(self, model: nn.Module) -> nn.Module:
        if self.parallel == "ddp":
            ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
            # buffers (rotary frequencies) never change: no per-forward buffer broadcast
            # (torch 2.13 renamed the flag; older releases only know `broadcast_buffers`)
            params = inspect.signature(DistributedDataParallel.__init__).parameters
            flag = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
            return DistributedDataParallel(model, device_ids=ids, **{flag: False})
        if self.parallel == "fsdp":
            return shard_module(model, self.ctx)
        return model

    @property
    def backward_scale(self) -> float:
        """DDP and FSDP average gradients over ranks; the summed-share convention needs x world_size."""
        return float(self.ctx.world_size) if self.parallel is not None else 1.0

    def _agree_finite(self, loss: torch.Tensor) -> None:
        """Raise on every rank if any rank's loss is non-finite (one all-reduce of the losses, before backward)."""
        value = loss.detach().double()
        if self.parallel is None:
            if not torch.isfinite(value):
                raise NonFiniteLossError(f"non-finite loss {value.item()!r}; refusing to step the optimiser", [0])
            return
        losses = torch.zeros(self.ctx.world_size, dtype=torch.float64, device=value.device)
        losses[self.ctx.rank] = value
        losses = all_reduce_tensor(losses, self.ctx).tolist()
        bad = [r for r, v in enumerate(losses) if not math.isfinite(v)]
        if bad:
            raise NonFiniteLossError(
                f"non-finite loss on rank(s) {bad} (losses by rank: {losses}); no rank ran backward or stepped "
                "the optimiser",
                bad,
            )

    def optimizer_step(self, loss: torch.Tensor) -> float:
        """Agree on finiteness, backward (gradients reduced over ranks), clip the global norm, step.

        Returns the pre-clip gradient norm, identical on every rank.
        """
        self.optimizer.zero_grad(set_to_none=True)
        self.backward(loss)
        return self.apply_gradients()

    @contextlib.contextmanager
    def micro_batch(self, index: int, count: int) -> Iterator[None]:
        """The forward and `backward` of micro-batch `index` of `count`, accumulating into one gradient.

        The first micro-batch's forward frees the previous gradients, the
        others add to them. Under DDP every micro-batch but the last runs under
        `no_sync` (gradients stay local; the last backward all-reduces their
        sum once). FSDP2 reduce-scatters every backward into the sharded
        gradients, which accumulate there. `apply_gradients` then steps once.
        """
        self._keep_gradients = index > 0
        local = self.parallel == "ddp" and index < count - 1
        try:
            with self.train_module.no_sync() if local else contextlib.nullcontext():
                yield
        finally:
            self._keep_gradients = False

    def backward(self, loss: torch.Tensor) -> None:
        """Agree on finiteness, then add this loss's gradient (x `backward_scale`) to the accumulated one.

        On a non-finite loss every gradient accumulated so far is dropped as well.
        """
        try:
            self._agree_finite(loss)
        except NonFiniteLossError:
            self.optimizer.zero_grad(set_to_none=True)
            raise
        (loss * self.backward_scale if self.parallel is not None else loss).backward()

    def apply_gradients(self) -> float:
        """Clip the accumulated (synchronised) gradient's global norm and step; returns the pre-clip norm."""
        norm = torch.nn.utils.clip_grad_norm_(self.train_module.parameters(), self.grad_clip)
        norm = float(norm.full_tensor() if isinstance(norm, DTensor) else norm)
        if not math.isfinite(norm):  # the gradient is synchronised, so every rank sees the same norm
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                f"non-finite gradient norm {norm!r} after backward; refusing to step the "
                "optimiser (on every rank: the gradient is synchronised)",
                None,
            )
        self.optimizer.step()
        return norm

    def release_gradients(self) -> None:
        """Free the last step's gradients (kept after `optimizer_step` for inspection).

        Every training forward calls it first (`optimizer_step` starts from
        zero gradients anyway), and the trainer after each update, so the
        gradients are never resident beside the next rollout's or forward's
        memory: a step's peak is weights + AdamW state + activations, not +
        gradients as well.
        """
        self.optimizer.zero_grad(set_to_none=True)
        return_freed_memory()

    # -- checkpoints (areal_adv.trainer.run.trainer_state calls these on every rank) -----------------

    def checkpoint_model(self) -> nn.Module:
        """A plain module with the full current weights: `model` itself, or under FSDP a gathered copy."""
        if self._skeleton is None:
            return self.model
        return materialise(self._skeleton, self.model)

    def load_checkpoint_model(self, plain: nn.Module) -> None:
        """Make the trained module hold `plain`'s weights (what `checkpoint_model` returned, loaded from disk)."""
        if plain is self.model:
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.train_module, plain.state_dict(), options=StateDictOptions(full_state_dict=True))

    def optimizer_state_dict(self) -> dict[str, Any]:
        """AdamW state for a checkpoint: `optimizer.state_dict()`, or under FSDP the full state on rank 0.

        The FSDP form (gathered through torch.distributed.checkpoint, keyed by
        parameter name, {} on ranks other than 0) is a collective.
        """
        if self.parallel != "fsdp":
            return self.optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(
            self.train_module, self.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )

    def load_optimizer_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `optimizer_state_dict`; every rank passes the full state it read."""
        from areal_adv.utils.checkpoint_folders import CheckpointError

        fsdp_form = any(isinstance(key, str) for key in state.get("state", {}))
        if fsdp_form != (self.parallel == "fsdp"):
            written = "train.parallel=fsdp" if fsdp_form else "train.parallel=ddp (or one process)"
            raise CheckpointError(
                f"the optimizer state was written under {written}, but this run uses "
                f"{'train.parallel=' + self.parallel if self.parallel else 'one process'}; "
                "resume with the train.parallel of the run that wrote it"
            )
        if self.parallel != "fsdp":
            self.optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(
            self.train_module, self.optimizer, state, options=StateDictOptions(full_state_dict=True)
        )

    def state_dict(self) -> dict[str, Any]:
        """Full (unsharded, CPU) model and optimiser state keyed by parameter name, for checkpoints.

        A collective under data parallelism, where only rank 0 receives the
        state (the other ranks get empty dicts: rank 0 writes checkpoints). As
        with torch's own `state_dict()`, CPU tensors may alias the live ones:
        serialise (or clone) before the engine steps again.
        """
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        model, optim = get_state_dict(
            self.train_module, self.optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return {"model": model, "optimizer": optim}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Inverse of `state_dict`; under data parallelism rank 0's state is broadcast (the others' is ignored)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        # model and optimiser separately: `set_state_dict` skips the model broadcast on a rank whose model
        # state is empty (torch 2.13), which is every rank but 0 here
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=self.parallel is not None)
        set_model_state_dict(self.train_module, state.get("model", {}), options=options)
        set_optimizer_state_dict(self.train_module, self.optimizer, state.get("optimizer", {}), options=options)


def cast_copy(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A frozen copy of `model` whose floating-point parameters are cast to `dtype` (buffers copied as they are).

    The parameters are cast one by one into the copy (a `deepcopy` memo maps each
    original parameter to its cast), so the model's weights are never held twice
    in their own dtype. Buffers such as rotary frequencies keep their dtype: the
    copy rounds the weights only.
    """
    memo: dict[int, Any] = {}
    for param in model.parameters():
        data = param.detach().to(dtype) if param.is_floating_point() else param.detach().clone()
        memo[id(param)] = nn.Parameter(data, requires_grad=False)
    return copy.deepcopy(model, memo)


class PolicyEngine(_OptimEngine):
    """The causal LM policy with its optimiser, and the plain module that samples (`sampler`).

    `policy` is the plain module with the full trained weights: the trained
    module itself, or under FSDP a full copy refreshed from the shards after every
    update. `sampler` samples: `policy`, or with `rollout_dtype`
    (`rollout.weights_dtype`) a copy of it with its parameters in that dtype
    (`cast_copy`), refreshed after every update with one cast per parameter. The
    trained module, checkpoints, the log-prob passes and evaluation keep the
    model's dtype.
    """

    _keeps_skeleton = False  # `policy` is the full plain copy already

    def __init__(self, model: nn.Module, *, rollout_dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        ctx = kwargs.get("ctx")
        sharded = ctx is not None and ctx.is_distributed and kwargs.get("parallel", "ddp") == "fsdp"
        replica = copy.deepcopy(model) if sharded else model  # copied before fully_shard changes `model`
        sampler = replica if rollout_dtype is None else cast_copy(replica, rollout_dtype)
        super().__init__(model, **kwargs)
        self.rollout_dtype = rollout_dtype
        self.policy = replica
        self.sampler = sampler
        # one process only: see areal_adv.trainer.parallel.embedding_gradient
        self.sparse_lookup_gradient = self.parallel is None and add_lookup_gradient_sparsely(model)

    @property
    def sampled_by(self) -> nn.Module:
        """The module whose distribution the training rollouts are sampled from: the `rollout_dtype` copy, or
        the trained module (sharded under FSDP; `sampler` is then its full copy, the same weights)."""
        return self.sampler if self.rollout_dtype is not None else self.model

    def sync_copies(self) -> None:
        """Copy the trained weights into `policy` and `sampler`, casting to `rollout_dtype` when set.

        FSDP: an all-gather on every rank into `policy`. With `rollout_dtype`
        then one `copy_` (the cast) per parameter from `policy`. Without
        either, a no-op (the rollout model is the trained module).
        """
        with torch.no_grad():
            if self.policy is not self.model:
                self.policy.load_state_dict(full_state_dict(self.model))
            if self.sampler is not self.policy:
                for target, source in zip(self.sampler.parameters(), self.policy.parameters(), strict=True):
                    target.copy_(source)

    def checkpoint_model(self) -> nn.Module:
        """The plain policy in the trained dtype: `policy`, refreshed after every update (no collective)."""
        return self.policy

    def load_checkpoint_model(self, plain: nn.Module) -> None:
        """Load `plain` into the trained module; a cast sampling copy is refreshed from it."""
        super().load_checkpoint_model(plain)
        if self.rollout_dtype is not None:
            self.sync_copies()

    def forward_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        temperature: float,
        *,
        with_entropy: bool = False,
        wanted: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Aligned log-probs of the given tokens (and entropies, no gradient), with gradients (the training forward).

        With `wanted` (an aligned [B, T] mask such as the aligned loss mask),
        only those positions are computed and rows sharing a prompt are packed
        (`areal_adv.trainer.lm.logprobs`); the other positions are 0.
        """
        if not self._keep_gradients:  # the previous step's: not resident beside this forward's activations
            self.release_gradients()
        with self.autocast():
            return token_logprobs(
                self.train_module, input_ids, attention_mask, temperature, wanted=wanted, with_entropy=with_entropy
            )

    @torch.no_grad()
    def compute_logprobs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        temperature: float,
        *,
        wanted: torch.Tensor | None = None,
        base: bool = False,
    ) -> torch.Tensor:
        """Aligned log-probs without gradients (proximal log-probs), through the plain (or sharded) module.

        `base=True` (a LoRA policy only): with the adapters disabled, i.e. under
        the frozen base model, which is the KL reference policy.
        """
        if base and not callable(getattr(self.model, "disable_adapter", None)):
            raise ValueError(
                "compute_logprobs(base=True) needs a LoRA (peft) policy; a full fine-tuning run "
                "keeps a frozen reference copy instead"
            )
        was_training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter() if base else contextlib.nullcontext(), self.autocast():
                return token_logprobs(self.model, input_ids, attention_mask, temperature, wanted=wanted)[0]
        finally:
            self.model.train(was_training)


@torch.no_grad()
def reference_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    *,
    wanted: torch.Tensor | None = None,
) -> torch.Tensor:
    """Aligned log-probs under the frozen reference policy (with `wanted`: only at those aligned positions)."""
    return token_logprobs(model, input_ids, attention_mask, temperature, wanted=wanted)[0]


class ValueEngine(_OptimEngine):
    """The critic (`ValueModel`) with its optimiser."""

    def forward_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Aligned values [B, T] with gradients (the training forward): position t = value before token t+1."""
        self.release_gradients()  # the previous step's: not resident beside this forward's activations
        with self.autocast():
            return self.train_module(input_ids, attention_mask).float()

    @torch.no_grad()
    def compute_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Aligned values without gradients, through the plain (or sharded) module in eval mode."""
        was_training = self.model.training
        self.model.eval()
        with self.autocast():
            values = self.model(input_ids, attention_mask).float()
        self.model.train(was_training)
        return values
