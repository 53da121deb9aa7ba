"""The tasks of bench/suite/estimator_suite.py: small problems built so that advantage estimators should differ.

Each is a task plugin (`task.implementation: bench.suite.suite_tasks.make_<name>`)
for the tiny random-init policy with a word tokenizer, so a run takes seconds.
The reason each task should separate estimators is in its docstring and in
`bench/suite/estimator_suite.py`'s task table. All randomness comes from the row
(drawn by the trainer's seeded prompt RNG) or from a `random.Random` the task
seeds itself, so a run is reproducible from its seed.
"""

from __future__ import annotations

import random
from typing import Any

from areal_adv.trainer.rollout.tasks import Environment, StepResult, Task

LETTERS = ("a", "b", "c", "d")


def words_of(text: str) -> list[str]:
    return text.split()


class ReverseTask(Task):
    """Sparse binary reward: `a c =` -> `c a` (reverse `length` letters); 1 iff exact.

    With a uniform random policy over ~8 tokens the chance of `length` = 2 right
    words is a few percent, so most prompt groups of 8 samples are all-zero.
    """

    name = "reverse"

    def __init__(self, length: int = 2) -> None:
        self.length = length
        self.vocabulary = (*LETTERS, "=")
        self.max_turn_tokens = length

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {"letters": [rng.choice(LETTERS) for _ in range(self.length)]}

    def prompt(self, row: dict[str, Any]) -> str:
        return " ".join(row["letters"]) + " ="

    def score(self, row: dict[str, Any], completion: str) -> float:
        return 1.0 if words_of(completion) == list(reversed(row["letters"])) else 0.0


class RepeatTask(Task):
    """Correct answers of very different lengths: `b 4 =` -> `b b b b` (`count` from `counts`), 1 iff exact.

    The answer field holds `max(counts)` words; a shorter answer must end with
    `<eos>`. Short and long answers sit in the same batch, so how the loss
    weighs a response by its length decides which prompts drive the update.
    """

    name = "repeat"

    def __init__(self, counts: tuple[int, ...] = (1, 3)) -> None:
        self.counts = tuple(int(c) for c in counts)
        self.vocabulary = (*LETTERS[:2], *sorted({str(c) for c in self.counts}), "=")
        self.max_turn_tokens = max(self.counts)

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        return {"letter": rng.choice(LETTERS[:2]), "count": rng.choice(self.counts)}

    def prompt(self, row: dict[str, Any]) -> str:
        return f"{row['letter']} {row['count']} ="

    def score(self, row: dict[str, Any], completion: str) -> float:
        return 1.0 if words_of(completion) == [row["letter"]] * int(row["count"]) else 0.0


class EchoEnvironment(Environment):
    """`turns` turns of one word each; a `say X` turn is decisive (write X), a `free` turn is not.

    The environment answers `ok` or `no` after a decisive turn and `ok` after a
    free one, then the next instruction; the episode reward (1 iff every
    decisive turn was right) comes only after the last turn. The per-turn
    process score is 1 (right or free) or 0 (wrong), each flipped with
    probability `noise` by the task's own seeded RNG; `signed` maps it to +1 / -1.
    """

    def __init__(self, row: dict[str, Any], noise: float, signed: bool, rng: random.Random) -> None:
        self.plan, self.noise, self.signed, self.rng = row["plan"], noise, signed, rng
        self.turn, self.failed, self.last = 0, False, "go"

    def instruction(self) -> str:
        target = self.plan[self.turn]
        return "free" if target is None else f"say {target}"

    def reset(self) -> str:
        return self.instruction()

    def state_key(self) -> tuple[int, bool, str]:
        """What the policy has seen: the turn, whether a `no` came, the instruction (GiGPO's anchor)."""
        return (self.turn, self.failed, self.instruction())

    def step(self, action: str) -> StepResult:
        target = self.plan[self.turn]
        words = words_of(action)
        right = target is None or (len(words) == 1 and words[0] == target)
        self.failed = self.failed or not right
        score = float(right) if self.rng.random() >= self.noise else float(not right)
        if self.signed:
            score = 2.0 * score - 1.0
        self.turn += 1
        if self.turn == len(self.plan):
            return StepResult(reward=0.0 if self.failed else 1.0, done=True, process_score=score)
        word = "ok" if right else "no"
        return StepResult(observation=f" {word} {self.instruction()}", process_score=score)


class EchoTask(Task):
    """Multi-turn, reward only at the end: `turns` turns, `decisive` of them (random positions) must echo a word.

    Trajectory-level estimators give every turn the episode's advantage, so a
    free turn's word and a right decisive turn in a failed episode get blamed;
    turn-level estimators (a critic over turns, GiGPO's anchor states, per-turn
    rewards) can credit the decisive turns alone.
    """

    name = "echo"
    multi_turn = True
    has_process_scorer = True

    def __init__(
        self, turns: int = 4, decisive: int = 2, noise: float = 0.0, process_reward: str = "unit", seed: int = 0
    ) -> None:
        if not 1 <= decisive <= turns:
            raise ValueError(f"task.kwargs.decisive: got {decisive}, expected an integer in [1, turns={turns}]")
        if process_reward not in ("unit", "signed"):
            raise ValueError(f"task.kwargs.process_reward: got {process_reward!r}, expected 'unit' or 'signed'")
        self.turns, self.decisive, self.noise = turns, decisive, float(noise)
        self.signed = process_reward == "signed"
        self.rng = random.Random(seed)  # the process scores' noise: one stream per run, drawn in rollout order
        self.vocabulary = (*LETTERS[:2], "say", "free", "ok", "no")
        self.max_turn_tokens = 1

    def sample(self, rng: random.Random, split: str) -> dict[str, Any]:
        positions = set(rng.sample(range(self.turns), self.decisive))
        return {"plan": [rng.choice(LETTERS[:2]) if t in positions else None for t in range(self.turns)]}

    def environment(self, row: dict[str, Any]) -> EchoEnvironment:
        return EchoEnvironment(row, self.noise, self.signed, self.rng)

    def state_dict(self) -> dict[str, Any]:
        """The noise stream's position: checkpoints save it, so a resumed run draws the same noise."""
        version, internal, gauss = self.rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def _letter_of(completion: Any) -> str:
    text = completion if isinstance(completion, str) else completion[-1]["content"]
    words = words_of(text)
    return words[0] if words else ""


def any_letter(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
    """The common component: 1 when the answer starts with a letter (chance about one half)."""
    return [1.0 if _letter_of(c) in LETTERS else 0.0 for c in completions]


def make_reverse(length: int = 2) -> ReverseTask:
    return ReverseTask(length)


def make_repeat(counts: list[int] | tuple[int, ...] = (1, 3)) -> RepeatTask:
    return RepeatTask(tuple(counts))


def make_echo(
    turns: int = 4, decisive: int = 2, noise: float = 0.0, process_reward: str = "unit", seed: int = 0
) -> EchoTask:
    return EchoTask(turns, decisive, noise, process_reward, seed)
