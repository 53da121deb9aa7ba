"""A command forked warm (tests/warm_python.py) gives what the same command in a fresh interpreter gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import warm_python

SCRIPT = textwrap.dedent(
    """
    import atexit, json, os, sys, threading, time
    atexit.register(lambda: print("atexit ran"))
    mode = sys.argv[1]
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0], "var": os.environ.get("WARM_VAR")}))
    sys.stdout.flush()
    print("to stderr", file=sys.stderr)
    if mode == "thread":
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread done"))).start()
    elif mode == "exit3":
        sys.exit(3)
    elif mode == "message":
        raise SystemExit("a message")
    elif mode == "raise":
        raise ValueError("boom")
    elif mode == "signal":
        import signal
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    """
)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "probe.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    return path


@pytest.mark.parametrize("mode", ["plain", "thread", "exit3", "message", "raise", "signal"])
def test_a_script_gives_the_fresh_interpreter_s_streams_and_status(tmp_path: Path, script: Path, mode: str) -> None:
    cmd = [sys.executable, str(script), mode, "x y"]
    env = {**warm_python.BASE_ENV, "WARM_VAR": "set"}
    fresh = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    warm = warm_python.run(cmd, cwd=tmp_path, env=env, timeout=60)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    forked = warm_python.start(cmd, cwd=tmp_path, env=env)
    assert isinstance(forked, warm_python.WarmProcess) and forked.communicate(timeout=60) == (warm.stdout, warm.stderr)
    assert fresh.returncode == {"plain": 0, "thread": 0, "exit3": 3, "message": 1, "raise": 1, "signal": -15}[mode]
    assert '"var": "set"' in warm.stdout and f'"path0": "{script.parent}"' in warm.stdout


def test_a_module_runs_as_main_from_its_working_directory_and_pythonpath(tmp_path: Path, script: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "probe.py").write_text(SCRIPT)
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper_mod.py").write_text("VALUE = 7\n")
    env = {**warm_python.BASE_ENV, "PYTHONPATH": str(lib)}
    cmd = [sys.executable, "-m", "pkg.probe", "plain"]
    fresh = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    warm = warm_python.run(cmd, cwd=tmp_path, env=env, timeout=60)
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    check = [sys.executable, "-m", "areal_adv.trainer.main", "--config", "missing.yaml"]
    fresh, warm = (run(check, cwd=tmp_path, env=env, timeout=120) for run in (_fresh, warm_python.run))
    assert (warm.returncode, warm.stdout, warm.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert warm.returncode == 1 and "config error: config file 'missing.yaml'" in warm.stderr


def _fresh(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]


def test_the_child_is_forked_warm_unless_an_import_time_variable_differs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(warm_python.LOG_ENV, str(tmp_path / "log.jsonl"))
    code = tmp_path / "which.py"
    code.write_text("import sys; print('torch' in sys.modules, __import__('os').environ.get('OMP_NUM_THREADS'))\n")
    base = dict(warm_python.BASE_ENV)  # the session's environment (an earlier test may have left this one's changed)
    warm = warm_python.run([sys.executable, str(code)], cwd=tmp_path, env=base)
    assert warm.stdout.split()[0] == "True"  # preloaded: the fork server imported torch
    other = str(int(base.get("NUMBA_NUM_THREADS", "1")) + 1)
    cold = warm_python.run([sys.executable, str(code)], cwd=tmp_path, env={**base, "NUMBA_NUM_THREADS": other})
    assert cold.stdout.split()[0] == "False"  # numba reads it at import: a fresh interpreter
    cold = warm_python.run([sys.executable, "-c", "import sys; print('torch' in sys.modules)"], cwd=tmp_path)
    assert cold.stdout.strip() == "False"  # `-c` is not forked
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(r["forked"], r["why"]) for r in log] == [
        (True, None),
        (False, "variables read at import differ from the fork server's: NUMBA_NUM_THREADS"),
        (False, "not `python -m MODULE` or `python SCRIPT` with this interpreter"),
    ]


def test_variables_libraries_set_while_tests_run_do_not_stop_forking(tmp_path: Path, monkeypatch) -> None:
    """torch's inductor, verl and ray write these into the test process's environment; none is read at import."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # restored after the test: cache_dir() sets it
    code = tmp_path / "which.py"
    code.write_text("import os, sys; print('torch' in sys.modules, os.environ.get('TORCH_CUDA_ARCH_LIST'))\n")
    env = {
        **warm_python.BASE_ENV,
        "TORCHINDUCTOR_CACHE_DIR": cache_dir(),
        "TORCH_CUDA_ARCH_LIST": "8.0",
        "PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace",
    }
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == env["TORCHINDUCTOR_CACHE_DIR"]  # what torch does in the suite
    proc = warm_python.start([sys.executable, str(code)], cwd=tmp_path, env=env)
    assert isinstance(proc, warm_python.WarmProcess)
    assert proc.communicate(timeout=60) == ("True 8.0\n", "")  # forked, and the command's value is its own


def test_a_timeout_kills_the_child_and_its_subprocesses(tmp_path: Path) -> None:
    script = tmp_path / "hang.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        warm_python.run([sys.executable, str(script)], cwd=tmp_path, timeout=5)
    grandchild = int(caught.value.output.split()[0])
    try:
        status = psutil.Process(grandchild).status()
    except psutil.NoSuchProcess:
        status = psutil.STATUS_DEAD
    assert status in (psutil.STATUS_DEAD, psutil.STATUS_ZOMBIE)  # killed (a zombie until init reaps it)


def test_another_copy_of_a_preloaded_package_on_pythonpath_gets_a_fresh_interpreter(tmp_path: Path) -> None:
    (tmp_path / "other" / "transformers").mkdir(parents=True)
    (tmp_path / "other" / "transformers" / "__init__.py").write_text("MARK = 'the other copy'\n")
    code = tmp_path / "which.py"
    code.write_text("import transformers; print(getattr(transformers, 'MARK', 'the pinned one'))\n")
    env = {**warm_python.BASE_ENV, "PYTHONPATH": str(tmp_path / "other")}
    assert warm_python.run([sys.executable, str(code)], cwd=tmp_path, env=env).stdout == "the other copy\n"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])  # the checkout: the areal_adv the server loaded
    assert warm_python.run([sys.executable, str(code)], cwd=tmp_path, env=env).stdout == "the pinned one\n"


@pytest.mark.parametrize("threads", ["1", "2"])
def test_torch_takes_omp_num_threads_from_the_command(tmp_path: Path, threads: str) -> None:
    code = tmp_path / "threads.py"
    code.write_text("import sys, torch; torch.ones(4) + 1; print('torch' in sys.modules, torch.get_num_threads())\n")
    env = {**warm_python.BASE_ENV, "OMP_NUM_THREADS": threads}
    fresh = subprocess.run([sys.executable, str(code)], env=env, capture_output=True, text=True, timeout=120)
    warm = warm_python.run([sys.executable, str(code)], cwd=tmp_path, env=env, timeout=120)
    assert fresh.stdout.split()[1] == warm.stdout.split()[1] == threads, (fresh.stdout, warm.stdout)
