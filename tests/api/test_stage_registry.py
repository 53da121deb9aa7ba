"""The stage registry: one name per function, and the config's names read from the same decorators."""

from __future__ import annotations

import pytest

from areal_adv.api import stage_registry
from areal_adv.api.builtin_stages import BUILTIN_STAGE_IMPLEMENTATIONS
from areal_adv.api.stage_registry import SELECTORS, STAGE_REGISTRY, STAGES, StageRegistry


def first(inputs):
    return inputs


def second(inputs):
    return inputs


def test_registering_a_name_twice_names_both_functions():
    registry = StageRegistry()
    registry.register("estimator", "mine")(first)
    with pytest.raises(ValueError) as err:
        registry.register("estimator", "mine")(second)
    message = str(err.value)
    assert "estimator 'mine' is registered twice" in message
    assert f"{__name__}.first" in message and f"{__name__}.second" in message
    assert registry.names("estimator") == ("mine",)  # the first registration stands


def test_a_builtin_name_registered_again_raises_and_keeps_the_builtin():
    from areal_adv.trainer.ppo import advantage_algorithms as algos

    with pytest.raises(
        ValueError, match=r"token_gae.*areal_adv\.trainer\.ppo\.advantage_algorithms\.token_gae.*second"
    ):
        stage_registry.register_stage("estimator", "token_gae")(second)
    assert STAGE_REGISTRY.defined_in("estimator", algos.__name__)["token_gae"] is algos.token_gae


def test_the_same_name_in_two_stages_is_two_registrations():
    registry = StageRegistry()
    registry.register("estimator", "mine")(first)
    registry.register("process_adv_shaping", "mine")(second)
    assert registry.names("estimator") == registry.names("process_adv_shaping") == ("mine",)


@pytest.mark.parametrize(
    "stage, name, message",
    [("no_such_stage", "x", "stage 'no_such_stage' is not one of"), ("estimator", "auto", r"other than \['auto'\]")],
)
def test_bad_stage_or_selector_name_is_refused(stage, name, message):
    with pytest.raises(ValueError, match=message):
        StageRegistry().register(stage, name)


def test_config_names_are_the_registered_functions_plus_the_selectors():
    from areal_adv.trainer.ppo import stage_resolution

    resolved = {
        "outcome_reward_shaping": stage_resolution.OUTCOME_BUILTINS,
        "estimator": stage_resolution.ESTIMATOR_BUILTINS,
        "process_adv_shaping": stage_resolution.PROCESS_BUILTINS,
    }
    assert set(BUILTIN_STAGE_IMPLEMENTATIONS) == set(STAGES)
    assert BUILTIN_STAGE_IMPLEMENTATIONS["compute"] == SELECTORS["compute"]
    for stage, functions in resolved.items():
        assert BUILTIN_STAGE_IMPLEMENTATIONS[stage] == SELECTORS[stage] + tuple(functions)
        assert tuple(functions) and all(callable(fn) for fn in functions.values())


def test_a_function_registered_outside_the_decorators_fails_the_check():
    registry = StageRegistry()
    registry.register("estimator", "token_gae")(first)
    with pytest.raises(RuntimeError, match=r"estimator has functions for \['token_gae'\], but the `@register_stage`"):
        registry.functions("estimator")
