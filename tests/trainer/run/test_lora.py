"""LoRA through peft (`model.lora`): adapters train, the base stays frozen and is the KL reference (and bf16 runs).

A run with a KL reference, micro-batches and LoRA trains only the adapters; its
checkpoints hold the adapters (peft's format) and resuming from one gives the
uninterrupted run bit for bit. The 2-rank DDP / FSDP2 form is in
tests/trainer/parallel/test_distributed_training.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_run  # noqa: E402
import torch
from checkpoint_state import state_tensors
from safetensors.torch import load_file

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.utils.checkpoint_folders import CheckpointError

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "examples" / "grpo_arith.yaml"
STEPS = 4
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
    "train.save_every=2",
    "train.keep_last=null",
    f"train.steps={STEPS}",
    "actor.kl_ctl=0.05",
    "actor.ppo_micro_batch_size=3",
    "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj, o_proj]}",
    "train.lr=1e-2",
]
pytestmark = pytest.mark.xdist_group("lora")


def _rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not is_wall_clock(k)} for r in read_metrics(run_dir / "metrics.jsonl")]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Trainer, Path]:
    out = tmp_path_factory.mktemp("lora")
    trainer = Trainer(load_config(CONFIG, [*TINY, f"output.dir={out}", "experiment_name=ref"]))
    base = {k: v.clone() for k, v in trainer.policy.state_dict().items() if "lora_" not in k}
    result = trainer.run()
    assert result.steps_done == STEPS
    return trainer, result.run_dir, base


def test_only_the_adapters_train_and_the_base_is_the_reference(lora_run) -> None:
    trainer, run_dir, base = lora_run
    assert trainer.reference is None and trainer.reference_is_base  # no second copy of the weights
    trainable = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    after = trainer.policy.state_dict()
    assert all(torch.equal(after[k], v) for k, v in base.items())  # the base weights never moved
    assert any(
        not torch.equal(p, torch.zeros_like(p)) for n, p in trainer.policy.named_parameters() if "lora_B" in n
    )  # B starts at zero: the adapters did train
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert rows[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # adapters start as the identity: policy == reference
    assert any(abs(r["kl"]) > 1e-6 for r in rows[1:])
    # the reference log-probs are the base model's: adapters disabled equals a plain copy of the base weights
    batch = trainer.step(STEPS).batch
    with torch.no_grad(), trainer.policy.disable_adapter():
        logits = trainer.policy(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    wanted = batch["loss_mask"][:, 1:].bool()
    torch.testing.assert_close(batch["ref_logp"][:, :-1][wanted], logp[wanted], rtol=0, atol=1e-5)


def test_a_checkpoint_holds_the_adapters_and_resumes_bit_for_bit(lora_run, tmp_path: Path) -> None:
    _, reference, _ = lora_run
    step2 = reference / "checkpoints" / "step_2" / "policy"
    adapters = load_file(str(step2 / "adapter_model.safetensors"))
    assert adapters and all("lora_" in k for k in adapters) and not (step2 / "model.safetensors").exists()
    common = [*TINY, f"output.dir={tmp_path}", "experiment_name=ref"]
    result = Trainer(load_config(CONFIG, [*common, f"train.resume={reference / 'checkpoints' / 'step_2'}"])).run()
    assert result.steps_done == STEPS and result.resumed_from is not None
    assert _rows(result.run_dir) == _rows(reference)
    for name in ("adapter_model.safetensors",):
        mine = load_file(str(result.run_dir / "checkpoints" / f"step_{STEPS}" / "policy" / name))
        theirs = load_file(str(reference / "checkpoints" / f"step_{STEPS}" / "policy" / name))
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    mine = state_tensors(result.run_dir / "checkpoints" / f"step_{STEPS}")
    theirs = state_tensors(reference / "checkpoints" / f"step_{STEPS}")
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    # the shards hold the adapters and their AdamW states only: the frozen base is rebuilt from model.path
    weights = [k for k in mine if k.startswith("policy.model.")]
    assert len(weights) == len(adapters) and all("lora_" in k for k in weights)
    assert any(k.startswith("policy.optimizer.state.") for k in mine)


def test_resuming_an_adapter_checkpoint_without_lora_names_the_field(lora_run, tmp_path: Path) -> None:
    _, reference, _ = lora_run
    plain = [o for o in TINY if not o.startswith("model.lora")] + ["actor.kl_ctl=0.0"]  # past the reference check
    trainer = Trainer(
        load_config(
            CONFIG,
            [
                *plain,
                f"output.dir={tmp_path}",
                "experiment_name=ref",
                f"train.resume={reference / 'checkpoints' / 'step_2'}",
            ],
        )
    )
    with pytest.raises(CheckpointError, match="holds LoRA adapters only, but this run has no model.lora"):
        trainer.run()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.lora.r=0", "model.lora.r: got 0, expected an integer >= 1"),
        ("model.lora.dropout=1.5", "model.lora.dropout: got 1.5"),
        ("model.lora={target_modules: q_proj}", r"model.lora.target_modules .*: got 'q_proj' \(str\), expected a list"),
        ("model.lora.target_modules=['']", r"model.lora.target_modules: got \[''\], expected null or a list of module"),
        ("model.mixed_precision=fp16", r"model.mixed_precision: got 'fp16', expected one of \[None, 'bf16', 'auto'\]"),
    ],
)
def test_bad_lora_and_precision_settings_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(CONFIG, [override])


def test_target_modules_the_model_lacks_fail_at_build_naming_the_field(tmp_path: Path) -> None:
    overrides = [*TINY, f"output.dir={tmp_path}", "model.lora={target_modules: [no_such_proj]}"]
    with pytest.raises(ConfigError, match="model.lora.target_modules: "):
        Trainer(load_config(CONFIG, overrides))


def test_a_mixed_precision_lora_run_trains_with_float32_weights(tmp_path: Path) -> None:
    # a graded reward (the completion's length): groups whose rows all score the same, and so give a zero
    # gradient, are then rare, and both steps do train
    graded = "reward=[{implementation: plugins.graded_rewards.char_length}]"
    overrides = [
        *TINY,
        f"output.dir={tmp_path}",
        "train.steps=2",
        "train.save_every=0",
        "model.mixed_precision=bf16",
        graded,
    ]
    trainer = Trainer(load_config(CONFIG, overrides))
    result = trainer.run()
    rows = read_metrics(result.run_dir / "metrics.jsonl")
    assert result.steps_done == 2 and all(r["grad_norm"] > 0 for r in rows)
    assert all(p.dtype == torch.float32 for p in trainer.policy.parameters())
    assert trainer.engine.mixed_precision == "bf16"


@pytest.mark.parametrize("precision, autocast", [(None, False), ("bf16", True)])
def test_the_rollout_samples_in_the_precision_the_update_trains_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str | None, autocast: bool
) -> None:
    """Under bf16 the sampled log-probs come from bf16 products, as the update's do (a PPO ratio near 1)."""
    import areal_adv.trainer.run.loop as loop

    seen: list[tuple[bool, torch.dtype]] = []
    original = loop.collect_episodes

    def recording(*args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "collect_episodes", recording)
    overrides = [*TINY, f"output.dir={tmp_path}", "train.steps=1", "train.save_every=0"]
    trainer = Trainer(load_config(CONFIG, [*overrides, f"model.mixed_precision={precision or 'null'}"]))
    trainer.run()
    assert seen and all(enabled == autocast for enabled, _ in seen), seen
    if autocast:
        assert all(dtype == torch.bfloat16 for _, dtype in seen)
