"""Random verl DataProtos as verl's trainer builds them, for the integration tests.

Responses are right-padded to R positions; multi-turn rows have environment
gaps (response_mask 0 inside the response); the reward manager's score sits at
the last response token; groups (`uid`) are interleaved as after verl's batch
balancing. Every tensor is a fresh copy per call, because verl's
`compute_advantage` writes into the DataProto it is given.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from verl import DataProto

PROMPT = 3


@dataclass(frozen=True)
class VerlBatch:
    """The tensors of one random batch; `proto()` builds a fresh DataProto from them."""

    tensors: dict[str, torch.Tensor]
    uid: np.ndarray
    lengths: torch.Tensor

    def proto(self, *keys: str) -> DataProto:
        chosen = self.tensors if not keys else {k: self.tensors[k] for k in keys}
        return DataProto.from_dict(
            tensors={k: v.clone() for k, v in chosen.items()}, non_tensors={"uid": self.uid.copy()}
        )


def _response_mask(rng: random.Random, length: int, width: int, multi_turn: bool) -> list[int]:
    row = [1] * length + [0] * (width - length)
    if multi_turn and length >= 4:
        for _ in range(rng.randint(0, 2)):  # environment spans strictly inside the response
            start = rng.randint(1, length - 2)
            for j in range(start, min(start + rng.randint(1, 2), length - 1)):
                row[j] = 0
    return row


def make_batch(
    seed: int,
    sizes: list[int],
    *,
    width: int = 10,
    multi_turn: bool = True,
    binary: bool = False,
    shuffle: bool = True,
    full_rows: bool = True,
) -> VerlBatch:
    """Groups of `sizes` responses; scores at each row's last (generated) response token."""
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    uids = [f"prompt-{g}" for g, n in enumerate(sizes) for _ in range(n)]
    B = len(uids)
    lengths = [width if full_rows and rng.random() < 0.2 else rng.randint(1, width) for _ in range(B)]
    mask = torch.tensor([_response_mask(rng, n, width, multi_turn) for n in lengths], dtype=torch.float32)
    length = torch.tensor(lengths)
    scores = torch.zeros(B, width)
    raw = torch.randint(0, 2, (B,), generator=gen).float() if binary else torch.randn(B, generator=gen)
    scores[torch.arange(B), length - 1] = raw
    attention = torch.cat([torch.ones(B, PROMPT), (torch.arange(width)[None, :] < length[:, None]).float()], dim=1)
    old = -torch.rand(B, width, generator=gen) * 2 * mask
    tensors = {
        "responses": torch.randint(3, 50, (B, width), generator=gen) * (attention[:, PROMPT:] > 0),
        "attention_mask": attention.long(),
        "response_mask": mask,
        "token_level_scores": scores,
        "token_level_rewards": scores.clone(),
        "values": torch.randn(B, width, generator=gen) * mask,
        "old_log_probs": old,
        "ref_log_prob": old + 0.3 * torch.randn(B, width, generator=gen) * mask,
    }
    order = list(range(B))
    if shuffle:
        rng.shuffle(order)
    index = torch.tensor(order)
    tensors = {k: v[index] for k, v in tensors.items()}
    return VerlBatch(tensors=tensors, uid=np.array([uids[i] for i in order], dtype=object), lengths=length[index])
