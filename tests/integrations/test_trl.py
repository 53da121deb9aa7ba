"""AReaLGRPOTrainer on the real trl 1.16 GRPOTrainer, CPU, a tiny local random Llama (trl_setup.py).

- 2 optimiser steps run end to end, and the weights move;
- our GRPO presets reproduce TRL's own advantages on the same generations, for each
  of TRL's `scale_rewards` modes (TRL divides by std + 1e-4: the preset's eps is set
  to match; `batch` is the LitePPO preset as it ships), unscorable completions (every
  reward function returned None) included;
- the advantages equal the pipeline's `compute_advantages` on the same rewards and
  groups written as ordinary padded prompt+completion rows (token-level whitening
  and per-token process rewards);
- 2 processes (accelerate MULTI_CPU over gloo): rewards gathered, each process keeps
  its own rows, and batch statistics are those of the whole batch (not all-reduced
  twice).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import trl_setup as ts
from dist_launch_trl import run_ranks

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.integrations.trl import GatheredRollouts, group_advantages, process_rows
from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import TrajBatchMeta

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PRESETS = ROOT / "examples" / "presets"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return ts.build_model(tmp_path_factory.mktemp("tiny-llama"))


def masked_max(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float(((a.double() - b.double()) * mask).abs().max())


BATCH_SCALE_YAML = """
actor:
  kl_ctl: 0.0
  reward_norm: {mean_level: group, std_level: null}
  adv_norm: null
  advantage:
    outcome_reward_shaping:
      implementation: areal_adv.integrations.trl.stages.batch_std_scale
      kwargs: {eps: 1.0e-4}
    estimator: {implementation: reinforce_return}
"""
SCALE_MODES = {
    # case -> TRL's scale_rewards, and our config and overrides reproducing it
    "group": ("group", "grpo.yaml", ("actor.reward_norm.eps=1.0e-4",)),  # the grpo preset, TRL's eps
    "none": ("none", "dr_grpo.yaml", ()),
    "batch": ("batch", BATCH_SCALE_YAML, ()),  # TRL's batch std is not the pooled std_level: batch (stages.py)
    "batch-lite_ppo": ("batch", "lite_ppo.yaml", ()),  # the LitePPO preset as it ships
}


@pytest.mark.parametrize("case", sorted(SCALE_MODES))
def test_two_steps_and_grpo_presets_reproduce_trls_advantages(model_dir, tmp_path, case):
    scale, source, overrides = SCALE_MODES[case]
    if source.endswith(".yaml"):
        path = PRESETS / source
    else:
        path = tmp_path / "batch_scale.yaml"
        path.write_text(source)
    trainer = ts.make_trainer(model_dir, tmp_path, str(path), overrides=overrides, scale_rewards=scale)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.model.parameters()))
    assert len(trainer.records) == 2  # one generation batch per step
    for record in trainer.records:
        mask = record["completion_mask"]
        ours, theirs = record["ours"], record["trl"]
        assert ours.shape == mask.shape and theirs.dim() == 1
        assert masked_max(ours, theirs[:, None].expand_as(ours), mask) <= 1e-5
        assert float((ours * (1 - mask)).abs().max()) == 0.0
        unscorable = torch.isnan(record["gathered"].rewards)
        assert bool((ours[unscorable] == 0).all())


def native_advantages(cfg_path: Path, overrides: tuple[str, ...], g: GatheredRollouts) -> torch.Tensor:
    """The pipeline on the same completions as padded prompt+completion rows (prompts of 1-3 tokens)."""
    keep = [i for i in range(g.rewards.shape[0]) if not torch.isnan(g.rewards[i])]
    N, C = g.loss_mask.shape
    prompts = {i: 1 + i % 3 for i in keep}
    T = 3 + C
    rows = len(keep)
    fields = {k: torch.zeros(rows, T) for k in ("attention_mask", "loss_mask", "logprobs", "token_rewards")}
    for r, i in enumerate(keep):
        P, L = prompts[i], int(g.lengths[i])
        fields["attention_mask"][r, : P + L] = 1
        fields["loss_mask"][r, P : P + C] = g.loss_mask[i]
        fields["token_rewards"][r, P : P + C] = g.token_rewards[i]
    fields["input_ids"] = torch.ones(rows, T, dtype=torch.long)
    fields["rewards"] = g.rewards[keep]
    fields["is_truncated"] = g.is_truncated[keep]
    groups = [i // g.num_generations for i in keep]
    meta = TrajBatchMeta.from_group_sizes([groups.count(k) for k in dict.fromkeys(groups)])
    out = PPOActor(load_config(cfg_path, list(overrides)).actor).compute_advantages(fields, meta)["advantages"]
    result = torch.zeros(N, C)
    for r, i in enumerate(keep):
        P = prompts[i]
        result[i] = out[r, P - 1 : P - 1 + C]
    return result * g.loss_mask


PROCESS_YAML = """
actor:
  kl_ctl: 0.0
  discount: 0.9
  reward_norm: {mean_level: group, std_level: null}
  adv_norm: {mean_level: batch, std_level: batch, std_unbiased: true, eps: 1.0e-8}
  advantage:
    estimator: {implementation: reinforce_return}
    process_adv_shaping: {implementation: additive}
"""


def test_token_level_advantages_equal_the_pipeline_on_the_same_rewards_and_groups(model_dir, tmp_path):
    cfg = tmp_path / "process.yaml"
    cfg.write_text(PROCESS_YAML)
    trainer = ts.make_trainer(model_dir, tmp_path / "out", str(cfg), token_reward_func=ts.per_token_yes)
    trainer.train()
    assert trainer.state.global_step == 2
    for record in trainer.records:
        g = record["gathered"]
        assert g.token_rewards is not None and float(g.token_rewards.abs().sum()) > 0
        expected = native_advantages(cfg, (), g)
        assert masked_max(record["ours"], expected, g.loss_mask) <= 1e-5
        per_token = (record["ours"] * g.loss_mask).std(dim=1)
        assert float(per_token.max()) > 0  # the advantages really vary along a completion


def test_process_slicing_is_grpotrainers():
    assert [process_rows(3, p) for p in range(3)] == [slice(0, 3), slice(3, 6), slice(6, 9)]
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(8, generator=gen)
    rewards[3] = float("nan")
    mask = (torch.rand(8, 5, generator=gen) > 0.3).float()
    g = GatheredRollouts(
        rewards=rewards,
        loss_mask=mask,
        lengths=torch.full((8,), 5),
        is_truncated=torch.zeros(8, dtype=torch.bool),
        num_generations=4,
    )
    actor = PPOActor(load_config(PRESETS / "grpo.yaml").actor)
    full = group_advantages(actor, g)
    assert torch.equal(full[3], torch.zeros(5))
    # a group's statistics ignore the unscorable row: rows 0-2 normalised among themselves
    scores = rewards[:3].double()
    expected = (scores - scores.mean()) / (scores.std() + 1e-6)
    assert masked_max(full[:3], expected[:, None].expand(3, 5).float(), mask[:3]) <= 1e-6
    with pytest.raises(ValueError, match="not whole groups of num_generations=3"):
        group_advantages(
            actor, GatheredRollouts(rewards, mask, torch.full((8,), 5), torch.zeros(8, dtype=torch.bool), 3)
        )


def test_two_processes_gather_rewards_and_keep_their_rows(model_dir, tmp_path):
    prefix = tmp_path / "result"
    overrides = ["actor.kl_ctl=0.0", "actor.adv_norm.std_unbiased=true"]  # unbiased: a double count would show
    run_ranks(
        2,
        [
            sys.executable,
            str(HERE / "trl_worker.py"),
            model_dir,
            str(tmp_path / "out"),
            str(prefix),
            str(PRESETS / "reinforce_plus_plus.yaml"),
            *overrides,
        ],
        timeout=420,
    )
    ranks = [torch.load(f"{prefix}.{r}.pt", weights_only=False) for r in range(2)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["steps"] for r in ranks] == [2, 2]
    assert all("MULTI_CPU" in r["distributed_type"] for r in ranks)
    actor = PPOActor(load_config(PRESETS / "reinforce_plus_plus.yaml", overrides).actor)
    for step in range(2):
        first, second = (GatheredRollouts(**r["records"][step]["gathered"]) for r in ranks)
        assert torch.equal(first.loss_mask, second.loss_mask) and torch.allclose(
            first.rewards, second.rewards, equal_nan=True
        )
        assert first.token_rewards is not None
        full = group_advantages(actor, first)  # one process, no torch.distributed: the reference
        for rank, result in enumerate(ranks):
            local = result["records"][step]["ours"]
            expected = full[process_rows(local.shape[0], rank), : local.shape[1]]
            assert (
                masked_max(local, expected, first.loss_mask[process_rows(local.shape[0], rank), : local.shape[1]])
                <= 1e-6
            )


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_configs_trl_cannot_serve_are_refused(model_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"enables a critic.*GRPOTrainer trains no value model"):
        ts.make_trainer(model_dir, tmp_path, str(PRESETS / "ppo.yaml"))
    with pytest.raises(ConfigError, match=r"actor\.kl_ctl=0\.01 asks for a KL reward.*GRPOConfig\.beta"):
        ts.make_trainer(model_dir, tmp_path, str(PRESETS / "reinforce_plus_plus.yaml"))
    with pytest.raises(ConfigError, match=r"multi_objective_aggregation='normalize_then_sum'"):
        ts.make_trainer(
            model_dir, tmp_path, str(PRESETS / "grpo.yaml"), multi_objective_aggregation="normalize_then_sum"
        )
    with pytest.raises(ConfigError, match=r"areal_config.*does not exist"):
        ts.make_trainer(model_dir, tmp_path, str(tmp_path / "missing.yaml"))


def test_a_model_path_that_is_not_a_checkpoint_folder_is_one_line(model_dir, tmp_path, monkeypatch):
    from areal_adv.integrations.trl.model_path import check_model_argument

    monkeypatch.chdir(tmp_path)
    where = f"(relative to {tmp_path})"
    (tmp_path / "empty").mkdir()
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    cases = {
        "path/to/model": f"'path/to/model' {where} is not a folder (nothing is there); expected a folder written by "
        "save_pretrained (with config.json), a hub id such as 'org/name' or a model",
        "empty": f"the folder 'empty' {where} has no config.json",
        "model.gguf": f"'model.gguf' {where} is a file, not a folder (a GGUF file: convert it to a folder once",
    }
    for model, needle in cases.items():
        with pytest.raises(ConfigError) as caught:
            ts.make_trainer(model, tmp_path, "preset:grpo")  # refused before TRL loads anything
        message = str(caught.value)
        assert message.startswith("AReaLGRPOTrainer(model=...): ") and needle in message, message
        assert "\n" not in message
    for fine in (model_dir, Path(model_dir), "HuggingFaceTB/SmolLM2-135M-Instruct", object()):
        check_model_argument(fine)  # a checkpoint folder, a hub id (TRL downloads it) or a loaded model


def test_bad_plugin_path_fails_at_trainer_construction(model_dir, tmp_path):
    from areal_adv.utils.dynamic_import import PluginResolutionError

    with pytest.raises(PluginResolutionError, match=r"actor\.advantage\.estimator.*nowhere\.estimators\.fn"):
        ts.make_trainer(
            model_dir,
            tmp_path,
            str(PRESETS / "grpo.yaml"),
            overrides=("actor.advantage.estimator.implementation=nowhere.estimators.fn",),
        )


def test_token_reward_function_of_wrong_length_is_named(model_dir, tmp_path):
    def short(completion_ids, **_):
        return [ids[:-1] for ids in completion_ids]

    trainer = ts.make_trainer(model_dir, tmp_path, str(PRESETS / "grpo.yaml"), token_reward_func=short, steps=1)
    with pytest.raises(
        ValueError, match=r"token_reward_func 'short': completion \d+ has \d+ tokens but \d+ token rewards"
    ):
        trainer.train()


LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo")


def test_trls_losses_take_the_token_level_advantages_unchanged(model_dir, tmp_path):
    """Every TRL loss_type gives the same loss for per-row advantages [B] and the same values as [B, T]."""
    trainer = ts.make_trainer(model_dir, tmp_path, str(PRESETS / "grpo.yaml"), steps=1)
    trainer.train()
    inputs = trainer._buffered_inputs[0]
    assert inputs["advantages"].dim() == 2  # what the subclass hands TRL's loss
    per_row = inputs["advantages"][:, 0].clone()  # GRPO: one value per completion, on every token
    mask = inputs["completion_mask"].bool()
    assert bool((inputs["advantages"][mask] == per_row[:, None].expand_as(mask)[mask]).all())
    for loss_type in LOSS_TYPES:
        for level in ("token", "sequence"):
            trainer.loss_type, trainer.importance_sampling_level = loss_type, level
            with torch.no_grad():
                token = trainer._compute_loss(trainer.model, {**inputs, "advantages": inputs["advantages"]})
                row = trainer._compute_loss(trainer.model, {**inputs, "advantages": per_row})
            assert torch.isfinite(token) and abs(float(token) - float(row)) <= 1e-6, (loss_type, level)


# ---------------------------------------------------------------------------
# The optimal token baseline: log-probs and Σπ² from one extra forward pass
# ---------------------------------------------------------------------------


def test_completion_token_stats_equal_a_plain_softmax(model_dir):
    from transformers import AutoModelForCausalLM

    from areal_adv.integrations.trl.token_stats import completion_token_stats

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(0)
    prompt, completion = torch.randint(3, 10, (3, 4), generator=gen), torch.randint(3, 10, (3, 5), generator=gen)
    prompt_mask, completion_mask = torch.ones(3, 4, dtype=torch.long), torch.ones(3, 5, dtype=torch.long)
    prompt_mask[0, :2] = 0  # left-padded prompt, as TRL pads prompts
    completion_mask[1, 3:] = 0
    logp, spp = completion_token_stats(model, prompt, prompt_mask, completion, completion_mask, 0.7)
    with torch.no_grad():
        logits = (
            model(
                input_ids=torch.cat([prompt, completion], 1),
                attention_mask=torch.cat([prompt_mask, completion_mask], 1),
            ).logits.double()
            / 0.7
        )
    for b in range(3):
        for j in range(5):
            p = torch.softmax(logits[b, 3 + j], dim=-1)
            want_logp = float(p[completion[b, j]].log()) if completion_mask[b, j] else 0.0
            want_spp = sum(float(x) ** 2 for x in p) if completion_mask[b, j] else 0.0
            assert abs(float(logp[b, j]) - want_logp) <= 1e-5 and abs(float(spp[b, j]) - want_spp) <= 1e-6


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_otb_presets_through_trl_equal_verls_function_on_the_gathered_batch(model_dir, tmp_path, name):
    """The trainer adds the completions' log-probs and Σπ²; the advantages are verl's OTB of that batch."""
    from verl.trainer.ppo import core_algos

    trainer = ts.make_trainer(model_dir, tmp_path, str(PRESETS / f"{name}.yaml"))
    assert trainer.areal_reads_sum_pi_squared
    trainer.train()
    for record in trainer.records:
        g = record["gathered"]
        mask = g.loss_mask
        assert g.logprobs is not None and g.sum_pi_squared is not None
        pi = g.logprobs.exp()
        assert bool(((g.sum_pi_squared >= pi**2 - 1e-5) | (mask == 0)).all())
        keep = ~torch.isnan(g.rewards)  # an unscorable completion is left out of its group (advantage 0)
        assert bool((record["ours"][~keep] == 0).all())
        mask = mask[keep]
        rewards = torch.zeros_like(mask)
        last = (mask * torch.arange(1, mask.shape[1] + 1)).argmax(dim=1)
        rewards[torch.arange(mask.shape[0]), last] = g.rewards[keep]
        index = (keep.nonzero()[:, 0] // g.num_generations).numpy()
        theirs, _ = core_algos.get_adv_estimator_fn(name)(
            token_level_rewards=rewards,
            response_mask=mask,
            index=index,
            old_log_probs=g.logprobs[keep],
            sum_pi_squared=g.sum_pi_squared[keep],
            rollout_is_weights=None,
        )
        assert masked_max(record["ours"][keep], theirs, mask) <= 1e-5
        assert float((record["ours"][keep] * mask).abs().max()) > 0
    grpo = ts.make_trainer(model_dir, tmp_path / "grpo", str(PRESETS / "grpo.yaml"))
    assert not grpo.areal_reads_sum_pi_squared  # no extra forward for estimators that do not read it


def test_shadow_diagnostics_join_trls_logged_metrics_and_leave_advantages_alone(model_dir, tmp_path):
    import math

    cfg = tmp_path / "diagnosed.yaml"
    cfg.write_text("defaults: [preset:grpo]\ndiagnostics: {estimators: [rloo, maxrl, ppo]}\n")
    trainer = ts.make_trainer(model_dir, tmp_path / "out", str(cfg))
    trainer.train()
    plain = PPOActor(load_config("preset:grpo").actor)
    for record in trainer.records:
        expected = group_advantages(plain, record["gathered"])
        assert torch.equal(record["ours"], expected[: record["ours"].shape[0], : record["ours"].shape[1]])
    logged = [row for row in trainer.state.log_history if "diagnostics/active/zero_adv_frac" in row]
    assert len(logged) == 2
    for row in logged:
        for name in ("active", "rloo", "maxrl"):
            for metric in ("zero_adv_frac", "length_corr", "reward_rank_corr"):
                assert math.isfinite(row[f"diagnostics/{name}/{metric}"])
        assert not any(k.startswith("diagnostics/ppo/") or k.endswith("/noise_proxy") for k in row)


@pytest.mark.parametrize("version", ["1.15.0", "1.9.2", "0.29.1"])
def test_an_older_trl_is_refused_with_the_minimum_version(version: str) -> None:
    from areal_adv.integrations.trl import MINIMUM_TRL, require_trl

    with pytest.raises(ImportError) as err:
        require_trl(version)
    message = str(err.value)
    assert "\n" not in message and f"trl {version} is installed" in message
    assert f"expected trl >= {MINIMUM_TRL}" in message and "; install the trl extra: " in message
    for ok in (MINIMUM_TRL, "1.16.1", "1.17.0.dev0"):
        require_trl(ok)


def test_importing_the_integration_beside_the_real_trl_1_15_names_the_minimum(tmp_path: Path) -> None:
    """TRL 1.15.0 from the package index, in a venv layered over .venv: the import fails in one line."""
    import subprocess

    venv = ROOT / ".venv-trl-1.15"
    requirements = tmp_path / "nothing.txt"
    requirements.write_text("# nothing beyond .venv\n")
    setup = subprocess.run(
        [str(ROOT / "scripts" / "layered_venv.sh"), str(venv), str(requirements), "--release", "trl==1.15.0"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import areal_adv.integrations.trl"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "ImportError: areal_adv.integrations.trl: trl 1.15.0 is installed, expected trl >= 1.16.0 (AReaLGRPOTrainer "
        "hooks into GRPOTrainer internals that older releases lack or differ in); install the trl extra: "
    )
    assert last.endswith("-m pip install -c constraints.txt -e '.[trl]'"), last  # that venv's pip, the pins
