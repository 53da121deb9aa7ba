"""The warm launcher (tests/trainer/warm_torchrun.py) gives its ranks what torchrun gives them.

Each rank prints its launch environment, argv and `__name__`; the same job under `torchrun` and under the
warm launcher must print the same (the run id and ports aside), and a rank's failure must end both
launchers with the same status.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from dist_launch import clean_env, run_bounded, warm_torchrun

RANK = """
import json, os, sys
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
        "MASTER_ADDR", "OMP_NUM_THREADS", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT")
seen = {k: os.environ.get(k) for k in keys}
seen.update(argv=sys.argv[1:], name=__name__, port=bool(os.environ.get("MASTER_PORT")),
            error_file=bool(os.environ.get("TORCHELASTIC_ERROR_FILE")))
print("RANK " + json.dumps(seen, sort_keys=True), flush=True)
if sys.argv[1] == "fail" and os.environ["RANK"] == "1":
    sys.exit(3)
"""


def _ranks(out: str) -> list[dict]:
    return sorted((json.loads(line[5:]) for line in out.splitlines() if line.startswith("RANK ")), key=str)


@pytest.mark.parametrize("mode", ["ok", "fail"])
def test_ranks_see_what_torchrun_gives_them(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    args = ("--standalone", "--nproc_per_node=2", str(script), mode, "x y")
    real = [sys.executable, "-m", "torch.distributed.run", *args]
    (code, out, err), (warm_code, warm_out, warm_err) = (
        run_bounded([real], [clean_env()], 120)[0],
        run_bounded([warm_torchrun(*args)], [clean_env()], 120, warm=True)[0],
    )
    assert (warm_code, _ranks(warm_out)) == (code, _ranks(out)), (out + err, warm_out + warm_err)
    assert len(_ranks(out)) == 2 and code == (0 if mode == "ok" else 1), out + err
    if mode == "fail":
        assert "exitcode  : 3" in err and "exitcode  : 3" in warm_err, (err, warm_err)
