"""Naming the pipeline from an engine: YAML paths, PPOActorConfig objects, overrides, import isolation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from areal_adv.api.cli_args import ConfigError, PPOActorConfig
from areal_adv.integrations.config import load_pipeline, pipeline_actor

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "examples" / "presets" / "grpo.yaml"


def test_yaml_overrides_and_critic_flag():
    spec = load_pipeline(str(GRPO), ["actor.reward_norm.eps=1e-4"], where="w")
    assert spec.actor.reward_norm.eps == 1e-4 and not spec.critic_enabled and spec.source == str(GRPO)
    assert load_pipeline(ROOT / "examples" / "presets" / "ppo.yaml", where="w").critic_enabled


def test_actor_config_object_and_cached_actor():
    cfg = PPOActorConfig(kl_ctl=0.0)
    assert load_pipeline(cfg, where="w").actor is cfg
    with pytest.raises(ConfigError, match="overrides apply to a YAML path"):
        load_pipeline(cfg, ["actor.kl_ctl=1"], where="w")
    first = pipeline_actor(str(GRPO), ["actor.kl_ctl=0.0"], where="w")
    assert pipeline_actor(str(GRPO), ("actor.kl_ctl=0.0",), where="w")[1] is first[1]  # built once per process


def test_bad_sources_and_overrides_name_the_engine_key():
    with pytest.raises(ConfigError, match=r"algorithm\.areal_config: got 3 \(int\), expected the path"):
        load_pipeline(3, where="algorithm.areal_config")
    with pytest.raises(
        ConfigError, match=r"algorithm\.areal_config overrides: got 'actor\.kl_ctl=0' \(str\), expected a list"
    ):
        load_pipeline(str(GRPO), "actor.kl_ctl=0", where="algorithm.areal_config")
    with pytest.raises(ConfigError, match=r"override 'actor\.kl_ctl' is not KEY=VALUE"):
        load_pipeline(str(GRPO), ["actor.kl_ctl"], where="w")
    with pytest.raises(ConfigError, match=r"w='/nonexistent\.yaml': config file .* does not exist"):
        load_pipeline("/nonexistent.yaml", where="w")
    with pytest.raises(ConfigError, match=r"w=.*actor\.no_such_field"):
        load_pipeline(str(GRPO), ["actor.no_such_field=1"], where="w")


def test_importing_areal_and_the_verl_adapter_imports_neither_engine():
    code = (
        "import sys, areal, areal_adv.integrations, areal_adv.integrations.verl, areal_adv.integrations.response_layout; "
        "print(sorted(m for m in ('verl', 'trl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
