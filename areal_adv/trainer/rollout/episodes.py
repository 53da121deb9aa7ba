"""Multi-turn rollout of prompt groups and their export as trajectory-group dicts.

`collect_episodes` runs every episode of a step in lock-step turns (one batched
sampling call per turn): the task's prompt is encoded with the model's
tokenizer, each generated turn is decoded to text for the environment, and
its observation is encoded back (no special tokens; context only). After the
last turn the reward set scores every episode (the task's own score plus the
reward functions). The exporters turn each prompt's episodes into the tensor
dict that `areal_adv.utils.data.concat_batch` takes: one row per episode, or one
row per generated turn with `RolloutGroup` metadata (split rollouts).
Layout (unshifted, right-padded): `loss_mask` 1 only on generated tokens,
`turn_ids` the turn index there and -1 elsewhere, `logprobs` the behaviour
log-prob of token t at t, `token_rewards` the turn's process score on its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from areal_adv.trainer.lm.codec import Text
from areal_adv.trainer.lm.sampling import sample_continuations
from areal_adv.trainer.rollout.reward_functions import RewardBreakdown
from areal_adv.trainer.rollout.stage_fields import anchor_key
from areal_adv.trainer.rollout.tasks.runtime import Episode, TaskError, TaskRuntime


@dataclass
class EpisodeRecord:
    """Everything recorded about one sampled episode (unpadded lists, plus its text)."""

    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn_ids: list[int]
    token_rewards: list[float]
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    reward: float = 0.0
    truncated: bool = False
    prompt: Text | None = None
    row: dict[str, Any] = field(default_factory=dict)
    turn_texts: list[str] = field(default_factory=list)
    observations: list[Text] = field(default_factory=list)
    env_reward: float = 0.0
    rewards: dict[str, float] = field(default_factory=dict)
    completion: str = ""
    anchor_ids: list[int] = field(default_factory=list)  # the turn's anchor-state key on its tokens, else 0

    @classmethod
    def start(cls, prompt_ids: Sequence[int]) -> EpisodeRecord:
        n = len(prompt_ids)
        return cls(list(prompt_ids), [0] * n, [0.0] * n, [-1] * n, [0.0] * n, anchor_ids=[0] * n)

    def add_turn(self, ids: Sequence[int], logprobs: Sequence[float], score: float | None, anchor: int = 0) -> None:
        start, turn = len(self.tokens), len(self.turn_spans)
        self.tokens += ids
        self.loss_mask += [1] * len(ids)
        self.logprobs += logprobs
        self.turn_ids += [turn] * len(ids)
        self.token_rewards += [score or 0.0] * len(ids)
        self.anchor_ids += [anchor] * len(ids)
        self.turn_spans.append((start, len(self.tokens)))

    def add_environment(self, ids: Sequence[int]) -> None:
        n = len(ids)
        self.tokens += ids
        self.loss_mask += [0] * n
        self.logprobs += [0.0] * n
        self.turn_ids += [-1] * n
        self.token_rewards += [0.0] * n
        self.anchor_ids += [0] * n

    @property
    def generated_tokens(self) -> int:
        return sum(self.loss_mask)

    @property
    def completion_ids(self) -> list[int]:
        """Everything after the prompt: generated turns and the observations between them."""
        return self.tokens[self.turn_spans[0][0] :] if self.turn_spans else []


@dataclass
class _Live:
    episode: Episode
    record: EpisodeRecord
    budget: int


def _turn_caps(runtime: TaskRuntime, active: Sequence[_Live]) -> list[int]:
    """Tokens each active episode may generate this turn; the context must fit the model."""
    cap = runtime.max_turn_tokens
    caps = [item.budget if cap is None else min(cap, item.budget) for item in active]
    limit = runtime.max_length
    if limit is not None:
        for item, c in zip(active, caps):
            if len(item.record.tokens) + c > limit:  # the run's prompts and config: a one-line error
                raise TaskError(
                    f"{runtime.where('rollout', item.episode.index)}: a context of {len(item.record.tokens)} tokens "
                    f"plus {c} to generate exceeds the model's max_position_embeddings={limit}; shorten the "
                    "prompts, lower rollout.max_new_tokens, or (random init) raise model.max_position_embeddings"
                )
    return caps


def _open_all(runtime: TaskRuntime, rows: Sequence[dict[str, Any]], n_samples: int, budget: int) -> list[_Live]:
    live = []
    for index, row in enumerate(rows):
        for _ in range(n_samples):
            episode = runtime.open(row, index)
            record = EpisodeRecord.start(episode.prompt_ids)
            record.prompt, record.row = episode.prompt, row
            live.append(_Live(episode, record, budget))
    return live


def _anchor(runtime: TaskRuntime, episode: Episode, context: Sequence[int]) -> int:
    """The turn's anchor key; a failing `state_key()` of a plugin environment is named with its row."""
    try:
        return anchor_key(episode.env, context)
    except Exception as exc:
        raise TaskError(
            f"{runtime.where('environment.state_key()', episode.index, episode.row)}: {type(exc).__name__}: {exc}"
        ) from exc


def collect_episodes(
    model: PreTrainedModel,
    runtime: TaskRuntime,
    rows: Sequence[dict[str, Any]],
    n_samples: int,
    *,
    budget: int,
    temperature: float,
    generator: torch.Generator | None = None,
    process_rewards: bool = False,
    greedy: bool = False,
) -> list[list[EpisodeRecord]]:
    """Sample `n_samples` scored episodes per row; returns one list of records per row."""
    live = _open_all(runtime, rows, n_samples, budget)
    turn_cap = runtime.max_turn_tokens
    active = list(live)
    while active:
        caps = _turn_caps(runtime, active)
        outs = sample_continuations(
            model,
            [item.record.tokens for item in active],
            caps,
            runtime.stop_token_ids,
            temperature=temperature,
            pad_id=runtime.pad_token_id,
            generator=generator,
            greedy=greedy,
        )
        still = []
        for item, out in zip(active, outs):
            cut_by_budget = not out.stopped and (turn_cap is None or len(out.token_ids) < turn_cap)
            text = runtime.codec.decode(out.token_ids)
            rec = item.record
            anchor = _anchor(runtime, item.episode, rec.tokens)  # the state this turn acts in (GiGPO)
            result = runtime.step(item.episode, text)
            rec.add_turn(out.token_ids, out.logprobs, result.process_score if process_rewards else None, anchor)
            rec.turn_texts.append(text)
            rec.env_reward += float(result.reward)
            item.budget -= len(out.token_ids)
            if result.done or cut_by_budget or item.budget <= 0:
                rec.truncated = cut_by_budget or not result.done
                continue
            observation = result.observation if result.observation is not None else ""
            rec.add_environment(runtime.codec.encode_observation(observation, out.token_ids))
            rec.observations.append(observation)
            still.append(item)
        active = still
    score_records(runtime, live)
    return [[item.record for item in live[i * n_samples : (i + 1) * n_samples]] for i in range(len(rows))]


def score_records(runtime: TaskRuntime, live: Sequence[_Live]) -> RewardBreakdown:
    """Every episode's reward components and total (the weighted sum), stored on its record."""
    records = [item.record for item in live]
    completions = [runtime.codec.decode(rec.completion_ids) for rec in records]
    breakdown = runtime.score(
        [item.episode for item in live],
        completions,
        [r.completion_ids for r in records],
        [r.env_reward for r in records],
    )
    for i, rec in enumerate(records):
        rec.rewards = breakdown.row(i)
        rec.completion = completions[i]
        rec.reward = float(breakdown.total[i])
    return breakdown


def _pad_rows(rows: Sequence[Sequence[Any]], value: Any, dtype: torch.dtype) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
    return out


#: The reward set's component names and weights, for exporting every component ([rows, K] rewards).
RewardNames = tuple[tuple[str, ...], tuple[float, ...]]


def _rows_to_tensors(
    rows: Sequence[EpisodeRecord], pad_id: int, with_process: bool, components: RewardNames | None = None
) -> dict[str, Any]:
    batch: dict[str, Any] = {
        "input_ids": _pad_rows([r.tokens for r in rows], pad_id, torch.long),
        "attention_mask": _pad_rows([[1] * len(r.tokens) for r in rows], 0, torch.long),
        "loss_mask": _pad_rows([r.loss_mask for r in rows], 0, torch.long),
        "logprobs": _pad_rows([r.logprobs for r in rows], 0.0, torch.float32),
        "turn_ids": _pad_rows([r.turn_ids for r in rows], -1, torch.long),
        "rewards": torch.tensor([r.reward for r in rows], dtype=torch.float32),
        "is_truncated": torch.tensor([r.truncated for r in rows], dtype=torch.bool),
        "anchor_ids": _pad_rows([r.anchor_ids for r in rows], 0, torch.long),
    }
    if with_process:
        batch["token_rewards"] = _pad_rows([r.token_rewards for r in rows], 0.0, torch.float32)
    if components is not None:  # rewards [rows, K]: every component, named (the outcome stage reduces them)
        names, weights = components
        batch["rewards"] = torch.tensor([[r.rewards[n] for n in names] for r in rows], dtype=torch.float32)
        batch["reward_keys"], batch["reward_weights"] = tuple(names), tuple(float(w) for w in weights)
    return batch


def export_episodes(
    records: Sequence[EpisodeRecord], pad_id: int, *, with_process: bool = False, components: RewardNames | None = None
) -> dict[str, Any]:
    """One prompt group, one tensor row per episode (`components`: rewards as [rows, K] named components)."""
    return _rows_to_tensors(records, pad_id, with_process, components)


def turn_row(record: EpisodeRecord, turn: int) -> EpisodeRecord:
    """The row for one turn: prefix context plus that turn; only that turn is trained on.

    The row is a single-turn trajectory, so its turn carries turn id 0.
    """
    start, end = record.turn_spans[turn]
    row = EpisodeRecord.start(record.tokens[:start])
    row.add_turn(record.tokens[start:end], record.logprobs[start:end], None, record.anchor_ids[start])
    row.token_rewards[start:end] = record.token_rewards[start:end]
    row.reward, row.truncated, row.rewards = record.reward, record.truncated, record.rewards
    return row


def export_turn_rows(
    records: Sequence[EpisodeRecord],
    pad_id: int,
    *,
    with_process: bool = False,
    explicit_rewards: bool = False,
    components: RewardNames | None = None,
) -> dict[str, Any]:
    """One prompt group, one tensor row per generated turn, plus its `RolloutGroup`.

    Every row of an episode carries the episode's reward; `row_counts` maps rows
    back to logical rollouts; `explicit_rewards` also ships the episode rewards as
    the group's reference rewards.
    """
    from areal_adv.utils.data import RolloutGroup

    rows = [turn_row(rec, t) for rec in records for t in range(len(rec.turn_spans))]
    batch: dict[str, Any] = _rows_to_tensors(rows, pad_id, with_process, components)
    counts = [len(rec.turn_spans) for rec in records]
    rewards = torch.tensor([rec.reward for rec in records], dtype=torch.float32) if explicit_rewards else None
    batch["rollout_group"] = RolloutGroup(row_counts=counts, rewards=rewards)
    return batch


def add_reward_baselines(group: dict[str, Any], baseline: float) -> dict[str, Any]:
    """ReMax-style `reward_baselines` [rows]: the prompt's greedy reward, repeated for each row."""
    rows = group["input_ids"].shape[0]
    return {**group, "reward_baselines": torch.full((rows,), float(baseline), dtype=torch.float32)}


def groups_to_device(groups: Sequence[dict[str, Any]], device: torch.device) -> list[dict[str, Any]]:
    """The trajectory-group dicts with every tensor (including `RolloutGroup.rewards`) on `device`.

    Rollouts are exported on CPU; a data-parallel rank on a GPU moves them before
    `concat_batch`, so the batch, its metadata and the advantage pipeline's
    all-reduces (nccl needs CUDA tensors) live on the rank's device.
    """
    import dataclasses

    from areal_adv.utils.data import RolloutGroup

    out = []
    for group in groups:
        moved: dict[str, Any] = {}
        for key, value in group.items():
            if isinstance(value, torch.Tensor):
                value = value.to(device)
            elif isinstance(value, RolloutGroup) and value.rewards is not None:
                value = dataclasses.replace(value, rewards=value.rewards.to(device))
            moved[key] = value
        out.append(moved)
    return out
