"""Under data parallelism the stage state is identical on every rank and equals the 1-process state.

Two gloo ranks (torchrun) run KRPO, KRPO on split rollouts, SPO, RAE, running reward and
advantage normalisation, GiGPO with a batch-level `adv_norm` and LitePPO (stateless, its batch std
all-reduced) for several steps, each on
its round-robin share of the step's prompt groups; prompts recur within and across steps, and a prompt drawn
twice in a step may land on both ranks. After every step both ranks' states have
the same fingerprint (bitwise), the final states equal a single process's on the
whole batch bit for bit (RAE's, which runs through the step's samples in sequence, on the
groups in the order the ranks gather them; the running moments, merged across ranks, to float64
rounding), and every rank's advantages equal that process's rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from state_cases import CASES, MERGED_MOMENTS, STEPS, fingerprints, make_config, reference_layout

from areal_adv.trainer.ppo.actor import PPOActor
from areal_adv.utils.data import concat_batch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/trainer: the launch helpers
from dist_launch import clean_env, run_bounded, warm_torchrun  # noqa: E402

WORKER = Path(__file__).resolve().parent / "state_worker.py"
JOB_TIMEOUT_S = 180
#: one 2-rank job (the `ranks` fixture) for the module: its tests stay on one pytest-xdist worker (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("stage_state_distributed")
MAX_ABS_DIFF: dict[str, float] = {}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("stage_state")
    cmd = [
        *warm_torchrun(),
        "--standalone",
        "--nproc_per_node",
        "2",
        str(WORKER),
        str(out),
    ]
    [(code, stdout, stderr)] = run_bounded([cmd], [clean_env()], JOB_TIMEOUT_S, warm=True)
    assert code == 0, f"torchrun exited with {code}:\n{(stdout + stderr)[-4000:]}"
    return [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]


def _rows(meta, groups: list[int]) -> torch.Tensor:
    starts = [0]
    for size in meta.traj_group_sizes:
        starts.append(starts[-1] + size)
    return torch.cat([torch.arange(starts[g], starts[g + 1]) for g in groups])


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_agrees_across_ranks_and_with_one_process(ranks, name):
    whole = PPOActor(make_config(name))
    worst = 0.0
    for step in range(STEPS):
        fps = [r[name]["steps"][step]["fingerprints"] for r in ranks]
        assert fps[0] == fps[1], f"step {step}: the ranks' states differ"
        groups, rank_positions = reference_layout(name, step, 2)
        batch, meta = concat_batch(groups)
        out = whole.compute_advantages(batch, meta)
        if name not in MERGED_MOMENTS:  # merged moments: compared below, to float64 rounding
            assert fingerprints(whole) == fps[0], f"step {step}: the 2-rank state differs from the 1-process state"
        for rank, result in enumerate(ranks):
            local = result[name]["steps"][step]["out"]
            rows = _rows(meta, rank_positions[rank])
            for key in ("advantages", "rewards", "returns"):
                expected = out[key][rows]
                got = local[key]
                if got.ndim == 2:
                    expected = expected[:, : got.shape[1]]
                worst = max(worst, float((got.double() - expected.double()).abs().max()))
    MAX_ABS_DIFF[name] = worst
    assert worst <= 1e-5, worst
    for state_name, state in whole.stage_states.items():
        saved = ranks[0][name]["states"][state_name]["values"]
        for key, value in state.state_dict()["values"].items():
            if name in MERGED_MOMENTS:
                assert saved[key] == pytest.approx(value, rel=1e-12, abs=1e-15), (state_name, key)
            else:
                assert torch.equal(saved[key], value), (state_name, key)
    if name.startswith(("krpo", "spo", "rae", "running")):
        assert whole.stage_states, "a stateful case keeps state"
