"""Data-parallel training with 2 gloo ranks on CPU, through the real launcher.

* `python -m torch.distributed.run --standalone --nproc_per_node=2 -m areal.trainer.main ...` trains
  GRPO (and PPO with a critic) for 2 steps: exit 0, rank 0 alone writes the outputs, and the
  per-rank parameter checksums (`train.debug_param_checksum`) are identical after every step.
* The PPO policy and critic updates on 2 ranks equal the 1-process update on the same global batch
  (gradients summed over ranks, losses scaled by local / global active tokens). This file is also
  the worker for that check: `python -m torch.distributed.run ... test_distributed_training.py update OUT`.
* A plugin that only imports on rank 0 stops both ranks (no hang) with exit 1 and a message naming
  the rank, the stage and the path.

Every job runs under a subprocess timeout, so a hung rank fails the test instead of blocking CI.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if __name__ == "__main__":  # launched by torchrun as the update worker
    sys.path[:0] = [str(ROOT), str(HERE)]

import pytest  # noqa: E402
import torch  # noqa: E402
from dist_launch import clean_env, rank_envs, run_bounded  # noqa: E402

from areal.api.cli_args import PPOActorConfig  # noqa: E402
from areal.api.train_args import CriticConfig, ModelConfig  # noqa: E402
from areal.trainer.distributed import DistContext, assign_prompts_to_ranks  # noqa: E402
from areal.trainer.engine import PolicyEngine, ValueEngine  # noqa: E402
from areal.trainer.model import build_critic, build_policy  # noqa: E402
from areal.trainer.ppo.critic import PPOCritic  # noqa: E402
from areal.trainer.ppo.update import ppo_update  # noqa: E402

JOB_TIMEOUT_S = 120
TINY = ["train.steps=2", "rollout.batch_size=2", "rollout.n_samples=4", "model.hidden_size=32", "model.num_heads=2",
        "model.intermediate_size=64", "output.progress_bar=false", "train.num_threads=1", "train.dist_timeout_s=60"]
UPDATE_TOL = 1e-5

# ---------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]


def _train_two_ranks(tmp_path: Path, config: str, *extra: str) -> tuple[Path, str]:
    cmd = _torchrun("-m", "areal.trainer.main", "--config", str(ROOT / "examples" / config), *TINY,
                    f"output.dir={tmp_path}", "train.debug_param_checksum=true", *extra)
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    name = Path(config).stem
    return tmp_path / name / "trial0", out + err


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_run(run_dir: Path, log: str, models: set[str]) -> list[dict]:
    rows = _read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        for key in ("reward_mean", "adv_mean", "adv_std", "policy_loss", "entropy", "grad_norm", "tokens_per_s"):
            assert row[key] is not None and math.isfinite(row[key]), (key, row)
    assert log.count(f"[areal] {run_dir.parent.name}: done, 2/2 steps") == 1, log  # only rank 0 reports
    assert (run_dir / "config.yaml").is_file()
    checksums = _read_jsonl(run_dir / "param_checksums.jsonl")
    assert [c["step"] for c in checksums] == [0, 1]
    for row in checksums:
        assert set(row) == {"step", *models}
        for model in models:
            assert len(row[model]) == 2 and row[model][0] == row[model][1], f"rank replicas differ: {row}"
    # the replicas are equal because they trained together, not because nothing moved
    assert checksums[0]["policy"] != checksums[1]["policy"]
    if "reference" in models:
        assert checksums[0]["reference"] == checksums[1]["reference"]
    print(f"\n{run_dir.parent.name}: rank checksums equal after each step: {checksums}")
    return rows


# ---------------------------------------------------------------------------
# end-to-end training on 2 ranks
# ---------------------------------------------------------------------------


def test_grpo_trains_on_two_ranks_with_identical_replicas(tmp_path: Path) -> None:
    run_dir, log = _train_two_ranks(tmp_path, "grpo_arith.yaml")
    rows = _check_run(run_dir, log, {"policy", "reference"})
    assert all(r["value_loss"] is None for r in rows)
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.yaml", "curves.png", "metrics.jsonl",
                                                         "param_checksums.jsonl", "samples.jsonl", "tensorboard"]
    assert len(list((run_dir / "tensorboard").iterdir())) == 1  # rank 0 alone logs


def test_ppo_with_critic_trains_on_two_ranks_with_identical_replicas(tmp_path: Path) -> None:
    run_dir, log = _train_two_ranks(tmp_path, "ppo_token_gae.yaml", "output.plot=false")
    rows = _check_run(run_dir, log, {"policy", "reference", "critic"})
    assert all(math.isfinite(r["value_loss"]) for r in rows)


def test_plugin_failing_on_one_rank_stops_every_rank(tmp_path: Path) -> None:
    """rank 1 cannot import the plugin (tests/trainer/dist_rank_plugin.py); rank 0 must not wait for it."""
    envs = rank_envs(2)
    cmd = [sys.executable, "-m", "areal.trainer.main", "--config", str(ROOT / "examples" / "grpo_arith.yaml"), *TINY,
           f"output.dir={tmp_path}", "actor.advantage.outcome_reward_shaping={implementation: dist_rank_plugin.halve}"]
    results = run_bounded([cmd, cmd], envs, timeout=90)
    for rank, (code, out, err) in enumerate(results):
        assert code == 1, f"rank {rank} exited {code}:\n{out}\n{err}"
        assert err.startswith("error while building the trainer: actor worker initialisation failed: rank 1: "
                              "actor.advantage.outcome_reward_shaping: cannot use 'dist_rank_plugin.halve'"), err
        assert "simulated missing dependency on rank 1" in err and "Traceback" not in err, err
        assert "[areal]" not in out
    assert not (tmp_path / "grpo_arith").exists()  # stopped before anything was written


# ---------------------------------------------------------------------------
# 2-rank update == 1-process update on the same global batch
# ---------------------------------------------------------------------------

VOCAB, WIDTH, ROWS_PER_GROUP, N_GROUPS, N_MINIBATCHES = 24, 10, 3, 4, 2
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
MODEL = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def _global_groups() -> list[dict[str, torch.Tensor]]:
    """Prompt groups with different lengths, so ranks hold different token counts."""
    gen = torch.Generator().manual_seed(0)
    groups = []
    for g in range(N_GROUPS):
        lengths = torch.randint(4, WIDTH + 1, (ROWS_PER_GROUP,), generator=gen)
        lengths[0] = 4 + 2 * g  # group g's longest rows differ: unequal tokens per rank
        pos = torch.arange(WIDTH)[None, :]
        attention = (pos < lengths[:, None]).long()
        loss_mask = ((pos >= 2) & (pos < lengths[:, None] - 1)).long()  # aligned: no mask on the last token
        groups.append({
            "input_ids": torch.randint(3, VOCAB, (ROWS_PER_GROUP, WIDTH), generator=gen) * attention,
            "attention_mask": attention,
            "loss_mask": loss_mask,
            "logprobs": -3.0 + 0.3 * torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
            "advantages": torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
            "values": 0.1 * torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
            "returns": torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
        })
    return groups


def _cat(groups: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([g[key] for g in groups]) for key in groups[0]}


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def _update(batch: dict[str, torch.Tensor], ctx: DistContext | None) -> dict[str, object]:
    """One policy and one critic update from the same seeded initialisation."""
    torch.manual_seed(5)
    policy = build_policy(MODEL, VOCAB, SPECIAL)
    critic_model = build_critic(MODEL, VOCAB, SPECIAL)
    engine = PolicyEngine(policy, lr=1e-2, ctx=ctx)
    stats = ppo_update(PPOActorConfig(ppo_n_minibatches=N_MINIBATCHES, temperature=1.0), engine, batch)
    critic = PPOCritic(CriticConfig(enabled=True, ppo_n_minibatches=N_MINIBATCHES),
                       ValueEngine(critic_model, lr=1e-2, ctx=ctx))
    stats.update(critic.ppo_update(batch))
    return {"policy": _flat(policy), "critic": _flat(critic_model), "stats": stats}


def _update_worker(out_dir: str) -> None:
    from areal.trainer.distributed import destroy, init_distributed

    torch.set_num_threads(1)
    ctx = init_distributed(timeout=60)
    try:
        mine = assign_prompts_to_ranks(N_GROUPS, ctx.world_size)[ctx.rank]
        groups = _global_groups()
        result = _update(_cat([groups[i] for i in mine]), ctx)
        torch.save({**result, "groups": mine}, os.path.join(out_dir, f"rank{ctx.rank}.pt"))
    finally:
        destroy(ctx)


def test_two_rank_update_equals_one_process_update(tmp_path: Path) -> None:
    cmd = _torchrun(str(Path(__file__)), "update", str(tmp_path))
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S)
    assert code == 0, f"torchrun exited with {code}:\n{out[-3000:]}\n{err[-3000:]}"
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    assert [r["groups"] for r in ranks] == [[0, 2], [1, 3]]
    groups = _global_groups()
    tokens = [int(sum(groups[i]["loss_mask"].sum() for i in r["groups"])) for r in ranks]
    assert tokens[0] != tokens[1]  # the global token normalisation matters
    whole = _update(_cat(groups), None)
    start = _update(_cat(groups[:1]), None)  # any update moves the parameters well beyond the tolerance
    for model in ("policy", "critic"):
        assert torch.equal(ranks[0][model], ranks[1][model]), f"{model}: rank replicas differ"
        diff = (ranks[0][model] - whole[model]).abs().max().item()
        moved = (start[model] - whole[model]).abs().max().item()
        print(f"\n{model}: max |2-rank - 1-process| = {diff:.3g} (a different batch moves it by {moved:.3g})")
        assert diff <= UPDATE_TOL and moved > 100 * UPDATE_TOL
    for key, value in whole["stats"].items():
        if key == "value_clip_frac":
            # counts (V_clip-R)^2 > (V-R)^2, where V_clip = V_old + (V - V_old) equals V only up to an
            # ulp for unclipped tokens: float noise of 1e-8 in V flips such near-ties
            continue
        for rank in ranks:
            assert rank["stats"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


if __name__ == "__main__":
    if sys.argv[1:2] != ["update"] or len(sys.argv) != 3:
        raise SystemExit("usage: test_distributed_training.py update OUT_DIR (under torchrun)")
    _update_worker(sys.argv[2])
