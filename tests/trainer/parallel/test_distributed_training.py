"""Data-parallel training with 2 gloo ranks on CPU, through torchrun's launcher code (its ranks forked warm:
tests/trainer/warm_torchrun.py).

* `torchrun --standalone --nproc_per_node=2 -m areal_adv.trainer.main ...` trains
  GRPO (and PPO with a critic) for 2 steps: exit 0, rank 0 alone writes the outputs, and the
  per-rank parameter checksums (`train.debug_param_checksum`) are identical after every step.
* The PPO policy and critic updates on 2 ranks equal the 1-process update on the same global batch
  (gradients summed over ranks, losses scaled by local / global active tokens). This file is also
  the worker for that check: `torchrun ... test_distributed_training.py update OUT`.
* A plugin that only imports on rank 0 stops both ranks (no hang) with exit 1 and a message naming
  the rank, the stage and the path.

Every job runs under a subprocess timeout, so a hung rank fails the test instead of blocking CI.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parents[1]
if __name__ == "__main__":  # launched by torchrun as the update worker
    sys.path[:0] = [str(ROOT), str(HERE)]

import pytest  # noqa: E402
import torch  # noqa: E402
from dist_launch import clean_env, rank_envs, run_bounded, warm_torchrun  # noqa: E402
from torch.distributed.tensor import DTensor  # noqa: E402

from areal_adv.api.cli_args import PPOActorConfig  # noqa: E402
from areal_adv.api.train_args import CriticConfig, LoraConfig, ModelConfig  # noqa: E402
from areal_adv.trainer.lm.model import build_critic, build_policy, with_lora  # noqa: E402
from areal_adv.trainer.parallel.checksum import module_checksum  # noqa: E402
from areal_adv.trainer.parallel.distributed import DistContext, assign_prompts_to_ranks  # noqa: E402
from areal_adv.trainer.parallel.engine import NonFiniteLossError, PolicyEngine, ValueEngine, full_state_dict  # noqa: E402
from areal_adv.trainer.ppo.training.critic import PPOCritic  # noqa: E402
from areal_adv.trainer.ppo.training.update import ppo_update  # noqa: E402

JOB_TIMEOUT_S = 360  # generous: the 2 CPU cores are shared (a 30 s job took > 240 s under load 11); a hang still fails
TINY = [
    "train.steps=2",
    "rollout.batch_size=2",
    "rollout.n_samples=4",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "output.progress_bar=false",
    "train.num_threads=1",
    "train.dist_timeout_s=60",
]
UPDATE_TOL = 1e-5

# ---------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------


def _torchrun(*args: str) -> list[str]:
    return warm_torchrun("--standalone", "--nproc_per_node=2", *args)


def _train_two_ranks(tmp_path: Path, config: str, *extra: str) -> tuple[Path, str]:
    cmd = _torchrun(
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / config),
        *TINY,
        f"output.dir={tmp_path}",
        "train.debug_param_checksum=true",
        *extra,
    )
    [(code, out, err)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
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
    assert log.count(f"[areal-adv] {run_dir.parent.name}: done, 2/2 steps") == 1, log  # only rank 0 reports
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
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints",
        "config.yaml",
        "curves.png",
        "metrics.jsonl",
        "param_checksums.jsonl",
        "samples.jsonl",
        "tensorboard",
    ]
    assert len(list((run_dir / "tensorboard").iterdir())) == 1  # rank 0 alone logs


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_ppo_with_critic_trains_on_two_ranks_with_identical_replicas(tmp_path: Path, parallel: str) -> None:
    run_dir, log = _train_two_ranks(tmp_path, "ppo_token_gae.yaml", "output.plot=false", f"train.parallel={parallel}")
    rows = _check_run(run_dir, log, {"policy", "reference", "critic"})
    assert all(math.isfinite(r["value_loss"]) for r in rows)
    # the checkpointed policy is the trained one (under FSDP: the sampling copy, refreshed after every update)
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(run_dir / "checkpoints" / "step_2" / "policy", local_files_only=True)
    final = _read_jsonl(run_dir / "param_checksums.jsonl")[-1]
    assert module_checksum(saved) == final["policy"][0]


def test_plugin_failing_on_one_rank_stops_every_rank(tmp_path: Path) -> None:
    """rank 1 cannot import the plugin (tests/trainer/dist_rank_plugin.py); rank 0 must not wait for it."""
    envs = rank_envs(2)
    cmd = [
        sys.executable,
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        f"output.dir={tmp_path}",
        "actor.advantage.outcome_reward_shaping={implementation: dist_rank_plugin.halve}",
    ]
    results = run_bounded([cmd, cmd], envs, timeout=90, warm=True)
    for rank, (code, out, err) in enumerate(results):
        assert code == 1, f"rank {rank} exited {code}:\n{out}\n{err}"
        # the agreed failure reaches both ranks at once; rank 0's failure watcher may read rank 1's report
        # before rank 0's main thread reports it, and then says so first, in one line of its own
        watcher = "[areal-adv] rank 0: stopping because rank 1 failed in building the trainer: WorkerInitError: "
        if rank == 0 and err.startswith(watcher):
            err = err.split("\n", 1)[1]
        assert err.startswith(
            "error while building the trainer: actor worker initialisation failed: rank 1: "
            "actor.advantage.outcome_reward_shaping: cannot use 'dist_rank_plugin.halve'"
        ), err
        assert "simulated missing dependency on rank 1" in err and "Traceback" not in err, err
        assert "[areal-adv]" not in out
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
        groups.append(
            {
                "input_ids": torch.randint(3, VOCAB, (ROWS_PER_GROUP, WIDTH), generator=gen) * attention,
                "attention_mask": attention,
                "loss_mask": loss_mask,
                "logprobs": -3.0 + 0.3 * torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
                "advantages": torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
                "values": 0.1 * torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
                "returns": torch.randn(ROWS_PER_GROUP, WIDTH, generator=gen) * loss_mask,
            }
        )
    return groups


def _cat(groups: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {key: torch.cat([g[key] for g in groups]) for key in groups[0]}


def _flat(module: torch.nn.Module) -> torch.Tensor:
    """Every weight, unsharded (an all-gather for an FSDP module)."""
    return torch.cat([t.detach().reshape(-1) for t in full_state_dict(module).values()])


def _flat_grads(engine: PolicyEngine | ValueEngine) -> torch.Tensor:
    """The last step's reduced (and clipped) gradient, unsharded."""
    grads = [p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for p in engine.train_module.parameters()]
    return torch.cat([g.detach().reshape(-1) for g in grads])


def _update(batch: dict[str, torch.Tensor], ctx: DistContext | None, parallel: str = "ddp") -> dict[str, object]:
    """One policy and one critic update from the same seeded initialisation."""
    torch.manual_seed(5)
    policy = build_policy(MODEL, VOCAB, SPECIAL)
    critic_model = build_critic(MODEL, VOCAB, SPECIAL)
    engine = PolicyEngine(policy, lr=1e-2, ctx=ctx, parallel=parallel)
    stats = ppo_update(PPOActorConfig(ppo_n_minibatches=N_MINIBATCHES, temperature=1.0), engine, batch)
    critic = PPOCritic(
        CriticConfig(enabled=True, ppo_n_minibatches=N_MINIBATCHES),
        ValueEngine(critic_model, lr=1e-2, ctx=ctx, parallel=parallel, grad_clip=1e9),
    )
    stats.update(critic.ppo_update(batch))
    # the same policy update in micro-batches of 2 rows (DDP: all-reduced on the last one only)
    torch.manual_seed(5)
    micro = PolicyEngine(build_policy(MODEL, VOCAB, SPECIAL), lr=1e-2, ctx=ctx, parallel=parallel)
    micro_stats = ppo_update(
        PPOActorConfig(ppo_n_minibatches=N_MINIBATCHES, ppo_micro_batch_size=2, temperature=1.0), micro, batch
    )
    return {
        "policy": _flat(engine.model),
        "critic": _flat(critic.engine.model),
        "stats": stats,
        "policy_grad": _flat_grads(engine),
        "critic_grad": _flat_grads(critic.engine),
        "micro_grad": _flat_grads(micro),
        "micro_stats": micro_stats,
        **_lora_update(batch, ctx, parallel),
        "engine": engine,
        "critic_engine": critic.engine,
    }


def _lora_update(batch: dict[str, torch.Tensor], ctx: DistContext | None, parallel: str) -> dict[str, object]:
    """A LoRA policy's update (adapters only, micro-batches of 2) and its base log-probs (adapters disabled)."""
    torch.manual_seed(5)
    model = with_lora(build_policy(MODEL, VOCAB, SPECIAL), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    engine = PolicyEngine(model, lr=1e-2, ctx=ctx, parallel=parallel)
    base = engine.compute_logprobs(batch["input_ids"], batch["attention_mask"], 1.0, base=True)
    ppo_update(PPOActorConfig(ppo_n_minibatches=N_MINIBATCHES, ppo_micro_batch_size=2, temperature=1.0), engine, batch)
    grads = [
        p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        for p in engine.train_module.parameters()
        if p.requires_grad
    ]
    after = engine.compute_logprobs(batch["input_ids"], batch["attention_mask"], 1.0, base=True)
    weights = {k: v for k, v in full_state_dict(engine.model).items() if "lora_" in k}
    return {
        "lora": torch.cat([w.reshape(-1) for w in weights.values()]),
        "lora_grad": torch.cat([g.reshape(-1) for g in grads]),
        "lora_base_logp": base,
        "lora_base_unchanged": torch.equal(base, after),
    }


def _non_finite_loss(ctx: DistContext, parallel: str) -> dict[str, object]:
    """Rank 1 hands its engine a NaN loss: every rank must raise the same error and nobody steps."""
    torch.manual_seed(5)
    engine = PolicyEngine(build_policy(MODEL, VOCAB, SPECIAL), lr=1e-2, ctx=ctx, parallel=parallel)
    before = _flat(engine.model)
    batch = _cat(_global_groups()[:1])
    logp, _ = engine.forward_logprobs(batch["input_ids"], batch["attention_mask"], 1.0)
    loss = logp.mean() * (float("nan") if ctx.rank == 1 else 1.0)
    try:
        engine.optimizer_step(loss)
    except NonFiniteLossError as exc:
        error = {"message": str(exc), "failed_ranks": exc.failed_ranks}
    else:
        error = None
    grads = [p.grad for p in engine.train_module.parameters()]
    return {
        "error": error,
        "unchanged": torch.equal(before, _flat(engine.model)),
        "no_grads": all(g is None for g in grads),
    }


def _state_round_trip(result: dict[str, object], ctx: DistContext, parallel: str) -> bool:
    """`engine.state_dict()` restores a fresh engine exactly: the next step is identical."""
    engine = result["engine"]
    buffer = io.BytesIO()  # through bytes, as a checkpoint file (the state's tensors alias the live ones)
    torch.save(engine.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer)
    torch.manual_seed(99)  # different initial weights, overwritten by the load
    fresh = PolicyEngine(build_policy(MODEL, VOCAB, SPECIAL), lr=1e-2, ctx=ctx, parallel=parallel)
    fresh.load_state_dict(state)
    batch = _cat([_global_groups()[ctx.rank]])
    for eng in (engine, fresh):
        logp, _ = eng.forward_logprobs(batch["input_ids"], batch["attention_mask"], 1.0)
        eng.optimizer_step((logp * batch["loss_mask"]).sum() / batch["loss_mask"].sum() / ctx.world_size)
    return torch.equal(_flat(engine.model), _flat(fresh.model))


def _update_worker(out_dir: str, modes: list[str]) -> None:
    """Each mode's updates in turn, in one process group, into `out_dir/<mode>/`."""
    from areal_adv.trainer.parallel.distributed import destroy, init_distributed

    torch.set_num_threads(1)
    ctx = init_distributed(timeout=60)
    try:
        for parallel in modes:
            os.makedirs(os.path.join(out_dir, parallel), exist_ok=True)
            _update_and_save(os.path.join(out_dir, parallel), parallel, ctx)
    finally:
        destroy(ctx)


def _update_and_save(out_dir: str, parallel: str, ctx: DistContext) -> None:
    """The worker's updates; its engines die when this returns, while the process group is still alive.

    Freed after `destroy_process_group`, a DDP Reducer holds the last reference to the
    gloo group, and the group's destructor (joining its worker threads, GIL held) can
    deadlock with a worker thread that needs the GIL to free a finished all-reduce's
    tensors: seen as a rank that never exits (py-spy: ~ProcessGroupGloo in ~Reducer).
    """
    mine = assign_prompts_to_ranks(N_GROUPS, ctx.world_size)[ctx.rank]
    groups = _global_groups()
    result = _update(_cat([groups[i] for i in mine]), ctx, parallel)
    result["round_trip"] = _state_round_trip(result, ctx, parallel)
    result["non_finite"] = _non_finite_loss(ctx, parallel)
    keep = {k: v for k, v in result.items() if not k.endswith("engine")}
    torch.save({**keep, "groups": mine}, os.path.join(out_dir, f"rank{ctx.rank}.pt"))


PARALLEL = ("ddp", "fsdp")


@pytest.fixture(scope="module")
def one_process_update() -> dict[str, object]:
    return _update(_cat(_global_groups()), None)


@pytest.fixture(scope="module")
def two_rank_updates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One torchrun job for both modes (a launch costs more than the updates): `<dir>/<mode>/rank<r>.pt`."""
    out = tmp_path_factory.mktemp("updates")
    cmd = _torchrun(str(Path(__file__)), "update", str(out), ",".join(PARALLEL))
    [(code, stdout, stderr)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return out


@pytest.mark.xdist_group("distributed_update")  # the module fixtures above on one pytest-xdist worker
@pytest.mark.parametrize("parallel", PARALLEL)
def test_two_rank_update_equals_one_process_update(
    two_rank_updates: Path, parallel: str, one_process_update: dict[str, object]
) -> None:
    ranks = [torch.load(two_rank_updates / parallel / f"rank{r}.pt") for r in range(2)]
    assert [r["groups"] for r in ranks] == [[0, 2], [1, 3]]
    groups = _global_groups()
    tokens = [int(sum(groups[i]["loss_mask"].sum() for i in r["groups"])) for r in ranks]
    assert tokens[0] != tokens[1]  # the global token normalisation matters
    whole = one_process_update
    start = _update(_cat(groups[:1]), None)  # any update moves the parameters well beyond the tolerance
    for model in ("policy", "critic"):
        assert torch.equal(ranks[0][model], ranks[1][model]), f"{model}: rank replicas differ"
        diff = (ranks[0][model] - whole[model]).abs().max().item()
        moved = (start[model] - whole[model]).abs().max().item()
        # the gradient itself, not only AdamW's (nearly scale-free) step: catches a wrong DDP/FSDP loss scale
        grad = f"{model}_grad"
        gdiff = (ranks[0][grad] - whole[grad]).abs().max().item()
        gscale = whole[grad].abs().max().item()
        print(
            f"\n{parallel} {model}: max |2-rank - 1-process| = {diff:.3g} (a different batch moves it by "
            f"{moved:.3g}); last gradient: max diff {gdiff:.3g} of max |g| {gscale:.3g}"
        )
        assert diff <= UPDATE_TOL and moved > 100 * UPDATE_TOL
        assert gdiff <= 1e-4 * gscale
    for key, value in whole["stats"].items():
        if key == "value_clip_frac":
            # counts (V_clip-R)^2 > (V-R)^2, where V_clip = V_old + (V - V_old) equals V only up to an
            # ulp for unclipped tokens: float noise of 1e-8 in V flips such near-ties
            continue
        for rank in ranks:
            assert rank["stats"][key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    # a non-finite loss on rank 1 stops both ranks before backward, with one message naming rank 1
    errors = [r["non_finite"]["error"] for r in ranks]
    assert errors[0] is not None and errors[0] == errors[1], errors
    assert errors[0]["failed_ranks"] == [1] and errors[0]["message"].startswith("non-finite loss on rank(s) [1]")
    assert all(r["non_finite"]["unchanged"] and r["non_finite"]["no_grads"] for r in ranks)
    assert all(r["round_trip"] for r in ranks)
    # LoRA: the adapters' update on 2 ranks equals the 1-process one; the base (adapters off) never moves
    for rank in ranks:
        assert rank["lora_base_unchanged"]
        assert (rank["lora"] - whole["lora"]).abs().max().item() <= UPDATE_TOL
        assert (rank["lora_grad"] - whole["lora_grad"]).abs().max().item() <= 1e-4 * whole["lora_grad"].abs().max()
    assert (whole["lora"] - start["lora"]).abs().max().item() > 100 * UPDATE_TOL
    for rank in ranks:  # adapters disabled = the plain base model (same seed, no adapters)
        torch.manual_seed(5)
        plain = PolicyEngine(build_policy(MODEL, VOCAB, SPECIAL), lr=1e-2)
        mine = _cat([groups[i] for i in rank["groups"]])
        expected = plain.compute_logprobs(mine["input_ids"], mine["attention_mask"], 1.0)
        torch.testing.assert_close(rank["lora_base_logp"], expected, rtol=0, atol=1e-5)
    # micro-batches of 2 rows: the accumulated, reduced gradient is the one-pass gradient
    for rank in ranks:
        micro_diff = (rank["micro_grad"] - rank["policy_grad"]).abs().max().item()
        assert micro_diff <= 1e-6 and rank["policy_grad"].abs().max().item() > 1e-3, micro_diff
        for key in ("policy_loss", "entropy", "clip_frac", "grad_norm"):
            assert rank["micro_stats"][key] == pytest.approx(rank["stats"][key], rel=1e-5, abs=1e-6), key


if __name__ == "__main__":
    if sys.argv[1:2] != ["update"] or len(sys.argv) != 4 or not set(sys.argv[3].split(",")) <= set(PARALLEL):
        raise SystemExit("usage: test_distributed_training.py update OUT_DIR ddp[,fsdp] (under torchrun)")
    _update_worker(sys.argv[2], sys.argv[3].split(","))
