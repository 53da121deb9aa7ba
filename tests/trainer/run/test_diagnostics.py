"""Shadow estimators in the trainer (`diagnostics`), saved rollouts and `areal-adv diagnose`, on the tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import tiny_run  # noqa: E402
import torch
from safetensors.torch import load_file

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.cli import main as cli_main
from areal_adv.trainer.ppo.training.gradient_probe import fold_rows, probe_parameters
from areal_adv.trainer.run.diagnose import diagnose_run
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics
from areal_adv.trainer.run.rollout_store import load_rollout, rollout_steps

SMALL = ["rollout.batch_size=4", "rollout.n_samples=4", *tiny_run.TINY_MODEL, *tiny_run.QUIET, "seed=3"]
METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")


def _trainer(out: Path, *extra: str) -> Trainer:
    return Trainer(load_config("preset:grpo_arith", [*SMALL, f"output.dir={out}", *extra]))


def _weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / f"step_{step}" / "policy" / "model.safetensors"))


def test_diagnostics_log_every_metric_and_leave_training_bit_for_bit_unchanged(tmp_path: Path) -> None:
    plain = _trainer(tmp_path / "off", "train.steps=3").run()
    measured = _trainer(tmp_path / "on", "train.steps=3", "diagnostics.estimators=[rloo,maxrl]").run()
    off, on = read_metrics(plain.metrics_path), read_metrics(measured.metrics_path)
    assert len(off) == len(on) == 3
    for a, b in zip(off, on):
        shared = [k for k in a if not is_wall_clock(k)]
        assert {k: a[k] for k in shared} == {k: b[k] for k in shared}  # reward_mean, policy_loss, grad_norm, ...
        assert not any(k.startswith("diagnostics/") for k in a) and "time/diagnostics" not in a
        assert "time/diagnostics" in b
        for name in ("rloo", "maxrl", "active"):
            for metric in METRICS:
                value = b[f"diagnostics/{name}/{metric}"]
                assert isinstance(value, float) and math.isfinite(value), (name, metric, value)
        assert b["diagnostics/active/cos_to_active"] == pytest.approx(1.0)
    final_off, final_on = _weights(plain.run_dir, 3), _weights(measured.run_dir, 3)
    assert final_off.keys() == final_on.keys()
    assert all(torch.equal(final_off[k], final_on[k]) for k in final_off)


def test_measure_leaves_gradients_random_state_batch_and_stage_state_alone(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "train.steps=1", "diagnostics.estimators=[rloo,krpo]", "diagnostics.every=2")
    from areal_adv.utils.data import concat_batch

    dicts, _ = trainer.rollout()
    batch, meta = concat_batch(dicts)
    batch = trainer.prepare(batch)
    data = trainer.compute_advantages(batch, meta)
    params = [p for p in trainer.engine.model.parameters() if p.requires_grad]
    for i, p in enumerate(params):  # gradients left in .grad must come back exactly
        p.grad = torch.full_like(p, float(i))
    before_batch = {k: v.clone() for k, v in batch.items() if isinstance(v, torch.Tensor)}
    rng = torch.get_rng_state()
    row = trainer.diagnostics.measure(batch, meta, data)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(p.grad, torch.full_like(p, float(i))) for i, p in enumerate(params))
    assert all(torch.equal(batch[k], v) for k, v in before_batch.items()) and set(batch) == set(before_batch)
    assert trainer.actor.state_dict() == {"stages": {}}
    assert {f"diagnostics/{n}/grad_snr" for n in ("rloo", "krpo", "active")} <= set(row)
    assert trainer.cfg.diagnostics.due(0) and not trainer.cfg.diagnostics.due(1)


def test_first_steps_measures_only_the_start_of_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _trainer(tmp_path, "train.steps=3", "diagnostics.estimators=[rloo]", "diagnostics.first_steps=2").run()
    rows = read_metrics(result.metrics_path)
    assert ["diagnostics/rloo/grad_snr" in r for r in rows] == [True, True, False]
    assert rows[2]["time/diagnostics"] == 0.0  # logged on every step of a run with diagnostics, 0 when unmeasured
    assert "(every step below step 2; cost: time/diagnostics)" in capsys.readouterr().out
    with pytest.raises(ConfigError, match=r"diagnostics.first_steps: got 0, expected an integer >= 1"):
        load_config("preset:grpo_arith", ["diagnostics.estimators=[rloo]", "diagnostics.first_steps=0"])


def test_fold_moments_equal_stacked_fold_gradients_of_a_plain_backward_loop(tmp_path: Path) -> None:
    """grad_snr and cos_to_active from the running moments = the stacked per-fold `.backward()` gradients."""
    from areal_adv.trainer.lm.logprobs import token_logprobs
    from areal_adv.trainer.ppo.diagnostic_metrics import cosine, gradient_snr
    from areal_adv.trainer.ppo.training.gradient_probe import fold_gradients
    from areal_adv.trainer.ppo.training.loss import ppo_policy_loss
    from areal_adv.utils.data import concat_batch

    trainer = _trainer(tmp_path, "train.steps=1")
    batch, meta = concat_batch(trainer.rollout()[0])
    data = trainer.compute_advantages(trainer.prepare(batch), meta)
    # every row carries signal here (in the run's own advantages one group may carry all of it, and then the
    # SNR is exactly 0: one nonzero fold of K gives ‖ḡ‖² = S²/K)
    rows_b = data["advantages"].shape[0]
    offsets = torch.linspace(-1.0, 2.0, rows_b)[:, None]
    other = {**data, "advantages": data["advantages"] * 0.5 + offsets}
    outputs, model, cfg = {"active": data, "other": other}, trainer.engine.model, trainer.actor.config
    rows = fold_rows(meta.traj_group_sizes, 3)
    params = [p for p in model.parameters() if p.requires_grad]
    moments = fold_gradients(model, cfg, outputs, rows, params)
    stacked: dict[str, list[torch.Tensor]] = {name: [] for name in outputs}
    model.eval()
    for name, out in outputs.items():
        for fold in rows:
            width = max(int(out["attention_mask"][fold].sum(-1).max()), 1)
            mask = out["loss_mask"][fold, :width]
            logp, _ = token_logprobs(
                model,
                out["input_ids"][fold, :width],
                out["attention_mask"][fold, :width],
                cfg.temperature,
                wanted=mask.bool(),
            )
            loss, _ = ppo_policy_loss(
                logp,
                out["logprobs"][fold, :width],
                out["logprobs"][fold, :width],
                out["advantages"][fold, :width],
                mask,
                eps_clip=cfg.eps_clip,
            )
            model.zero_grad(set_to_none=True)
            loss.backward()
            stacked[name].append(
                torch.cat(
                    [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).double() for p in params]
                )
            )
    model.zero_grad(set_to_none=True)
    model.train()
    grads = {name: torch.stack(parts) for name, parts in stacked.items()}
    for name in outputs:
        assert moments[name].count == len(rows)
        assert moments[name].snr() == pytest.approx(gradient_snr(grads[name]), rel=1e-4, abs=1e-6)
        assert torch.allclose(moments[name].mean(), grads[name].mean(0), rtol=1e-4, atol=1e-9)
    assert moments["other"].snr() != pytest.approx(moments["active"].snr(), rel=1e-3)
    assert cosine(moments["other"].mean(), moments["active"].mean()) == pytest.approx(
        cosine(grads["other"].mean(0), grads["active"].mean(0)), rel=1e-4
    )


def test_shadows_the_batch_cannot_feed_are_named_in_the_opening_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _trainer(tmp_path, "train.steps=1", "diagnostics.estimators=[ppo,remax,dr_grpo]").run()
    out = capsys.readouterr().out
    assert "diagnostics: dr_grpo, active" in out
    assert "ppo skipped: needs values from a critic" in out
    assert "remax skipped: needs greedy baselines" in out
    row = read_metrics(result.metrics_path)[0]
    assert "diagnostics/dr_grpo/zero_adv_frac" in row and not any("/ppo/" in k or "/remax/" in k for k in row)


def test_an_unknown_estimator_lists_the_known_names() -> None:
    with pytest.raises(ConfigError, match=r"diagnostics.estimators\[1\]: got 'rlooo', expected a preset \(.*rloo"):
        load_config("preset:grpo_arith", ["diagnostics.estimators=[grpo,rlooo]"])
    with pytest.raises(ConfigError, match="diagnostics.folds"):
        load_config("preset:grpo_arith", ["diagnostics.folds=1"])


def test_folds_deal_groups_round_robin_and_params_pick_their_tensors(tmp_path: Path) -> None:
    assert [r.tolist() for r in fold_rows([2, 1, 2, 1, 1], 2)] == [[0, 1, 3, 4, 6], [2, 5]]
    assert len(fold_rows([3, 3], 4)) == 2
    model = _trainer(tmp_path, "train.steps=1").policy
    head = probe_parameters(model, "lm_head")
    assert [p for _, p in head] == [model.get_output_embeddings().weight]
    last = [p for _, p in probe_parameters(model, "last_layer")]
    assert last == list(model.model.layers[-1].parameters())
    assert len(probe_parameters(model, "all")) == len(list(model.parameters()))


def test_saved_rollouts_and_diagnose_agree_with_the_run_at_an_exact_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _trainer(
        tmp_path, "train.steps=3", "train.save_every=2", "output.save_rollouts=true", "diagnostics.estimators=[rloo]"
    ).run()
    run_dir = result.run_dir
    assert sorted(rollout_steps(run_dir)) == [0, 1, 2]
    saved = load_rollout(rollout_steps(run_dir)[2])
    assert {"input_ids", "loss_mask", "logprobs", "rewards", "sum_pi_squared", "prompt_keys"} <= set(saved.batch)
    assert saved.meta.traj_group_sizes == (4, 4, 4, 4)
    assert cli_main(["diagnose", str(run_dir), "--estimators", "grpo", "rloo", "maxrl"]) == 0
    rows = [json.loads(line) for line in (run_dir / "diagnostics.jsonl").read_text().splitlines()]
    assert {(r["step"], r["estimator"]) for r in rows} == {
        (s, e) for s in (0, 1, 2) for e in ("active", "grpo", "rloo", "maxrl")
    }
    assert {r["checkpoint_step"] for r in rows if r["step"] == 2} == {2}  # the weights that sampled step 2
    online = read_metrics(result.metrics_path)[2]
    for r in (r for r in rows if r["step"] == 2 and r["estimator"] in ("rloo", "active")):
        for metric in METRICS:
            assert r[metric] == pytest.approx(online[f"diagnostics/{r['estimator']}/{metric}"], rel=1e-5, abs=1e-9)
    assert (run_dir / "diagnostics.png").is_file()
    out = capsys.readouterr().out
    assert "step  estimator" in out and "steps [0, 1]: grad_snr and cos_to_active at the nearest checkpoint" in out
    assert "no recommendation:" in out and "Can a diagnostic choose the estimator?" in out  # the evidence, named


def test_diagnose_without_checkpoints_measures_no_gradients_and_says_so(tmp_path: Path) -> None:
    run_dir = _trainer(tmp_path, "train.steps=1", "train.save_every=0", "output.save_rollouts=true").run().run_dir
    said: list[str] = []
    rows = diagnose_run(run_dir, ["rloo"], say=said.append)
    assert any("no checkpoints" in line for line in said)
    assert {r["estimator"] for r in rows} == {"active", "rloo"}
    assert all("grad_snr" not in r and r["checkpoint_step"] is None for r in rows)
    with pytest.raises(ValueError, match="--steps"):
        diagnose_run(run_dir, ["rloo"], [5])


def test_under_lora_the_gradients_are_the_adapters(tmp_path: Path) -> None:
    lora = "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj, o_proj]}"
    trainer = _trainer(tmp_path, "train.steps=1", lora, "diagnostics.estimators=[rloo]")
    names = [n for n, _ in trainer.diagnostics.params]
    assert names and all("lora_" in n for n in names)
    row = trainer.run()
    first = read_metrics(row.metrics_path)[0]
    assert math.isfinite(first["diagnostics/rloo/grad_snr"]) and math.isfinite(first["diagnostics/rloo/cos_to_active"])


def test_a_shadow_that_fails_on_a_batch_is_dropped_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = _trainer(tmp_path, "train.steps=2", "diagnostics.estimators=[rloo,maxrl]")

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("no such field")

    trainer.diagnostics.shadows[0].actor.compute_advantages = broken
    with caplog.at_level("WARNING", logger="areal_adv.trainer"):
        rows = read_metrics(trainer.run().metrics_path)
    assert len(rows) == 2 and "rloo dropped: failed on a batch (ValueError: no such field)" in caplog.text
    assert all("diagnostics/maxrl/grad_snr" in r and not any("/rloo/" in k for k in r) for r in rows)


def test_the_progress_line_shows_the_diagnostics_time() -> None:
    from areal_adv.trainer.run.progress import phase_summary

    assert phase_summary({"time/step": 1.0, "time/update": 0.4, "time/diagnostics": 0.5}) == (
        "step 1.0s: update 0.40 diagnostics 0.50"
    )


def test_a_config_file_names_a_shadow_by_its_stem(tmp_path: Path) -> None:
    from areal_adv.api.presets import preset_path

    algo = tmp_path / "my_rloo.yaml"
    algo.write_text(preset_path("rloo").read_text())  # the preset's algorithm, from a file of the user's
    rows = read_metrics(_trainer(tmp_path, "train.steps=1", f"diagnostics.estimators=[rloo,{algo}]").run().metrics_path)
    for metric in METRICS:
        assert rows[0][f"diagnostics/my_rloo/{metric}"] == rows[0][f"diagnostics/rloo/{metric}"]
    with pytest.raises(ConfigError, match=r"diagnostics.estimators\[0\]: 'nowhere.yaml' is not a file"):
        load_config("preset:grpo_arith", ["diagnostics.estimators=[nowhere.yaml]"])
    (tmp_path / "x").mkdir()
    twin = tmp_path / "x" / algo.name
    twin.write_text(algo.read_text())
    with pytest.raises(ConfigError, match="at most once"):
        load_config("preset:grpo_arith", [f"diagnostics.estimators=[{algo},{twin}]"])
