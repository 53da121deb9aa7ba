"""What a run's batches offer the shadow estimators: one rule, from the fields the batches carry.

The trainer and `areal-adv diagnose` derive the fields from the run's config, the engines from the batch in hand;
a shadow that reads seat ids is built for a run whose stages add them, online and offline alike.
"""

from __future__ import annotations

from pathlib import Path

from areal_adv.api.cli_args import load_config
from areal_adv.trainer.diagnostics.batch_offer import BatchOffer, run_batch_fields, run_offer
from areal_adv.trainer.diagnostics.shadow_estimators import build_shadows
from areal_adv.trainer.ppo.actor import PPOActor

ROOT = Path(__file__).resolve().parents[3]
RAE = ROOT / "examples" / "self_play" / "rae_nim.yaml"  # its `rae` stage reads the seat and game ids


def test_the_offer_is_the_fields_a_batch_carries() -> None:
    assert BatchOffer.of_fields(()) == BatchOffer()
    assert BatchOffer.of_fields(
        {"values", "reward_baselines", "token_rewards", "role_ids", "game_ids", "logprobs"}, export="per_turn"
    ) == BatchOffer(values=True, greedy_baselines=True, process_rewards=True, export="per_turn", seats=True)


def test_a_run_offers_what_its_config_adds_to_the_batch() -> None:
    ppo = load_config("preset:ppo", ["rollout.greedy_baseline=true", "rollout.export=per_turn"])
    assert {"values", "reward_baselines"} <= run_batch_fields(ppo, PPOActor(ppo.actor).resolved)
    assert run_offer(ppo, PPOActor(ppo.actor).resolved) == BatchOffer(
        values=True, greedy_baselines=True, export="per_turn"
    )
    grpo = load_config("preset:grpo_arith")
    assert run_offer(grpo, PPOActor(grpo.actor).resolved) == BatchOffer()


def test_a_shadow_that_reads_seat_ids_is_built_for_a_run_whose_batches_carry_them() -> None:
    cfg = load_config(RAE)
    offer = run_offer(cfg, PPOActor(cfg.actor).resolved)  # the trainer's and `areal-adv diagnose`'s
    assert offer.seats
    (shadow,) = build_shadows([str(RAE)], cfg.actor, offer)
    assert shadow.name == "rae_nim" and shadow.actor is not None and shadow.skipped is None
    (blind,) = build_shadows([str(RAE)], cfg.actor, BatchOffer())
    assert blind.skipped == "needs seat ids (role_ids), which this run's batches lack"
