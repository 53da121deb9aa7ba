"""Checks of areal-adv inside the real AReaL, run by tests/integrations/test_areal.py in an AReaL venv.

`python areal_checks.py NAME [ARGS]` runs one check and prints one JSON object as its last line.
`.venv-areal` holds AReaL 1.0.4 from the package index; `.venv-areal-source` the AReaL source tree
named by `AREAL_SOURCE` (AReaL 2 and later, scripts/setup_areal.sh); both have areal-adv installed
beside it with `pip install -e .`, as an AReaL user would.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sys
from base64 import urlsafe_b64encode
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent


# --- batches in AReaL's layout ---------------------------------------------------------------------


def make_group(gen: torch.Generator, n: int, *, values: bool) -> dict[str, torch.Tensor]:
    """One prompt's `n` samples, right-padded to the group's own length (as an AReaL workflow returns them)."""
    prompt = int(torch.randint(1, 4, (1,), generator=gen))
    gen_lens = torch.randint(1, 9, (n,), generator=gen)
    truncated = torch.rand(n, generator=gen) < 0.25
    width = prompt + int(gen_lens.max())
    attn = torch.zeros(n, width, dtype=torch.long)
    loss = torch.zeros(n, width, dtype=torch.long)
    for i in range(n):
        end = width if truncated[i] else prompt + int(gen_lens[i])  # a truncated row fills the width
        attn[i, :end] = 1
        loss[i, prompt:end] = 1
    group = {
        "input_ids": torch.randint(1, 100, (n, width), generator=gen) * attn,
        "attention_mask": attn,
        "loss_mask": loss,
        "logprobs": -torch.rand(n, width, generator=gen) * 3 * loss,
        "ref_logp": -torch.rand(n, width, generator=gen) * 3 * loss,
        "rewards": torch.randn(n, generator=gen),
    }
    if values:
        group["values"] = torch.randn(n, width, generator=gen) * attn
    return group


def make_batch(seed: int, sizes: list[int], *, values: bool) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [make_group(gen, n, values=values) for n in sizes]


# --- configs -------------------------------------------------------------------------------------


def areal_actor_config(name: str, group_size: int, **extra: Any) -> Any:
    """AReaL's actor config for `default`, `grpo` (its GSM8K example's settings) or `ppo`."""
    from areal.api.cli_args import NormConfig, PPOActorConfig

    base: dict[str, Any] = {"experiment_name": "check", "trial_name": "t0"}
    if name == "grpo":
        base.update(
            kl_ctl=0.0,
            reward_norm=NormConfig(mean_level="group", std_level="group", group_size=group_size),
            adv_norm=NormConfig(mean_level="batch", std_level="batch"),
        )
    elif name == "ppo":
        base.update(kl_ctl=0.1, kl_estimator="k3", discount=0.99, gae_lambda=0.95, adv_norm=NormConfig())
    elif name != "default":
        raise SystemExit(f"unknown config {name!r}")
    return PPOActorConfig(**{**base, **extra})


def max_diff(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> dict[str, float]:
    """Largest |ours - theirs| per tensor key AReaL returns (every one of them must be in ours)."""
    worst: dict[str, float] = {}
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        for key, ref in b.items():
            if not isinstance(ref, torch.Tensor):
                continue
            got = a[key]
            assert got.shape == ref.shape, (key, got.shape, ref.shape)
            diff = (got.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
            worst[key] = max(worst.get(key, 0.0), diff)
    return worst


def both(config: Any, data: list[dict[str, torch.Tensor]]) -> tuple[list[dict], list[dict]]:
    """(ours through the hook, AReaL's own) on copies of `data`; checks the caller's data is untouched."""
    from areal.trainer.ppo.actor import PPOActor

    from areal_adv.integrations.areal import hook

    keep = copy.deepcopy(data)
    actor = PPOActor(config, engine=None)
    theirs = hook._ORIGINAL(actor, copy.deepcopy(data))
    ours = hook.compute_advantages(actor, data)
    assert all(torch.equal(keep[i][k], data[i][k]) for i in range(len(data)) for k in data[i]), "input mutated"
    return ours, theirs


# --- the checks ----------------------------------------------------------------------------------


def check_install() -> dict[str, Any]:
    """AReaL still at 1.0.4 with every file as its RECORD says; the names resolve as documented."""
    import areal
    import areal.api.cli_args
    import areal.trainer.ppo.actor
    import areal.trainer.ppo.advantage as seed_path
    import areal.utils.data
    import areal.utils.dynamic_import

    import areal_adv
    import areal_adv.trainer.ppo.advantage as ours

    dist = metadata.distribution("areal")
    changed = []
    for entry in dist.files or []:
        if entry.hash is None:
            continue
        digest = urlsafe_b64encode(hashlib.new(entry.hash.mode, entry.read_binary()).digest()).rstrip(b"=").decode()
        if digest != entry.hash.value:
            changed.append(str(entry))
    shared = ["areal.api.cli_args", "areal.trainer.ppo.actor", "areal.utils.data", "areal.utils.dynamic_import"]
    from dataclasses import fields

    from areal_adv.api.cli_args import PPOActorConfig
    from areal_adv.integrations.areal import SHARED_FIELDS

    both_have = {f.name for f in fields(areal.api.cli_args.PPOActorConfig)} & {f.name for f in fields(PPOActorConfig)}
    hook = sys.modules.get("areal_adv.integrations.areal")
    return {
        "hook_installed_at_import": bool(hook and hook.installed()),
        "shared_fields": sorted(SHARED_FIELDS) == sorted(both_have) and len(SHARED_FIELDS) == 21,
        "version": dist.version,
        "files": sum(1 for e in dist.files or [] if e.hash is not None),
        "changed": changed,
        "areal_is_areal": Path(areal.__file__).parent == Path(str(dist.locate_file("areal"))),
        "same_class": seed_path.OutcomeRewardInputs is ours.OutcomeRewardInputs,
        "shared_are_areal": [sys.modules[name].__file__.startswith(str(dist.locate_file(""))) for name in shared],
        "areal_adv": areal_adv.__name__,
    }


def check_equal(name: str) -> dict[str, Any]:
    """Ours through the hook against AReaL's own `compute_advantages` on 10 random batches."""
    worst: dict[str, float] = {}
    for seed in range(10):
        n = 4
        sizes = [n] * (2 + seed % 3)
        config = areal_actor_config(name, group_size=n)
        ours, theirs = both(config, make_batch(seed, sizes, values=name == "ppo"))
        for key, value in max_diff(ours, theirs).items():
            worst[key] = max(worst.get(key, 0.0), value)
    return worst


def check_variable_groups() -> dict[str, Any]:
    """Groups of 3, 5, 2 and 6 samples with group normalisation: ours normalises each prompt's group;
    AReaL 1.0.4's fixed `group_size` cuts runs of 4 rows across prompts, AReaL 2 uses the real group
    sizes. The right answer is AReaL's own computation on each group alone, with that group's size."""
    sizes = [3, 5, 2, 6]
    data = make_batch(7, sizes, values=False)
    config = areal_actor_config("grpo", group_size=4, adv_norm=None)
    ours, theirs = both(config, data)
    per_group = []
    for group, size in zip(data, sizes):
        alone = areal_actor_config("grpo", group_size=size, adv_norm=None)
        per_group += both(alone, [group])[1]
    return {"ours_vs_per_group": max_diff(ours, per_group), "areal_vs_per_group": max_diff(theirs, per_group)}


def check_plugin() -> dict[str, Any]:
    """A plugin that imports the `areal.*` paths, named in `actor.advantage`, runs inside AReaL's actor."""
    from areal_adv.api.cli_args import AdvantageConfig, StageSpec
    from areal_adv.integrations.areal import AdvPPOActorConfig

    sys.path.insert(0, str(HERE))
    base = {"experiment_name": "check", "trial_name": "t0"}
    stage = StageSpec("areal_check_plugins.halve_outcome")
    shaped = AdvPPOActorConfig(**base, advantage=AdvantageConfig(outcome_reward_shaping=stage))
    data = make_batch(3, [4, 4], values=False)
    ours, _ = both(shaped, data)
    _, scaled = both(areal_actor_config("default", 4, reward_scaling=0.5), data)
    import areal_check_plugins

    halved = max((o["rewards"] - 0.5 * d["rewards"]).abs().max().item() for o, d in zip(ours, data))
    diff = max_diff(ours, scaled)
    diff.pop("rewards")  # ours returns the shaped rewards, AReaL the raw ones (checked against half of them)
    return {"diff": diff, "rewards_vs_half": halved, "calls": areal_check_plugins.CALLS}


def check_config_loader(yaml_path: str) -> dict[str, Any]:
    """AReaL's own loader: its `GRPOConfig` refuses `actor.advantage`, `AdvGRPOConfig` takes it."""
    from areal.api.cli_args import GRPOConfig, load_expr_config

    from areal_adv.integrations.areal import AdvGRPOConfig, areal_config_to_ours

    argv = ["--config", yaml_path]
    try:
        load_expr_config(argv, GRPOConfig)
        refused = ""
    except Exception as exc:  # noqa: BLE001 - the class of OmegaConf's error is what we report
        refused = type(exc).__name__
    cfg, _ = load_expr_config(argv, AdvGRPOConfig)
    ours = areal_config_to_ours(cfg.actor)
    outcome = ours.advantage.outcome_reward_shaping
    return {
        "refused": refused,
        "actor_class": type(cfg.actor).__name__,
        "outcome": [outcome.implementation, dict(outcome.kwargs)] if outcome else None,
        "kl_ctl": ours.kl_ctl,
        "reward_norm": [ours.reward_norm.mean_level, ours.reward_norm.std_level] if ours.reward_norm else None,
        "areal_group_size": cfg.actor.reward_norm.group_size if cfg.actor.reward_norm else None,
        "diagnostics": list(cfg.actor.diagnostics.estimators),
    }


def check_merged_config(base: str, fragment: str, out: str) -> dict[str, Any]:
    """`fragment` (a docs block) merged over the experiment config `base`, then `check_config_loader`."""
    from omegaconf import OmegaConf

    OmegaConf.save(OmegaConf.merge(OmegaConf.load(base), OmegaConf.load(fragment)), out)
    return check_config_loader(out)


def check_two_ranks(name: str) -> dict[str, Any]:
    """Under torchrun with 2 gloo ranks (batch statistics all-reduced): ours against AReaL's on this rank."""
    import areal.trainer.ppo.actor  # noqa: F401 - AReaL's actor, loaded as a worker loads it
    import torch.distributed as dist

    hooked_at_import = "areal_adv.integrations.areal" in sys.modules  # no AREAL_ADV_HOOK_AREAL here
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    worst: dict[str, float] = {}
    for seed in range(3):
        config = areal_actor_config(name, group_size=4)
        ours, theirs = both(config, make_batch(100 * seed + rank, [4, 4], values=name == "ppo"))
        for key, value in max_diff(ours, theirs).items():
            worst[key] = max(worst.get(key, 0.0), value)
    data = make_batch(rank, [4, 4], values=name == "ppo")
    ours_global, _ = both(areal_actor_config(name, group_size=4), data)
    dist.destroy_process_group()
    _, local = both(areal_actor_config(name, group_size=4), data)  # statistics of this rank's rows alone
    local_diff = max_diff(ours_global, local)["advantages"]
    return {"rank": rank, "worst": worst, "global_vs_local": local_diff, "hooked_at_import": hooked_at_import}


def check_resolve(*paths: str) -> list[str]:
    """The dotted paths that do not resolve here, by tests/test_public_paths.py's own `resolve`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("public_paths", HERE.parent / "test_public_paths.py")
    assert spec is not None and spec.loader is not None
    public_paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(public_paths)
    failed = []
    for path in paths:
        try:
            public_paths.resolve(path)
        except (ImportError, AttributeError):
            failed.append(path)
    return failed


def _public_paths() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("public_paths", HERE.parent / "test_public_paths.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _home_module(path: str) -> str:
    """`__name__` of the longest prefix of `path` that is a loaded module (ours: `areal_adv.…`, alias or not)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            return str(module.__name__)
    return ""


def check_resolve_beside(*paths: str) -> dict[str, Any]:
    """Every documented `areal.*` path beside this AReaL: ours, or in a module the docs list as AReaL's
    ("Which `areal.*` name is whose") whose `areal_adv` twin resolves. Nothing else may happen: a path
    that resolves to AReaL's object without being documented as AReaL's would change type silently."""
    import importlib

    public_paths = _public_paths()
    table = public_paths.areal_owned_modules()
    report: dict[str, Any] = {"ours": 0, "areal_documented": [], "undocumented": [], "twins_missing": []}
    for path in paths:
        owner = next((m for m in table if path == m or path.startswith(m + ".")), None)
        if owner is not None:
            areal_module = importlib.import_module(owner)
            if not getattr(areal_module, "__name__", "").startswith("areal_adv"):
                report["areal_documented"].append(path)
                if public_paths.needs_areal(path):
                    continue  # documented as AReaL's own name (no twin to have)
                try:
                    public_paths.resolve(table[owner] + path[len(owner) :])
                except (ImportError, AttributeError):
                    report["twins_missing"].append(path)
                continue
        try:
            public_paths.resolve(path)
        except (ImportError, AttributeError):
            report["undocumented"].append(path)
            continue
        module = _home_module(path)
        if module.startswith("areal_adv"):
            report["ours"] += 1
        else:
            report["undocumented"].append(f"{path} (in {module})")
    return report


def check_diagnostics() -> dict[str, Any]:
    """`actor.diagnostics.estimators`: the shadows' diagnostics reach AReaL's stats tracker, advantages unchanged."""
    import math

    from areal.api.cli_args import NormConfig
    from areal.utils import stats_tracker

    from areal_adv.api.train_args import DiagnosticsConfig
    from areal_adv.integrations.areal import AdvPPOActorConfig

    def config(*names: str) -> Any:
        norm = NormConfig(mean_level="group", std_level="group", group_size=4)
        base = {"experiment_name": "check", "trial_name": "t0", "kl_ctl": 0.0, "reward_norm": norm}
        return AdvPPOActorConfig(**base, diagnostics=DiagnosticsConfig(estimators=list(names)))

    data = make_batch(5, [4, 4, 4], values=False)
    stats_tracker.export(reset=True)
    plain, _ = both(config(), data)
    untracked = [k for k in stats_tracker.export(reset=True) if k.startswith("diagnostics/")]
    ours, _ = both(config("rloo", "maxrl", "ppo"), data)
    tracked = {k: v for k, v in stats_tracker.export(reset=True).items() if k.startswith("diagnostics/")}
    return {
        "keys": sorted(tracked),
        "finite": all(math.isfinite(v) for v in tracked.values()),
        "untracked": untracked,
        "vs_plain": max_diff(ours, plain),
    }


def check_all(yaml_path: str, *paths: str) -> dict[str, Any]:
    """Every single-process check in one interpreter (AReaL's import alone takes seconds); `paths`: the
    documented names that need AReaL. Beside an AReaL source tree, its install and AReaL 2's checks."""
    common = {
        **{f"equal_{name}": check_equal(name) for name in ("default", "grpo", "ppo")},
        "variable_groups": check_variable_groups(),
        "plugin": check_plugin(),
        "config_loader": check_config_loader(yaml_path),
        "diagnostics": check_diagnostics(),
    }
    if not os.environ.get("AREAL_SOURCE"):
        return {"unresolved": check_resolve(*paths), "install": check_install(), **common}
    from areal2_checks import check_areal2

    return {**check_areal2(*paths), **common}


def main(argv: list[str]) -> None:
    checks = {
        "all": check_all,
        "install": check_install,
        "equal": check_equal,
        "variable_groups": check_variable_groups,
        "plugin": check_plugin,
        "config_loader": check_config_loader,
        "merged_config": check_merged_config,
        "two_ranks": check_two_ranks,
        "diagnostics": check_diagnostics,
    }
    name, *args = argv
    result = checks[name](*args)
    # one write of one line: the two ranks of `two_ranks` share the pipe, and a write under 4 KiB is atomic
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    torch.manual_seed(0)
    main(sys.argv[1:])
