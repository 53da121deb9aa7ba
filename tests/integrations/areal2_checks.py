"""Checks of areal-adv beside an AReaL source tree (AReaL 2 and later), run by areal_checks.py `all`.

`AREAL_SOURCE` names the tree; `.venv-areal-source` has it on the path (scripts/setup_areal.sh).
Batches are built as AReaL 2's workflows build them (areal2_reference.episode) and joined by
AReaL's own `concat_padded_tensors`; each check returns plain JSON for test_areal.py to assert on.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import areal2_reference as ref
import torch
from areal_checks import HERE, both, max_diff

SIZES = ([4, 4, 4], [3, 5, 2, 6], [1, 4, 2])


def _worst(into: dict[str, float], diff: dict[str, float]) -> None:
    for key, value in diff.items():
        into[key] = max(into.get(key, 0.0), value)


def check_install_source() -> dict[str, Any]:
    """The `areal` package is the source tree's; its version and commit; the shared fields and paths."""
    import dataclasses

    import areal
    import areal.api.cli_args as areal_args
    import areal.trainer.ppo.advantage as seed_path

    import areal_adv.trainer.ppo.advantage as ours
    from areal_adv.api.cli_args import PPOActorConfig
    from areal_adv.integrations.areal import EXTRA_FIELDS, SHARED_FIELDS

    source = Path(os.environ["AREAL_SOURCE"]).resolve()
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True)
    both_have = {f.name for f in dataclasses.fields(areal_args.PPOActorConfig)} & {
        f.name for f in dataclasses.fields(PPOActorConfig)
    }
    areal_modules = ["areal.api.cli_args", "areal.trainer.ppo.actor", "areal.utils.data", "areal.trainer.ppo.gae"]
    areal_modules.append("areal.trainer.ppo.lambda_fn")
    for name in areal_modules:
        importlib.import_module(name)
    project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
    hook = sys.modules.get("areal_adv.integrations.areal")
    return {
        "hook_installed_at_import": bool(hook and hook.installed()),
        "version": project["version"],
        "commit": commit.stdout.strip(),
        "areal_is_source": Path(areal.__file__).resolve().is_relative_to(source),
        "same_class": seed_path.OutcomeRewardInputs is ours.OutcomeRewardInputs,
        "areal_modules_are_areal": [
            Path(sys.modules[n].__file__).resolve().is_relative_to(source) for n in areal_modules
        ],
        "shared_fields": sorted(SHARED_FIELDS),
        "both_have": sorted(both_have - set(EXTRA_FIELDS)),
        "extra_fields": sorted(EXTRA_FIELDS),
    }


def _cases(join: Any) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Every areal2_reference case: (hook vs AReaL's own, reference vs AReaL's own), worst per tensor."""
    from areal.api.cli_args import NormConfig, PPOActorConfig
    from areal.utils.dynamic_import import import_from_string

    hook: dict[str, dict[str, float]] = {}
    reference: dict[str, dict[str, float]] = {}
    for name, (fields, batch_fields) in ref.CASES.items():
        config = ref.actor_config(PPOActorConfig, NormConfig, fields, experiment_name="check", trial_name="t0")
        ref_config = ref.actor_config(ref.ActorConfig, ref.NormConfig, fields)
        hook[name], reference[name] = {}, {}
        for turns in (1, 3):
            for seed, sizes in enumerate(SIZES):
                gen = torch.Generator().manual_seed(100 * turns + seed)
                data = [ref.group(gen, n, turns=turns, join=join, **batch_fields) for n in sizes]
                ours, theirs = both(config, data)
                _worst(hook[name], max_diff(ours, theirs))
                _worst(reference[name], max_diff(ref.compute_advantages(ref_config, data, import_from_string), theirs))
    return hook, reference


def check_lambda_functions() -> dict[str, Any]:
    """Our built-in λ functions against AReaL's on every length 0..400 (bitwise), and the contexts both build."""
    from areal.trainer.ppo import lambda_fn as theirs
    from areal.trainer.ppo.gae import _build_gae_lambda_context

    from areal_adv.trainer.ppo.estimators import lambda_fn as ours
    from areal_adv.trainer.ppo.gae import compute_gae_lambda

    lengths = torch.arange(401)
    ctx = {"effective_token_lengths": lengths, "turn_counts": lengths, "timestep_lengths": lengths}
    pairs = [
        (ours.vapo_length_adaptive, theirs.vapo_length_adaptive_gae, "alpha", (0.05, 0.3, 1.0, 7.5)),
        (ours.relative_position, theirs.relative_position_gae_lambda, "q", (0.01, 0.4, 0.9, 1.0)),
        (ours.constant, theirs.constant_gae_lambda, "value", (0.0, 0.95, 1.0)),
    ]
    bitwise = {
        f"{a.__name__}({key}={v})": torch.equal(a(ctx, **{key: v}), b(ctx, **{key: v}))
        for a, b, key, values in pairs
        for v in values
    }
    gen = torch.Generator().manual_seed(5)
    data = [ref.group(gen, n, turns=3) for n in (3, 4)]
    batch = ref.concat_padded_tensors(data)
    mask = torch.roll(batch["loss_mask"].float(), -1, dims=-1)
    ids = torch.roll(batch["turn_ids"], -1, dims=-1)
    ids[:, -1] = -1
    contexts = {}
    for unit in ("token", "turn"):
        seen: dict[str, Any] = {}

        def capture(context: Any, into: dict[str, Any] = seen) -> torch.Tensor:
            into.update(context)
            return torch.ones(mask.shape[0])

        compute_gae_lambda(capture, loss_mask=mask, turn_ids=ids, timestep_unit=unit)
        areal_ctx = _build_gae_lambda_context(mask, ids, gae_timestep_unit=unit)
        contexts[unit] = {k: torch.equal(seen[k], areal_ctx[k]) for k in areal_ctx}
    return {"bitwise": bitwise, "contexts": contexts, "areal_keys": sorted(areal_ctx)}


def check_areal2(*paths: str) -> dict[str, Any]:
    """AReaL 2's checks for areal_checks.py `all`."""
    from areal.utils.data import concat_padded_tensors
    from areal_checks import check_resolve_beside

    sys.path.insert(0, str(HERE))
    hook, reference = _cases(concat_padded_tensors)
    return {
        "install": check_install_source(),
        "workflow_cases": hook,
        "reference_vs_areal": reference,
        "lambda_functions": check_lambda_functions(),
        "paths": check_resolve_beside(*paths),
    }
