"""GiGPO's anchor states from the rollout: one key per generated turn (`anchor_ids`).

* on the guess task the key is the environment's `state_key()` before the turn
  (interval still allowed, turn index): replaying each episode's guesses gives
  the same keys; all first turns share one state, so states recur across a group;
* an environment without `state_key()` gets the key of the token context the turn
  is generated from; a failing `state_key()` names the task, method and row;
* split rows (one row per turn) carry the same keys;
* `examples/guess_gigpo.yaml` in a trainer step: advantages equal the verl-agent
  plain-loop reference (tests/trainer/ppo/estimators_reference.gigpo) on the
  step's episodes, rewards and anchors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from runtime_helpers import make_runtime, run

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.rollout.episodes import export_episodes, export_turn_rows
from areal_adv.trainer.rollout.stage_fields import anchor_key
from areal_adv.trainer.rollout.tasks.guess import GuessEnvironment
from areal_adv.trainer.rollout.tasks.runtime import TaskError
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT / "tests" / "trainer" / "ppo") not in sys.path:  # the plain-loop references
    sys.path.insert(0, str(ROOT / "tests" / "trainer" / "ppo"))
from estimators_reference import gigpo as gigpo_reference  # noqa: E402

GUESS = {"num_range": 8, "max_turns": 4, "max_turn_tokens": 2}


def _turn_anchor(rec, span: tuple[int, int]) -> int:
    values = set(rec.anchor_ids[span[0] : span[1]])
    assert len(values) == 1, "one key per turn"
    return values.pop()


def test_guess_anchors_are_the_environment_state_before_each_turn() -> None:
    runtime, model = make_runtime("guess", GUESS, seed=1)
    groups = run(runtime, model, n_prompts=4, n_samples=8)
    states: dict[int, tuple] = {}
    first = set()
    for rec in (r for g in groups for r in g):
        assert len(rec.anchor_ids) == len(rec.tokens)
        env = GuessEnvironment(runtime.task.spec, int(rec.row["hidden"]))
        on_turns = [0] * len(rec.tokens)
        for k, (span, text) in enumerate(zip(rec.turn_spans, rec.turn_texts)):
            key = _turn_anchor(rec, span)
            assert key == anchor_key(env, rec.tokens[: span[0]])
            assert states.setdefault(key, env.state_key()) == env.state_key()  # no two states share a key
            on_turns[span[0] : span[1]] = [key] * (span[1] - span[0])
            if k == 0:
                first.add(key)
            env.step(text)
        assert rec.anchor_ids == on_turns  # 0 on the prompt and the environment's words
    assert len(first) == 1  # every episode starts in the same state
    assert len(states) > 1


def test_without_state_key_the_turn_context_is_the_anchor() -> None:
    runtime, model = make_runtime("arith", {"max_operand": 9})
    groups = run(runtime, model, n_prompts=3, n_samples=4)
    per_group = []
    for records in groups:
        keys = {_turn_anchor(rec, rec.turn_spans[0]) for rec in records}
        assert keys == {anchor_key(object(), records[0].tokens[: records[0].turn_spans[0][0]])}
        per_group.append(keys.pop())
    prompts = [tuple(g[0].tokens[: g[0].turn_spans[0][0]]) for g in groups]
    assert len(set(per_group)) == len(set(prompts))


def test_a_failing_state_key_names_the_task_method_and_row(monkeypatch) -> None:
    runtime, model = make_runtime("guess", GUESS)

    def broken(self):
        raise RuntimeError("no state here")

    monkeypatch.setattr(GuessEnvironment, "state_key", broken)
    with pytest.raises(TaskError, match=r"environment\.state_key\(\), row 0 .*RuntimeError: no state here"):
        run(runtime, model, n_prompts=1, n_samples=2)


def test_split_rows_and_episode_rows_carry_the_same_anchors() -> None:
    runtime, model = make_runtime("guess", GUESS, seed=2)
    for records in run(runtime, model, n_prompts=2, n_samples=4):
        by_episode = export_episodes(records, runtime.pad_token_id)
        by_turn = export_turn_rows(records, runtime.pad_token_id)
        row = 0
        for b, rec in enumerate(records):
            n = len(rec.tokens)
            assert by_episode["anchor_ids"][b, :n].tolist() == rec.anchor_ids
            for start, end in rec.turn_spans:
                assert by_turn["anchor_ids"][row, start:end].tolist() == rec.anchor_ids[start:end]
                assert (by_turn["anchor_ids"][row, :start] == 0).all()
                row += 1


def test_gigpo_guess_step_equals_the_plain_loop_reference(tmp_path) -> None:
    cfg = load_config(
        ROOT / "examples" / "guess_gigpo.yaml",
        [
            "rollout.batch_size=3",
            "rollout.n_samples=6",
            "model.hidden_size=32",
            "model.num_heads=2",
            "model.intermediate_size=64",
            "output.progress_bar=false",
            "output.plot=false",
            "train.num_threads=1",
            f"output.dir={tmp_path}",
        ],
    )
    trainer = Trainer(cfg)
    out = trainer.step(0)
    n = cfg.rollout.n_samples
    groups = [out.records[i : i + n] for i in range(0, len(out.records), n)]
    episodes = [
        [
            {
                "rewards": [0.0] * (len(r.turn_spans) - 1) + [r.reward],
                "anchors": [_turn_anchor(r, s) for s in r.turn_spans],
            }
            for r in g
        ]
        for g in groups
    ]
    n_steps = sum(len(ep["anchors"]) for g in episodes for ep in g)
    n_states = len({(i, a) for i, g in enumerate(episodes) for ep in g for a in ep["anchors"]})
    assert n_states < n_steps  # states recur inside groups: the step-level advantage is not trivially 0
    want_turns = gigpo_reference(episodes, gamma=0.95, step_weight=1.0, mode="mean_norm", eps=1e-6)
    want = torch.zeros_like(out.data["advantages"], dtype=torch.float64)
    flat = [t for g in want_turns for ep in g for t in [ep]]
    for b, (rec, turns) in enumerate(zip(out.records, flat)):
        for (start, end), value in zip(rec.turn_spans, turns):
            want[b, start - 1 : end - 1] = value  # aligned: the logits at t predict token t + 1
    torch.testing.assert_close(out.data["advantages"].double(), want, rtol=1e-5, atol=1e-5)
