"""What a run will run, as a table: the same rows for `areal-adv validate` and the trainer's start.

`stage_rows` lists every advantage stage as the actor resolved it, then the task,
each reward function and the prompt datasets; `stage_table` lays them out.
`matching_presets` names the estimator presets whose algorithm the config uses
(every key a preset file sets, compared on the resolved config), and
`start_block` adds the thread count and the device: the block the trainer prints
before its first step, so a log says what ran without opening `config.yaml`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

__all__ = ["matching_presets", "stage_rows", "stage_table", "start_block"]


def stage_table(rows: Sequence[tuple[str, str, str]]) -> str:
    """`stage / implementation / kwargs` columns, each as wide as its widest cell."""
    headers = ("stage", "implementation", "kwargs")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join("{:<" + str(w) + "}" for w in widths)
    out = [line.format(*headers), line.format(*("-" * w for w in widths))]
    out += [line.format(*r) for r in rows]
    return "\n".join(out)


def task_rows(config: Any, parts: Any) -> list[tuple[str, str, str]]:
    """The task and each reward function as `stage / implementation / kwargs` rows, then the prompt datasets."""
    task = config.task
    kind = "multi-turn" if getattr(parts.task, "multi_turn", False) else "single-turn"
    rows = [(f"task ({kind})", task.implementation, str(task.kwargs))]
    rows += [
        (f"reward/{r.name} x{r.weight:g}", spec.implementation, str(spec.kwargs))
        for r, spec in zip(parts.reward_functions, config.reward)
    ]
    for name, data in (("data.train", parts.train_data), ("data.eval", parts.eval_data)):
        if data is not None:
            rows.append((name, getattr(config.data, name.split(".")[1]), f"{len(data)} rows"))
    return rows


def stage_rows(config: Any, actor: Any, parts: Any) -> list[tuple[str, str, str]]:
    """Every resolved advantage stage (`actor.resolved`), then the task side (`task_rows`)."""
    return [*actor.resolved.describe(config.actor), *task_rows(config, parts)]


@functools.cache
def _preset_keys(name: str) -> frozenset[tuple[str, str]]:
    """Every `section.key` the preset's own file sets, and those of the presets it builds on (not the default run)."""
    import yaml

    from areal_adv.api.presets import DEFAULT_RUN, preset_path

    raw = yaml.safe_load(preset_path(name).read_text(encoding="utf-8")) or {}
    keys = {(section, key) for section, body in raw.items() if isinstance(body, dict) for key in body}
    for parent in raw.get("defaults") or []:
        if isinstance(parent, str) and parent.startswith("preset:") and parent[len("preset:") :] != DEFAULT_RUN:
            keys |= _preset_keys(parent[len("preset:") :])
    return frozenset(keys)


@functools.cache
def _preset_settings(name: str) -> tuple[tuple[str, str, Any], ...]:
    """(section, key, resolved value) for every `section.key` the preset sets (itself or through the presets it
    builds on), and `critic.enabled` always: with or without a critic is part of every algorithm."""
    from areal_adv.api.cli_args import load_config

    cfg = load_config(f"preset:{name}")
    return tuple(
        (section, key, getattr(getattr(cfg, section), key))
        for section, key in sorted(_preset_keys(name) | {("critic", "enabled")})
    )


def matching_presets(config: Any) -> list[str]:
    """The estimator presets (every preset but the default run) whose every setting `config` has too, the most
    specific only: a config of a preset that builds on another (grpo_filter_zero_advantage on grpo) names that one."""
    from areal_adv.api.presets import DEFAULT_RUN, preset_names

    found: dict[str, tuple[tuple[str, str, Any], ...]] = {}
    for name in preset_names():
        settings = _preset_settings(name) if name != DEFAULT_RUN else ()
        if settings and all(getattr(getattr(config, s), k, object()) == v for s, k, v in settings):
            found[name] = settings
    # the most specific: a preset that another match extends (its settings a strict subset) is left out
    return [name for name, own in found.items() if not any(_extends(other, own) for other in found.values())]


def _extends(other: tuple[tuple[str, str, Any], ...], own: tuple[tuple[str, str, Any], ...]) -> bool:
    """Whether `other` sets everything `own` sets, to the same values, and more."""
    return len(other) > len(own) and all(item in other for item in own)


def start_block(
    config: Any,
    actor: Any,
    parts: Any,
    *,
    num_threads: int,
    device: Any,
    world_size: int,
    precision: str | None = None,
) -> str:
    """The trainer's opening lines: the stage table, the matching preset, threads and device (and precision)."""
    try:
        presets = matching_presets(config)
    except Exception as exc:  # a broken preset file must not stop a run that does not use it
        presets, note = [], f" (presets not compared: {type(exc).__name__}: {exc})"
    else:
        note = ""
    preset = ", ".join(f"preset:{p}" for p in presets) or f"none matches (`areal-adv presets` lists them){note}"
    threads = "train.num_threads" if config.train.num_threads is not None else "by the model's size"
    ranks = f" x {world_size} ranks" if world_size > 1 else ""
    return "\n".join(
        [
            f"[areal-adv] {config.experiment_name}: what runs",
            stage_table(stage_rows(config, actor, parts)),
            f"estimator preset: {preset}",
            f"threads: {num_threads} per process ({threads}) | device: {device}{ranks}",
            *([f"precision: {precision}"] if precision else []),
        ]
    )
