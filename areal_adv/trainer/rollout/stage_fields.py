"""The batch fields the trainer adds for advantage stages that read more than rewards and masks.

* `rewards` [rows, K] with `reward_keys` / `reward_weights` when the reward set
  has several components (the task's score and reward functions): every outcome
  stage can then see each component (`reward_components`); one component stays
  a plain [rows] reward.
* `prompt_keys` [rows] int64 on every trajectory group: one stable key per prompt
  (blake2b of its canonical form, the same in every process and after a resume,
  unlike Python's salted `hash`), for per-prompt state (KRPO, SPO). Always added:
  it costs nothing.
* `token_entropy` [B, T]: the behaviour policy's entropy of the distribution that
  sampled each token, stored at the token like `logprobs`. It takes one extra
  forward pass, so it is computed only when a configured stage declares that it
  reads it (`batch_fields = ("token_entropy",)` on the stage function, as the
  built-in `entropy_advantage` does; a plugin may declare it the same way).
* `sum_pi_squared` [B, T]: Σ_a π(a)² of the same distribution, stored likewise, for
  the optimal token baseline (`optimal_token_baseline`, `tir_optimal_token_baseline`
  declare it). When both are read, one forward pass gives both.

* `role_ids` / `game_ids` [rows] int64 (RAE's seat and game): from each problem
  row's `role_id` (an integer) and optional `game_id` (an integer, or a string that
  is hashed to one), added only when a configured stage declares it reads them.

* `anchor_ids` (GiGPO's per-turn state keys): the rollout records, before each
  turn, `anchor_key(env, context)` — the environment's own `state_key()` when it
  has one (the guess task: the interval the feedback still allows and the turn),
  else the token context the turn is generated from.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from areal_adv.api.config_checks import is_integer
from areal_adv.trainer.lm.logprobs import entropy_from_logp, sum_pi_squared_from_logp
from areal_adv.trainer.ppo.checks.aux_fields import BATCH_FIELDS_ATTRIBUTE, declared_fields

if TYPE_CHECKING:
    from areal_adv.trainer.parallel.engine import PolicyEngine

__all__ = [
    "BATCH_FIELDS_ATTRIBUTE",
    "BEHAVIOUR_FIELDS",
    "add_prompt_keys",
    "add_seat_ids",
    "anchor_key",
    "behaviour_entropy",
    "behaviour_token_stats",
    "prompt_key",
    "reward_components",
    "sampled_token_stats",
    "stage_batch_fields",
]

#: The per-token fields `behaviour_token_stats` computes from the behaviour policy's next-token distribution.
BEHAVIOUR_FIELDS = ("token_entropy", "sum_pi_squared")


def _canonical(problem: Any) -> str:
    """A deterministic text form of a prompt row / problem (mappings sorted, dataclasses by field)."""
    if dataclasses.is_dataclass(problem) and not isinstance(problem, type):
        problem = {"__type__": type(problem).__qualname__, **dataclasses.asdict(problem)}
    try:
        return json.dumps(problem, sort_keys=True, default=repr, ensure_ascii=False)
    except TypeError:  # keys that are not strings
        return repr(problem)


def _key(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little", signed=True)


def prompt_key(problem: Any) -> int:
    """A signed 64-bit key of the problem, stable across processes, ranks and resumes."""
    return _key(_canonical(problem).encode("utf-8"))


def anchor_key(env: Any, context: Sequence[int]) -> int:
    """A signed 64-bit key of the state a turn acts in.

    The environment's `state_key()` (any JSON-able value) when it defines one;
    otherwise the token ids the turn is generated from, i.e. the observation the
    policy sees. Two turns with the same key are GiGPO's same anchor state.
    """
    state_key = getattr(env, "state_key", None)
    if callable(state_key):
        return _key(b"state:" + _canonical(state_key()).encode("utf-8"))
    return _key(b"tokens:" + array.array("q", context).tobytes())


def add_prompt_keys(groups: Sequence[Mapping[str, Any]], problems: Sequence[Any]) -> list[dict[str, Any]]:
    """New trajectory-group dicts, each with `prompt_keys` [rows] holding its problem's key."""
    if len(groups) != len(problems):
        raise ValueError(f"add_prompt_keys: {len(groups)} trajectory groups for {len(problems)} problems")
    out = []
    for group, problem in zip(groups, problems):
        rows = group["input_ids"].shape[0]
        out.append({**group, "prompt_keys": torch.full((rows,), prompt_key(problem), dtype=torch.long)})
    return out


def _seat_id(problem: Any, name: str, required: bool) -> int:
    value = problem.get(name) if isinstance(problem, Mapping) else getattr(problem, name, None)
    if value is None and not required:
        return 0
    if isinstance(value, str):
        return _key(b"game:" + value.encode("utf-8")) & 0x7FFFFFFF
    if not is_integer(value, low=0, high=2**31 - 1):
        raise ValueError(
            f"the problem row's {name!r} is {value!r:.60}, expected an integer in [0, 2^31)"
            + (" or a string" if name == "game_id" else "")
            + f"; the configured stage reads {name}s "
            "(RAE: the seat the policy played and the game), so the task's rows must carry one"
        )
    return value


def add_seat_ids(groups: Sequence[Mapping[str, Any]], problems: Sequence[Any]) -> list[dict[str, Any]]:
    """New trajectory-group dicts with `role_ids` / `game_ids` [rows] from each problem's `role_id` / `game_id`."""
    if len(groups) != len(problems):
        raise ValueError(f"add_seat_ids: {len(groups)} trajectory groups for {len(problems)} problems")
    out = []
    for group, problem in zip(groups, problems):
        rows = group["input_ids"].shape[0]
        role, game = _seat_id(problem, "role_id", True), _seat_id(problem, "game_id", False)
        out.append(
            {
                **group,
                "role_ids": torch.full((rows,), role, dtype=torch.long),
                "game_ids": torch.full((rows,), game, dtype=torch.long),
            }
        )
    return out


def reward_components(reward_set: Any) -> tuple[tuple[str, ...], tuple[float, ...]] | None:
    """(names, weights) of a reward set with several components, else None (a plain [B] reward)."""
    names = tuple(getattr(reward_set, "names", ()) or ())
    if len(names) < 2:
        return None
    return names, tuple(float(w) for w in reward_set.weights)


def stage_batch_fields(resolved: Any) -> frozenset[str]:
    """The optional batch fields the configured stage functions declare they read."""
    stages = (resolved.compute, resolved.outcome, resolved.estimator, resolved.process)
    return frozenset().union(*(declared_fields(s.fn) for s in stages if s is not None))


_STATS = {"token_entropy": entropy_from_logp, "sum_pi_squared": sum_pi_squared_from_logp}


@torch.no_grad()
def behaviour_token_stats(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    fields: Collection[str],
    *,
    rows_per_chunk: int = 16,
) -> dict[str, torch.Tensor]:
    """{field: [B, T] float32} for the wanted `BEHAVIOUR_FIELDS`, from one forward pass and one log_softmax.

    Each value is a statistic of softmax(logits / temperature) that predicted token
    t, stored at t (0 at t = 0 and on padding): the entropy -Σ p log p and Σ p².
    Row chunks bound the [rows, T, vocab] memory of the forward pass.
    """
    wanted = [name for name in BEHAVIOUR_FIELDS if name in fields]
    if not wanted:
        return {}
    was_training = model.training
    model.eval()
    try:
        chunks: dict[str, list[torch.Tensor]] = {name: [] for name in wanted}
        for start in range(0, input_ids.shape[0], rows_per_chunk):
            ids, mask = input_ids[start : start + rows_per_chunk], attention_mask[start : start + rows_per_chunk]
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            for name in wanted:
                value = _STATS[name](logp)
                chunks[name].append(torch.nn.functional.pad(value, (1, 0)) * mask.to(value.dtype))
        return {name: torch.cat(parts, dim=0) for name, parts in chunks.items()}
    finally:
        model.train(was_training)


def behaviour_entropy(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float,
    *,
    rows_per_chunk: int = 16,
) -> torch.Tensor:
    """[B, T] float32: entropy of softmax(logits / temperature) that predicted token t, stored at t (0 at t = 0)."""
    return behaviour_token_stats(
        model, input_ids, attention_mask, temperature, ("token_entropy",), rows_per_chunk=rows_per_chunk
    )["token_entropy"]


def sampled_token_stats(
    engine: PolicyEngine,
    batch: Mapping[str, Any],
    temperature: float,
    fields: Collection[str],
    *,
    rows_per_chunk: int = 16,
) -> dict[str, torch.Tensor]:
    """The behaviour statistics (`token_entropy`, `sum_pi_squared`) in `fields`, of the distribution that sampled.

    That is `engine.sampled_by`: under `rollout.weights_dtype` the cast copy, not the
    trained weights. The noise proxy pairs Σπ² with the sampled log-probs (1 - 2π_t + Σπ²
    is a squared distance only within one distribution), and the shadows must read what
    the run's own stages read; in the rollout's autocast, like the sampling.
    """
    with engine.autocast():
        return behaviour_token_stats(
            engine.sampled_by,
            batch["input_ids"],
            batch["attention_mask"],
            temperature,
            fields,
            rows_per_chunk=rows_per_chunk,
        )
