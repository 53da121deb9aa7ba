"""Shadow estimators in the trainer (`diagnostics`), saved rollouts and `areal-adv diagnose`, on the tiny model."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tiny_run  # noqa: E402
import torch
from safetensors.torch import load_file

from areal_adv.api.cli_args import ConfigError, load_config
from areal_adv.cli import main as cli_main
from areal_adv.trainer.diagnostics.gradient_probe import fold_rows, probe_parameters
from areal_adv.trainer.diagnostics.rollout_store import load_rollout, rollout_steps
from areal_adv.trainer.diagnostics.step_diagnostics import StepDiagnostics
from areal_adv.trainer.run.diagnose import diagnose_run
from areal_adv.trainer.run.loop import Trainer
from areal_adv.trainer.run.metrics import is_wall_clock, read_metrics

SMALL = ["rollout.batch_size=4", "rollout.n_samples=4", *tiny_run.TINY_MODEL, *tiny_run.QUIET, "seed=3"]
METRICS = ("zero_adv_frac", "noise_proxy", "grad_snr", "cos_to_active", "length_corr", "reward_rank_corr")


def _trainer(out: Path, *extra: str) -> Trainer:
    return Trainer(load_config("preset:grpo_arith", [*SMALL, f"output.dir={out}", *extra]))


def _step_diagnostics(trainer: Trainer) -> StepDiagnostics:
    """The run's diagnostics, from the step observer that runs them."""
    observer = trainer.observers.find("diagnostics")
    assert observer is not None, "the run has no diagnostics observer"
    return observer.diagnostics  # type: ignore[attr-defined]


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
    row = _step_diagnostics(trainer).measure(batch, meta, data)
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
    from areal_adv.trainer.diagnostics.diagnostic_metrics import cosine, gradient_snr
    from areal_adv.trainer.diagnostics.gradient_probe import fold_gradients
    from areal_adv.trainer.lm.logprobs import token_logprobs
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


def _sampled_stats(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, temperature: float, autocast: Callable[[], Any]
) -> dict[str, torch.Tensor]:
    """Σ_a π(a)² and −Σ_a π(a) log π(a) of softmax(logits / T) that predicted each token, stored at that token
    (0 at the first position and on padding), written out from `model`'s own forward."""
    model.eval()
    with torch.no_grad(), autocast():
        logits = model(input_ids=ids, attention_mask=mask).logits
    probs = torch.softmax(logits[:, :-1].float() / temperature, dim=-1)
    at_token = lambda x: torch.nn.functional.pad(x, (1, 0)) * mask.float()  # noqa: E731
    return {
        "sum_pi_squared": at_token((probs * probs).sum(-1)),
        "token_entropy": at_token(-torch.special.xlogy(probs, probs).sum(-1)),
    }


def test_with_a_bf16_sampling_copy_the_shadows_read_the_behaviour_statistics_of_the_copy_that_sampled(
    tmp_path: Path,
) -> None:
    """`rollout.weights_dtype` and diagnostics both on: the entropy and Σπ² the shadows (and the saved rollouts)
    read are those of `PolicyEngine.sampled_by`, the bf16 copy that drew the tokens, not the float32 weights."""
    shadows = "diagnostics.estimators=[grpo_entropy,optimal_token_baseline]"  # one reads the entropy, one Σπ²
    trainer = _trainer(
        tmp_path, "train.steps=1", "rollout.weights_dtype=bfloat16", shadows, "output.save_rollouts=true"
    )
    engine = trainer.engine
    assert engine.sampled_by is not engine.model and next(engine.sampled_by.parameters()).dtype == torch.bfloat16
    sampling, trained = copy.deepcopy(engine.sampled_by), copy.deepcopy(engine.model)  # the update changes both
    diagnostics = _step_diagnostics(trainer)
    assert [(s.name, s.skipped) for s in diagnostics.shadows] == [
        ("grpo_entropy", None),
        ("optimal_token_baseline", None),
    ]
    read: dict[str, dict[str, torch.Tensor]] = {}
    for shadow in diagnostics.shadows:

        def spy(
            batch: dict[str, Any],
            meta: Any,
            *,
            shaping: Any = None,
            _name: str = shadow.name,
            _own: Any = shadow.actor.compute_advantages,
        ) -> Any:
            read[_name] = {k: batch[k].clone() for k in ("token_entropy", "sum_pi_squared") if k in batch}
            return _own(batch, meta, shaping=shaping)

        shadow.actor.compute_advantages = spy
    out = trainer.step(0)
    assert "diagnostics/optimal_token_baseline/noise_proxy" in out.metrics
    # each shadow is handed the fields it reads, computed for it: the run's own stages read neither
    assert {name: set(fields) for name, fields in read.items()} == {
        "grpo_entropy": {"token_entropy"},
        "optimal_token_baseline": {"sum_pi_squared"},
    }
    saved = load_rollout(rollout_steps(trainer.run_dir)[0])  # the batch the shadows saw, as saved
    args = (saved.batch["input_ids"], saved.batch["attention_mask"], trainer.cfg.sampling_temperature, engine.autocast)
    want, float32 = _sampled_stats(sampling, *args), _sampled_stats(trained, *args)
    for name, field in (("grpo_entropy", "token_entropy"), ("optimal_token_baseline", "sum_pi_squared")):
        err = float((read[name][field] - want[field]).abs().max())
        apart = float((want[field] - float32[field]).abs().max())  # about 3e-5 (entropy) and 5e-6 (Σπ²) here
        assert err <= 1e-6 and err < apart / 10, (name, field, err, apart)  # the copy's, to float32 rounding
    err = float((saved.sum_pi_squared - want["sum_pi_squared"]).abs().max())
    assert err <= 1e-6 and err < float((want["sum_pi_squared"] - float32["sum_pi_squared"]).abs().max()) / 10


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


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "diagnostics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """3 steps with saved rollouts and checkpoints at steps 2 and 3 (step 2's holds the weights that sampled it)."""
    out = tmp_path_factory.mktemp("saved")
    result = _trainer(
        out, "train.steps=3", "train.save_every=2", "output.save_rollouts=true", "diagnostics.estimators=[rloo]"
    ).run()
    return result.run_dir, read_metrics(result.metrics_path)


def test_saved_rollouts_and_diagnose_agree_with_the_run_at_the_weights_that_sampled_each_batch(
    saved_run: tuple[Path, list[dict]], capfd: pytest.CaptureFixture[str]
) -> None:
    run_dir, online = saved_run
    assert sorted(rollout_steps(run_dir)) == [0, 1, 2]
    saved = load_rollout(rollout_steps(run_dir)[2])
    assert {"input_ids", "loss_mask", "logprobs", "rewards", "sum_pi_squared", "prompt_keys"} <= set(saved.batch)
    assert saved.meta.traj_group_sizes == (4, 4, 4, 4)
    assert cli_main(["diagnose", str(run_dir), "--estimators", "grpo", "rloo", "maxrl"]) == 0
    rows = _rows(run_dir)
    assert {(r["step"], r["estimator"]) for r in rows} == {
        (s, e) for s in (0, 1, 2) for e in ("active", "grpo", "rloo", "maxrl")
    }
    for r in rows:  # by default only step 2 has gradient metrics: checkpoints/step_2 sampled it
        assert r["checkpoint_step"] == (2 if r["step"] == 2 else None) and r["stale_weights"] is False
        assert ("grad_snr" in r) == ("cos_to_active" in r) == (r["step"] == 2)
    for r in (r for r in rows if r["estimator"] in ("rloo", "active")):
        for metric in METRICS:
            if metric in r:
                live = online[r["step"]][f"diagnostics/{r['estimator']}/{metric}"]
                assert r[metric] == pytest.approx(live, rel=1e-5, abs=1e-9), (r["step"], metric)
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert lines[0] == "mean over 3 steps (0-2); grad_snr and cos_to_active over 1 of them:"  # the summary first
    assert lines[1].split() == ["estimator", *METRICS] and [ln.split()[0] for ln in lines[2:6]] == [
        "active", "grpo", "rloo", "maxrl"
    ]  # fmt: skip
    assert lines[6] == (
        "grad_snr, cos_to_active: empty at 2 of 3 steps (0-1), whose sampling weights no checkpoint holds "
        "(checkpoints at steps 2-3; checkpoints/step_N holds step N's); --weights nearest measures them at the "
        "nearest checkpoint's weights, marked stale"
    )
    assert "step  estimator" not in out  # the per-step rows only with --per-step
    assert "no recommendation:" in out and "Can a diagnostic choose the estimator?" in out  # the evidence, named
    for noise in ("Loading weights", "it/s]", "%|"):  # transformers' progress bars stay out of the output
        assert noise not in out + err, noise
    assert (run_dir / "diagnostics.png").is_file()


def test_nearest_weights_fill_the_gradient_cells_and_are_marked_stale(
    saved_run: tuple[Path, list[dict]], capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_adv.trainer.run.diagnose import build_figure, panel_points

    run_dir, _ = saved_run
    assert cli_main(["diagnose", str(run_dir), "--estimators", "rloo", "--weights", "nearest", "--per-step"]) == 0
    rows = _rows(run_dir)
    assert {(r["step"], r["checkpoint_step"], r["stale_weights"]) for r in rows} == {
        (0, 2, True), (1, 2, True), (2, 2, False)
    }  # fmt: skip
    assert all(math.isfinite(r["grad_snr"]) for r in rows)
    out = capsys.readouterr().out
    assert (
        out.splitlines()[0] == "mean over 3 steps (0-2); grad_snr and cos_to_active over 3 of them, 2 at stale weights:"
    )
    assert "at 2 of 3 steps (0-1) from the nearest checkpoint's weights, not those that sampled the batch" in out
    table = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["0"], ["1"], ["2"])]
    assert {(t[0], t[2]) for t in table} == {("0", "2*"), ("1", "2*"), ("2", "2")}  # the stale checkpoint, starred
    fresh, stale = panel_points(rows, "rloo", "grad_snr")
    assert [s for s, _ in fresh] == [2] and [s for s, _ in stale] == [0, 1]
    fresh, stale = panel_points(rows, "rloo", "zero_adv_frac")  # a metric of the batch alone is never stale
    assert [s for s, _ in fresh] == [0, 1, 2] and stale == []
    figure = build_figure(rows)
    title = figure._suptitle.get_text()
    assert title == (
        "grad_snr, cos_to_active: at the weights that sampled the batch (steps 2); "
        "hollow: at a nearest checkpoint's weights, not the sampling ones (steps 0-1)"
    )
    hollow = [ln for ax in figure.axes for ln in ax.lines if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 4  # the stale points of active and rloo in grad_snr and cos_to_active


def test_diagnose_without_checkpoints_measures_no_gradients_and_says_so(tmp_path: Path) -> None:
    run_dir = _trainer(tmp_path, "train.steps=1", "train.save_every=0", "output.save_rollouts=true").run().run_dir
    for weights, needle in (("sampled", "empty at 1 of 1 steps (0)"), ("nearest", "not measured, the run has no")):
        said: list[str] = []
        rows = diagnose_run(run_dir, ["rloo"], weights=weights, say=said.append)
        assert any(needle in line for line in said), said
        assert {r["estimator"] for r in rows} == {"active", "rloo"}
        assert all("grad_snr" not in r and r["checkpoint_step"] is None for r in rows)
    with pytest.raises(ValueError, match="--steps"):
        diagnose_run(run_dir, ["rloo"], [5])


def test_step_ranges_and_the_weights_of_each_step() -> None:
    from areal_adv.trainer.diagnostics.offline import weights_for
    from areal_adv.trainer.diagnostics.offline_report import step_ranges

    assert step_ranges([7, 0, 1, 2, 5, 8]) == "0-2, 5, 7-8" and step_ranges(list(range(30))) == "0-29"
    checkpoints = [(10, Path("c10")), (30, Path("c30"))]
    assert weights_for(10, checkpoints, "sampled") == (10, Path("c10"))
    assert weights_for(0, checkpoints, "sampled") is None
    assert weights_for(0, checkpoints, "nearest") == (10, Path("c10"))
    assert weights_for(20, checkpoints, "nearest") == (10, Path("c10"))  # a tie: the earlier one
    assert weights_for(29, checkpoints, "nearest") == (30, Path("c30"))


def test_under_lora_the_gradients_are_the_adapters(tmp_path: Path) -> None:
    lora = "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj, o_proj]}"
    trainer = _trainer(tmp_path, "train.steps=1", lora, "diagnostics.estimators=[rloo]")
    names = [n for n, _ in _step_diagnostics(trainer).params]
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

    _step_diagnostics(trainer).shadows[0].actor.compute_advantages = broken
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
    with pytest.raises(
        ConfigError, match=r"diagnostics.estimators\[0\]: 'nowhere.yaml' \(relative to .+\) is not a file"
    ):
        load_config("preset:grpo_arith", ["diagnostics.estimators=[nowhere.yaml]"])
    (tmp_path / "x").mkdir()
    twin = tmp_path / "x" / algo.name
    twin.write_text(algo.read_text())
    with pytest.raises(ConfigError, match="at most once"):
        load_config("preset:grpo_arith", [f"diagnostics.estimators=[{algo},{twin}]"])
