"""The batch fields the trainer adds for stages: prompt keys, behaviour entropies; stateful runs.

* `prompt_keys` are one stable 64-bit key per prompt (the same in another
  process, so a resumed run finds its per-prompt state again);
* `token_entropy` is computed only for stages that read it, with the policy
  that sampled the batch, and equals the entropy of softmax(logits / T) by hand;
  `sum_pi_squared` likewise equals sum softmax(logits / T)^2, from the same pass;
* in a Trainer step with the entropy preset, the advantages are GRPO's plus
  min(alpha H, |A| / kappa); with KRPO the actor's state grows with the prompts seen.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.trainer.rollout.stage_fields import (
    add_prompt_keys,
    behaviour_entropy,
    behaviour_token_stats,
    prompt_key,
    stage_batch_fields,
)
from areal_adv.trainer.run.loop import Trainer

ROOT = Path(__file__).resolve().parents[3]
PRESETS = ROOT / "examples" / "presets"
TINY = [
    "rollout.batch_size=3",
    "rollout.n_samples=3",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "output.plot=false",
    "train.num_threads=1",
    "actor.max_new_tokens=4",
]


@dataclass(frozen=True)
class Problem:
    a: int
    b: int


def test_prompt_keys_are_stable_and_distinguish_prompts():
    keys = {prompt_key(Problem(a, b)) for a in range(5) for b in range(5)}
    assert len(keys) == 25
    assert prompt_key({"question": "1+1", "answer": 2}) == prompt_key({"answer": 2, "question": "1+1"})
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from areal_adv.trainer.rollout.stage_fields import prompt_key;"
        "print(prompt_key({'question': 'x', 'n': [1, 2]}))"
    )
    other = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, check=True)
    assert int(other.stdout) == prompt_key({"question": "x", "n": [1, 2]})  # not Python's salted hash
    groups = add_prompt_keys(
        [{"input_ids": torch.zeros(3, 4)}, {"input_ids": torch.zeros(2, 4)}], [Problem(1, 2), Problem(2, 1)]
    )
    assert groups[0]["prompt_keys"].tolist() == [prompt_key(Problem(1, 2))] * 3
    assert groups[1]["prompt_keys"].dtype == torch.long and groups[1]["prompt_keys"].shape == (2,)


def test_behaviour_entropy_equals_the_definition(tmp_path):
    trainer = Trainer(load_config(PRESETS / "grpo_entropy.yaml", [*TINY, f"output.dir={tmp_path}"]))
    ids = torch.randint(3, 10, (5, 7))
    mask = torch.ones(5, 7, dtype=torch.long)
    mask[1, 5:] = 0
    got = behaviour_entropy(trainer.policy, ids, mask, 0.7, rows_per_chunk=2)
    with torch.no_grad():
        logits = trainer.policy(input_ids=ids, attention_mask=mask).logits.double() / 0.7
    p = torch.softmax(logits, dim=-1)
    want = torch.zeros(5, 7, dtype=torch.float64)
    for b in range(5):
        for t in range(1, 7):
            if mask[b, t]:
                want[b, t] = -(p[b, t - 1] * p[b, t - 1].log()).sum()
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def test_sum_pi_squared_equals_a_plain_softmax_and_shares_the_entropy_pass(tmp_path):
    trainer = Trainer(load_config(PRESETS / "optimal_token_baseline.yaml", [*TINY, f"output.dir={tmp_path}"]))
    ids = torch.randint(3, 10, (5, 7))
    mask = torch.ones(5, 7, dtype=torch.long)
    mask[2, 4:] = 0
    calls = []
    forward = trainer.policy.forward
    trainer.policy.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    got = behaviour_token_stats(trainer.policy, ids, mask, 0.7, {"sum_pi_squared", "token_entropy"}, rows_per_chunk=5)
    assert calls == [1] and set(got) == {"sum_pi_squared", "token_entropy"}
    del trainer.policy.forward
    with torch.no_grad():
        logits = trainer.policy(input_ids=ids, attention_mask=mask).logits.double() / 0.7
    want = torch.zeros(5, 7, dtype=torch.float64)
    for b in range(5):
        for t in range(1, 7):
            if mask[b, t]:
                p = [float(x) for x in torch.softmax(logits[b, t - 1], dim=-1)]
                want[b, t] = sum(x * x for x in p)
    torch.testing.assert_close(got["sum_pi_squared"].double(), want, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(got["token_entropy"], behaviour_entropy(trainer.policy, ids, mask, 0.7))
    assert behaviour_token_stats(trainer.policy, ids, mask, 0.7, {"anchor_ids"}) == {}


def test_otb_preset_step_reads_the_trainers_sum_pi_squared(tmp_path):
    """The step adds Σπ² (not the entropy) and the pipeline's OTB reads it; without it the step names the field."""
    cfg = load_config(PRESETS / "optimal_token_baseline.yaml", [*TINY, f"output.dir={tmp_path}"])
    trainer = Trainer(cfg)
    assert stage_batch_fields(trainer.actor.resolved) == {"sum_pi_squared", "rollout_is_weights"}
    seen = {}
    compute = trainer.compute_advantages

    def record(batch, meta):
        seen["batch"], seen["meta"] = dict(batch), meta
        return compute(batch, meta)

    trainer.compute_advantages = record
    out = trainer.step(0)
    assert "sum_pi_squared" in out.batch and "token_entropy" not in out.batch
    mask = out.batch["loss_mask"].bool()
    spp, pi = out.batch["sum_pi_squared"][mask], out.batch["logprobs"][mask].exp()
    assert bool((spp >= pi**2 - 1e-5).all()) and bool((spp <= 1 + 1e-5).all())  # one distribution's Σπ² and π_t
    again = PPOActor(cfg.actor).compute_advantages(seen["batch"], seen["meta"])["advantages"]
    torch.testing.assert_close(out.data["advantages"], again)
    without = {k: v for k, v in seen["batch"].items() if k != "sum_pi_squared"}
    with pytest.raises(ValueError, match="'optimal_token_baseline': the batch has no 'sum_pi_squared'"):
        PPOActor(cfg.actor).compute_advantages(without, seen["meta"])


def test_otb_under_bf16_computes_sum_pi_squared_at_the_rollouts_precision(tmp_path):
    """Under bf16 autocast Σπ² comes from a bf16 forward like the sampled log-probs: a confident policy's
    near-deterministic tokens keep Σπ² >= π_t² (a float32 Σπ² against the bf16 log-probs falls short by
    4.5e-6 relative here, and by 2.5e-3 on the default run's model: the estimator would refuse that)."""
    cfg = load_config(
        PRESETS / "optimal_token_baseline.yaml", [*TINY, f"output.dir={tmp_path}", "model.mixed_precision=bf16"]
    )
    trainer = Trainer(cfg)
    with torch.no_grad():  # a confident policy: most sampled tokens have pi_t > 0.99
        dict(trainer.policy.named_parameters())["model.norm.weight"].mul_(100.0)
    out = trainer.step(0)
    mask = out.batch["loss_mask"].bool()
    spp, pi = out.batch["sum_pi_squared"][mask].double(), out.batch["logprobs"][mask].double().exp()
    assert float((pi > 0.99).double().mean()) > 0.5
    assert float((spp - pi**2).min()) > -1e-6


def test_entropy_preset_step_adds_the_clipped_entropy_term(tmp_path):
    cfg = load_config(PRESETS / "grpo_entropy.yaml", [*TINY, f"output.dir={tmp_path}"])
    trainer = Trainer(cfg)
    assert stage_batch_fields(trainer.actor.resolved) == {"token_entropy"}
    seen = {}
    compute = trainer.compute_advantages

    def record(batch, meta):
        seen["batch"], seen["meta"] = dict(batch), meta
        return compute(batch, meta)

    trainer.compute_advantages = record
    out = trainer.step(0)
    assert "token_entropy" in out.batch
    mask = out.data["loss_mask"].bool()
    entropy = torch.roll(out.batch["token_entropy"], -1, dims=1)
    plain = load_config(PRESETS / "grpo_entropy.yaml", ["actor.advantage.process_adv_shaping=null"]).actor
    batch = {k: v for k, v in seen["batch"].items() if k != "token_entropy"}
    base = PPOActor(plain).compute_advantages(batch, seen["meta"])["advantages"]
    want = torch.where(mask, base + torch.minimum(0.4 * entropy, base.abs() / 2.0), base)
    torch.testing.assert_close(out.data["advantages"], want)
    assert bool((out.data["advantages"] != base).any())


def test_stages_that_do_not_read_entropy_cost_no_forward(tmp_path):
    trainer = Trainer(load_config(PRESETS / "grpo.yaml", [*TINY, f"output.dir={tmp_path}"]))
    assert stage_batch_fields(trainer.actor.resolved) == frozenset()
    assert "token_entropy" not in trainer.step(0).batch


def test_krpo_run_keeps_one_filter_per_prompt_seen(tmp_path):
    trainer = Trainer(load_config(PRESETS / "krpo.yaml", [*TINY, f"output.dir={tmp_path}", "train.steps=3"]))
    seen: set[int] = set()
    for step in range(3):
        out = trainer.step(step)
        seen |= set(out.batch["prompt_keys"].tolist())
        state = trainer.actor.stage_states["outcome_reward_shaping"]
        assert set(state.get("prompt_keys").tolist()) == seen
