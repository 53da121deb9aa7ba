"""numba's on-disk cache: a second process loads the pipeline's kernels instead of compiling them.

Both processes run the default GRPO pipeline (group reward normalisation,
REINFORCE returns, the fused CPU kernels) on the same batch with one empty
`NUMBA_CACHE_DIR`. The first compiles and writes the cache; the second must
find every kernel it calls there (numba's dispatcher statistics: cache hits,
no misses). No timings are asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from areal_adv.trainer.ppo.kernels.numba_cpu import NUMBA_AVAILABLE

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not NUMBA_AVAILABLE, reason="the fused pipeline needs numba")

_RUN = """
import gc, json, sys
sys.path.insert(0, {factory!r})
import numba
from batch_factory import make_groups
from areal_adv.api.cli_args import PPOActorConfig, NormConfig
from areal_adv.trainer.ppo.actor import PPOActor

numba.set_num_threads(1)
config = PPOActorConfig(kl_ctl=0.0, reward_norm=NormConfig(mean_level="group", std_level="group"),
                        advantage={{"estimator": {{"implementation": "reinforce_return"}}}})
PPOActor(config).compute_advantages(make_groups(0, n_groups=4, max_turns=1))
stats = {{}}
for fn in gc.get_objects():  # every dispatcher that ran (the drivers and what they called)
    if isinstance(fn, numba.core.dispatcher.Dispatcher) and fn.signatures:
        stats[fn.py_func.__module__ + "." + fn.py_func.__qualname__] = [sum(fn.stats.cache_hits.values()),
                                                                       sum(fn.stats.cache_misses.values())]
print(json.dumps(stats))
"""


def _run(cache: Path) -> dict[str, list[int]]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "AREAL_GAE_BACKEND": "numba"}
    code = _RUN.format(factory=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_every_kernel_from_the_disk_cache(tmp_path: Path) -> None:
    cache = tmp_path / "numba"
    first = _run(cache)
    assert first, "the pipeline called no numba kernel"
    assert all(misses > 0 and hits == 0 for hits, misses in first.values()), first  # compiled: nothing cached yet
    assert list(cache.rglob("*.nbi")) and list(cache.rglob("*.nbc"))
    second = _run(cache)
    # the drivers come from the cache (the kernels they call are linked in, not dispatched again); nothing compiles
    assert second and set(second) <= set(first), (first, second)
    assert all(hits > 0 and misses == 0 for hits, misses in second.values()), second
