"""Two torchrun agents ("nodes") on loopback, meeting at a c10d rendezvous: training, a lost node, an elastic restart.

Each agent runs `torch.distributed.run --nnodes 2 --nproc_per_node 1 --rdzv-backend c10d --rdzv-endpoint
127.0.0.1:PORT` (the multi-node command of docs/distributed.md, both nodes on this machine and one file system):

* both train 3 steps together and exit 0; the final checkpoint holds one shard per rank;
* the node that does not host the rendezvous store is killed (SIGKILL to its agent and its worker) once a
  step is logged: the other node's rank names the lost rank as gone and its agent exits non-zero, within
  the job timeout;
* with `--max-restarts 1` and `train.resume=auto`, rank 1's worker dies (os._exit) in step 2, once: both
  agents restart their workers, which agree on a new job attempt in the agent's store (it still holds the
  dead attempt's keys), resume from the last checkpoint and finish, every step logged once.

Every agent runs under a subprocess timeout that also kills its worker, so a hang fails the test.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import tiny_run
from dist_launch import ROOT, clean_env, descendants, free_port, kill_tree, run_bounded

JOB_TIMEOUT_S = 360  # shared CPUs: generous; a hang still fails the test
TINY = [
    *tiny_run.TINY,
    "train.num_threads=1",
    "train.dist_timeout_s=120",
    "train.failure_timeout_s=20",
]


def _agent(port: int, out: Path, *extra: str, restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id=two-nodes-{port}",
        f"--max-restarts={restarts}",
        "-m",
        "areal_adv.trainer.main",
        "--config",
        str(ROOT / "examples" / "grpo_arith.yaml"),
        *TINY,
        f"output.dir={out}",
        "experiment_name=two_nodes",
        *extra,
    ]


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_two_agents_on_loopback_train_three_steps_together(tmp_path: Path) -> None:
    port = free_port()
    cmd = _agent(port, tmp_path, "train.steps=3", "train.debug_param_checksum=true")
    results = run_bounded([cmd, cmd], [clean_env(), clean_env()], JOB_TIMEOUT_S)
    for code, out, err in results:
        assert code == 0, f"an agent exited with {code}:\n{out[-2000:]}\n{err[-3000:]}"
    assert sum((out + err).count("[areal-adv] two_nodes: done, 3/3 steps") for _, out, err in results) == 1  # rank 0
    run_dir = tmp_path / "two_nodes" / "trial0"
    assert _steps(run_dir) == [0, 1, 2]
    sums = [json.loads(line) for line in (run_dir / "param_checksums.jsonl").read_text().splitlines()]
    assert [s["step"] for s in sums] == [0, 1, 2]
    assert all(len(set(s["policy"])) == 1 and len(s["policy"]) == 2 for s in sums)  # equal replicas on both
    state = run_dir / "checkpoints" / "step_3" / "state"
    assert sorted(p.name for p in state.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (state / ".metadata").is_file()


def _rank_of(agent: subprocess.Popen) -> int | None:
    """The RANK of the agent's worker (read from its environment), or None while it has none."""
    for pid in descendants(agent.pid):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in env:
            if item.startswith(b"RANK="):
                return int(item[5:])
    return None


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:  # a file, not a pipe: nobody reads the output until the agent ends
        return subprocess.Popen(
            cmd, cwd=ROOT, env=clean_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )


def test_a_lost_node_is_named_by_the_other_which_exits(tmp_path: Path) -> None:
    """The node that does not host the rendezvous store is lost (the store's host starts first, alone).

    The store lives in the first agent that binds the endpoint: were its node lost, the survivor would lose
    the store as well, and with it the stamps that tell which peer went. A real job keeps its endpoint on a
    node that stays, too.
    """
    port = free_port()
    cmd = _agent(port, tmp_path, "train.steps=50")
    host = _start(cmd, tmp_path / "host.log")
    deadline = time.monotonic() + JOB_TIMEOUT_S
    agents = [host]
    try:
        while not _listening(port) and host.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        agents.append(_start(cmd, tmp_path / "other.log"))
        lost = agents[1]
        metrics = tmp_path / "two_nodes" / "trial0" / "metrics.jsonl"
        while time.monotonic() < deadline and all(a.poll() is None for a in agents):
            if metrics.is_file() and metrics.read_text().strip():
                break
            time.sleep(0.05)
        assert all(a.poll() is None for a in agents), "an agent ended before the first step was logged"
        rank = _rank_of(lost)
        assert rank in (0, 1), rank
        kill_tree(lost)
        host.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the surviving node did not exit within {JOB_TIMEOUT_S} s") from None
    finally:
        for agent in agents:
            if agent.poll() is None:
                kill_tree(agent)
    out = (tmp_path / "host.log").read_text()
    assert host.returncode != 0, out[-3000:]
    said = f"error: rank {rank} failed in step "
    assert said in out and "its process ended without reporting an error" in out, out[-3000:]
    assert f"rank {1 - rank} stopped because of it" in out, out[-3000:]


def test_an_elastic_restart_resumes_from_the_last_checkpoint_and_logs_every_step_once(tmp_path: Path) -> None:
    """Rank 1's worker exits in step 2 (once: a marker file survives the restart); both nodes restart and finish.

    The agents' restart counts differ (the node whose worker died counts a restart, the other restarts for
    the membership change and does not), and the store at MASTER_PORT still holds the first attempt's keys:
    the restarted ranks must neither read a dead peer's gloo address nor the first attempt's failure report.
    """
    port = free_port()
    marker = tmp_path / "rank1-died"
    published = tmp_path / "two_nodes" / "trial0" / "checkpoints" / "step_2" / "areal_checkpoint.json"
    cmd = _agent(
        port,
        tmp_path,
        "train.steps=4",
        "train.save_every=1",
        "train.resume=auto",
        "reward=[{implementation: dist_failing_plugins.reward_dying_once_on_rank1, kwargs: {at_call: 2, "
        f"marker: {marker}, after: {published}}}}}]",
        restarts=1,
    )
    # two job starts in one bound (each start imports torch and builds the model on busy cores; 121-271 s
    # the two together here, at load 11-17 on 2 cores)
    results = run_bounded([cmd, cmd], [clean_env(), clean_env()], 2 * JOB_TIMEOUT_S)
    logs = "".join(out + err for _, out, err in results)
    for code, out, err in results:
        assert code == 0, f"an agent exited with {code}:\n{out[-2000:]}\n{err[-3000:]}"
    assert marker.is_file()  # the first attempt's rank 1 did die
    assert "[areal-adv] resuming from " in logs and "(step 2)" in logs, logs[-3000:]
    assert logs.count("[areal-adv] two_nodes: done, 4/4 steps") == 1
    assert _steps(tmp_path / "two_nodes" / "trial0") == [0, 1, 2, 3]
