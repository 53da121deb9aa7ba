"""Log-probs and entropies of a batch's tokens from one causal-LM forward, at only the positions needed.

All outputs are next-token aligned: position t holds log p(token t+1 | tokens <= t)
at the given temperature (the last column is 0). Three ways to get them:

* **dense** (`wanted=None`): logits at every position, as before; one
  `log_softmax` serves both the log-probs and the entropies.
* **response-only** (`wanted` given, e.g. the aligned loss mask): only the
  positions predicting a wanted token go through the vocabulary projection
  (`logits_to_keep`, transformers' own argument) and the float32 softmax; the
  other positions are 0. For 16 rows of 46 prompt + 16 generated tokens and a
  49k vocabulary that is 256 instead of 992 [vocab] rows of logits.
* **shared prefix** (`wanted` given, rows of a GRPO group): rows that share
  everything before their first wanted token (the prompt) are packed into
  one sequence, prompt once and then every row's continuation, with a 4D
  attention mask under which each continuation sees the prompt and itself
  only, and position ids that restart after the prompt for each continuation.
  The prompt's forward and backward then run once per group instead of once
  per row (4 x 46 + 16 x 16 instead of 16 x 62 tokens above); the result
  equals the per-row forward up to float rounding (tested). Hand-written:
  transformers packs only unrelated documents (`DataCollatorWithFlattening`),
  not a shared prefix with several continuations.

Packing is used only when it is estimated cheaper (`forward_cost`: long
continuations make one long packed row costlier in attention than the prompt
saved). The packed mask is a plain additive float mask, which the `eager` and `sdpa`
attention of transformers take as given; other attention kernels, sliding
windows and models whose forward has no `position_ids` get the response-only
path. `AREAL_SHARED_PREFIX=off` turns packing off; `on` makes a model that
cannot take it an error.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

SHARED_PREFIX_ENV = "AREAL_SHARED_PREFIX"
_ENTROPY_CHUNK = 64  # positions per entropy chunk: 64 x vocab float32 temporaries (12 MiB at a 49k vocabulary)
_PACKING_ATTENTION = ("eager", "sdpa")


def _tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    return logits if temperature == 1.0 else logits / temperature


def entropy_from_logp(logp: torch.Tensor) -> torch.Tensor:
    """-sum p log p over the last dimension, without gradients (a diagnostic, never a loss term here)."""
    with torch.no_grad():
        return -(logp.exp() * logp).sum(-1)


def sum_pi_squared_from_logp(logp: torch.Tensor) -> torch.Tensor:
    """sum p^2 over the last dimension, without gradients: the optimal token baseline's variance proxy term."""
    with torch.no_grad():
        return torch.exp(2.0 * logp).sum(-1)


def dense_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Aligned log-probs (and entropies) at every position from [B, T, V] logits; one log_softmax."""
    logp = torch.log_softmax(_tempered(logits[:, :-1], temperature), dim=-1)
    picked = torch.nn.functional.pad(logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1), (0, 1))
    entropy = torch.nn.functional.pad(entropy_from_logp(logp), (0, 1)) if with_entropy else None
    return picked, entropy


@dataclass
class Selection:
    """The aligned positions (`rows`, `cols`) whose log-probs are needed, and the tokens they predict."""

    rows: torch.Tensor
    cols: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def from_wanted(cls, input_ids: torch.Tensor, wanted: torch.Tensor) -> Selection:
        """`wanted`: [B, T] aligned mask (t set: the log-prob of token t+1); the last column never counts."""
        rows, cols = torch.nonzero(wanted[:, :-1].bool(), as_tuple=True)
        return cls(rows, cols, input_ids[rows, cols + 1])


def aligned_from_rollout(loss_mask: torch.Tensor) -> torch.Tensor:
    """The rollout's loss mask (1 on generated token t, at t) shifted to the aligned layout (at t - 1)."""
    return torch.nn.functional.pad(loss_mask[:, 1:], (0, 1))


def scatter_aligned(values: torch.Tensor, selection: Selection, shape: torch.Size) -> torch.Tensor:
    """[B, T] zeros with `values` at the selected positions (differentiable in `values`)."""
    out = torch.zeros(shape, dtype=values.dtype, device=values.device)
    return out.index_put((selection.rows, selection.cols), values)


def picked_logprobs(
    logits: torch.Tensor,
    src_rows: torch.Tensor,
    src_cols: torch.Tensor,
    selection: Selection,
    temperature: float,
    shape: torch.Size,
    with_entropy: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Aligned [B, T] log-probs (and entropies) of the selection from [R, K, V] logits.

    Selected position i is read at (`src_rows[i]`, `src_cols[i]`) of the
    logits. One log_softmax over the logits as they are (no gathered [N, V]
    copy); the entropies are summed in chunks of positions, so no second and
    third [N, V] float32 tensor exists at once.
    """
    logp = torch.log_softmax(_tempered(logits, temperature), dim=-1)
    picked = logp[src_rows, src_cols, selection.targets]
    entropy = None
    if with_entropy:
        chunks = [
            entropy_from_logp(logp[src_rows[i : i + _ENTROPY_CHUNK], src_cols[i : i + _ENTROPY_CHUNK]])
            for i in range(0, src_rows.numel(), _ENTROPY_CHUNK)
        ]
        entropy = scatter_aligned(torch.cat(chunks), selection, shape)
    return scatter_aligned(picked, selection, shape), entropy


# ---------------------------------------------------------------------------
# shared-prefix packing
# ---------------------------------------------------------------------------


@dataclass
class PackedBatch:
    """Rows sharing a prompt packed into one sequence each ([G, L]), and where each selected position went."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor  # [G, 1, L, L] additive float: 0 attends, dtype-min does not
    src_rows: torch.Tensor  # [N] packed row of each selected position
    src_cols: torch.Tensor  # [N] packed position of each selected position


def _prefix_groups(input_ids: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Group index of every row (rows with equal tokens before their first generated one), and the count."""
    width = int(first.max())
    positions = torch.arange(width, device=input_ids.device)
    prefixes = torch.where(positions < first[:, None], input_ids[:, :width], -1)
    keys = torch.cat([first[:, None], prefixes], dim=1)  # the length too: a prefix of a prefix is no match
    _, groups = torch.unique(keys, dim=0, return_inverse=True)
    return groups, int(groups.max()) + 1


def _offsets(
    groups: torch.Tensor, n_groups: int, first: torch.Tensor, suffix: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: where its continuation starts in its group's packed row; per group: the packed length."""
    rows = groups.shape[0]
    prefix_len = torch.zeros(n_groups, dtype=torch.long, device=groups.device).scatter_reduce(
        0, groups, first, reduce="amax", include_self=False
    )
    # exclusive cumulative sum of the continuation lengths within each group, rows in their batch order
    same = groups[:, None] == groups[None, :]
    earlier = torch.ones(rows, rows, dtype=torch.bool, device=groups.device).tril(-1)
    before = ((same & earlier).long() * suffix[None, :]).sum(-1)
    totals = torch.zeros(n_groups, dtype=torch.long, device=groups.device).scatter_add(0, groups, suffix)
    return prefix_len[groups] + before, prefix_len + totals


def pack_shared_prefixes(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    selection: Selection,
    dtype: torch.dtype,
    worth: Callable[[int, int], bool] | None = None,
) -> PackedBatch | None:
    """The packed batch, or None when no two rows share their prompt (packing would save nothing).

    Rows are right-padded (attention 1 on a leading run); a row's prompt is
    everything before the first token whose log-prob is selected. Rows with
    nothing selected are left out. `worth(groups, width)` is asked before
    anything is built; False gives None.
    """
    rows = input_ids.shape[0]
    counts = torch.zeros(rows, dtype=torch.long, device=input_ids.device).index_add_(
        0, selection.rows, torch.ones_like(selection.rows)
    )
    has = counts > 0
    if int(has.sum()) < 2:
        return None
    keep = torch.nonzero(has).squeeze(-1)
    lengths = attention_mask.sum(-1)
    # each row's first selected aligned position + 1: its first token that is not prompt
    first = torch.full((rows,), int(input_ids.shape[1]), dtype=torch.long, device=input_ids.device)
    first = first.scatter_reduce(0, selection.rows, selection.cols + 1, reduce="amin")
    groups_kept, n_groups = _prefix_groups(input_ids[keep], first[keep])
    if n_groups == keep.numel():
        return None
    groups = torch.full_like(first, -1)
    groups[keep] = groups_kept
    suffix = torch.where(has, lengths - first, 0)
    starts, packed_len = _offsets(groups_kept, n_groups, first[keep], suffix[keep])
    width = int(packed_len.max())
    if worth is not None and not worth(n_groups, width):
        return None
    ids = torch.zeros(n_groups, width, dtype=input_ids.dtype, device=input_ids.device)
    positions = torch.zeros_like(ids)
    segment = torch.full_like(ids, -2)  # -1 prompt, i continuation of row i, -2 padding
    # every token of a kept row: the prompt's tokens land on the prompt (the same for each row of the group)
    row_k, col = torch.nonzero(attention_mask[keep].bool(), as_tuple=True)
    in_prompt = col < first[keep][row_k]
    dest = torch.where(in_prompt, col, starts[row_k] + col - first[keep][row_k])
    g = groups_kept[row_k]
    ids[g, dest] = input_ids[keep][row_k, col]
    positions[g, dest] = col
    segment[g, dest] = torch.where(in_prompt, -1, keep[row_k])
    mask = _packed_mask(segment, dtype)
    # selected aligned position t of row b predicts token t + 1: from the prompt's last position, or the row's own
    b, t = selection.rows, selection.cols
    from_prompt = t + 1 == first[b]
    src_cols = torch.where(from_prompt, first[b] - 1, starts[_rank(keep, b)] + t - first[b])
    return PackedBatch(ids, positions, mask, groups[b], src_cols)


def _rank(keep: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Index into the kept rows of each row in `rows` (all of them kept)."""
    lookup = torch.full((int(keep.max()) + 1,), -1, dtype=torch.long, device=keep.device)
    lookup[keep] = torch.arange(keep.numel(), device=keep.device)
    return lookup[rows]


def _packed_mask(segment: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[G, 1, L, L] additive mask: causal, and a continuation sees the prompt and itself only.

    Padding positions see the prompt and the padding (so no softmax row is
    empty); nothing real sees them.
    """
    width = segment.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=segment.device).tril()
    visible = (segment[:, None, :] == -1) | (segment[:, None, :] == segment[:, :, None])
    allowed = causal[None] & visible
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


# ---------------------------------------------------------------------------
# the forward
# ---------------------------------------------------------------------------


def _inner(module: nn.Module) -> nn.Module:
    """The transformers model inside a DistributedDataParallel wrapper (or the module itself)."""
    return getattr(module, "module", module)


def _accepts(module: nn.Module, name: str) -> bool:
    try:
        return name in inspect.signature(_inner(module).forward).parameters
    except (TypeError, ValueError):
        return False


def can_pack(module: nn.Module) -> bool:
    """Whether `module`'s attention takes a custom 4D mask as given (eager / sdpa, no sliding window)."""
    config = getattr(_inner(module), "config", None)
    if config is None or getattr(config, "_attn_implementation", None) not in _PACKING_ATTENTION:
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        sliding = any("sliding" in str(kind) for kind in layer_types)
    else:  # Mistral-style configs: a window unless use_sliding_window says otherwise
        sliding = bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True)
    return not sliding and _accepts(module, "position_ids")


def shared_prefix_mode() -> str:
    mode = os.environ.get(SHARED_PREFIX_ENV, "auto").lower()
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"environment variable {SHARED_PREFIX_ENV}={mode!r}, expected auto, on or off")
    return mode


def _kept_logits(module: nn.Module, keep: int, **inputs: torch.Tensor) -> torch.Tensor:
    """The logits of the last `keep` positions (`logits_to_keep` when the model has it, else sliced)."""
    if _accepts(module, "logits_to_keep"):
        return module(**inputs, logits_to_keep=keep).logits
    return module(**inputs).logits[:, -keep:]


def token_logprobs(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    *,
    wanted: torch.Tensor | None = None,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Aligned [B, T] log-probs (and entropies) of `input_ids` under `module`: dense, response-only or packed.

    `wanted` ([B, T], aligned like the outputs, e.g. the aligned loss mask):
    only those positions are computed (the others are 0), and rows sharing
    their prompt are packed when the model allows it (see the module docstring).
    """
    if wanted is None:
        logits = module(input_ids=input_ids, attention_mask=attention_mask).logits
        return dense_logprobs(logits, input_ids, temperature, with_entropy)
    selection = Selection.from_wanted(input_ids, wanted)
    shape = input_ids.shape
    if selection.rows.numel() == 0:  # still one forward: a loss over it must backpropagate (and DDP needs it)
        logits = module(input_ids=input_ids, attention_mask=attention_mask).logits
        logp, entropy = dense_logprobs(logits, input_ids, temperature, with_entropy)
        return logp * 0.0, (entropy * 0.0 if entropy is not None else None)
    packed = _packed_or_none(module, input_ids, attention_mask, selection)
    if packed is not None:
        width = packed.input_ids.shape[1]
        keep = width - int(packed.src_cols.min())
        logits = _kept_logits(
            module,
            keep,
            input_ids=packed.input_ids,
            attention_mask=packed.attention_mask,
            position_ids=packed.position_ids,
        )
        rows, cols = packed.src_rows, packed.src_cols - (width - keep)
    else:
        keep = shape[1] - int(selection.cols.min())
        logits = _kept_logits(module, keep, input_ids=input_ids, attention_mask=attention_mask)
        rows, cols = selection.rows, selection.cols - (shape[1] - keep)
    return picked_logprobs(logits, rows, cols, selection, temperature, shape, with_entropy)


def _packed_or_none(
    module: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, selection: Selection
) -> PackedBatch | None:
    mode = shared_prefix_mode()
    if mode == "off":
        return None
    if not can_pack(module):
        if mode == "on":
            raise ValueError(
                f"{SHARED_PREFIX_ENV}=on, but the model cannot take a packed batch (attention "
                f"{getattr(getattr(_inner(module), 'config', None), '_attn_implementation', None)!r}, "
                f"packing needs one of {list(_PACKING_ATTENTION)} without a sliding window)"
            )
        return None
    dtype = next(_inner(module).parameters()).dtype
    rows, width = input_ids.shape
    config = _inner(module).config
    return pack_shared_prefixes(
        input_ids,
        attention_mask,
        selection,
        dtype,
        worth=lambda g, w: forward_cost(config, g, w) < forward_cost(config, rows, width),
    )


def forward_cost(config: Any, rows: int, width: int) -> float:
    """Rough FLOPs of a forward over [rows, width]: the projections per token plus dense attention per pair.

    Packing trades fewer tokens for longer rows: the attention kernels compute
    every (query, key) pair of a row and mask afterwards, so one group's packed
    row of length p + sum(s) costs (p + sum(s))^2 pairs against sum((p + s)^2)
    apart. With long continuations that can outweigh the prompt saved; the
    trainer packs only when this estimate says it is cheaper.
    """
    hidden = int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    per_token = 2.0 * (4 * hidden * hidden + 3 * hidden * intermediate)
    per_pair = 4.0 * hidden
    return rows * width * per_token + rows * width * width * per_pair
