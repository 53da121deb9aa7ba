"""`python -m MODULE ARGS` (or `python SCRIPT ARGS`) in a child forked from an interpreter that has torch loaded.

Every fresh interpreter the suite starts spends 5 to 8 CPU-seconds importing torch, transformers and the
trainer before its first line of work, and most of the suite's CPU time is such starts. Where a fresh
interpreter is not what a test checks (a benchmark script's output and rows, a run's files), the test starts
its command with `run` instead of `subprocess.run`: the standard library's fork server
(`multiprocessing`'s "forkserver" context, with `set_forkserver_preload`) imports those modules once per test
process, never runs a torch operation (so no OpenMP or ATen thread pool exists when it forks), and forks one
child per command. The child takes the command's environment, working directory, `sys.argv`, `sys.path` and
standard streams, runs the module as `__main__` with `runpy`, waits for its non-daemon threads, runs the
`atexit` handlers and exits with the status a fresh interpreter would have given (a `SystemExit` code, 1 and a
traceback for an uncaught exception, minus the signal number when a signal ends it). The one difference in
what it prints: the traceback of an uncaught exception under `-m` lacks the two `<frozen runpy>` lines a
fresh interpreter puts above the module's frames.

What a fork cannot give is a fresh import: a variable that torch, transformers or the trainer read while they
were imported keeps the value the fork server saw. So `run` falls back to a real subprocess when the command
is not `sys.executable` with `-m` or a script, when its environment differs from the server's in a variable
read at import (`IMPORT_TIME_PREFIXES`, less the `RUN_TIME_ONLY` ones libraries set while tests run), or when
its PYTHONPATH holds another copy of a preloaded package; `WARM_PYTHON_LOG=FILE` in pytest's environment
records each command's choice and its reason.
Tests whose subject is a fresh interpreter (which modules a command imports, thread pools, kernel pins, disk
caches, hash seeds) keep `subprocess.run`.

tests/conftest.py imports this module first thing, so `BASE_ENV` is the session's starting environment.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import multiprocessing
import os
import resource
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from multiprocessing import forkserver
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

#: Imported once by the fork server: what every trainer process and benchmark script loads first.
PRELOAD = (
    "torch",
    "transformers",
    "transformers.modeling_utils",
    "areal_adv.trainer.main",
    "areal_adv.trainer.run.loop",
)

#: Variables read while the preloaded modules import (thread and kernel settings, hub and logging set-up,
#: warnings, hashing, the module search path): a command that sets them otherwise gets a fresh interpreter.
IMPORT_TIME_PREFIXES = (
    "PYTHON",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "ATEN_",
    "TORCH",
    "PYTORCH_",
    "NUMBA_",
    "HF_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "CUDA_",
    "AREAL",
    "LD_",
)

#: The test process's environment when this module is first imported (at collection, before a test changes it):
#: the fork server starts with it, whichever test starts the server, and a command forks only where its
#: import-time variables equal these.
BASE_ENV = dict(os.environ)
_CONTEXT: Any = None
_SERVER_ENV: dict[str, str] = {}
_SITE_PATH: list[str] = []
_FORKED_CPU = [0.0]  # CPU-seconds of the forks this process has collected (`forked_cpu_seconds`)
_SERVER_THREADS: str | None = None


def _context() -> Any:
    """The forkserver context, its server started with the modules of PRELOAD (once per test process)."""
    global _CONTEXT, _SERVER_ENV, _SITE_PATH, _SERVER_THREADS
    if _CONTEXT is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        current = dict(os.environ)
        os.environ.clear()
        os.environ.update(BASE_ENV)  # the server inherits the environment the session started with
        try:
            forkserver.ensure_running()
            _SITE_PATH = _fresh_site_path()
        finally:
            os.environ.clear()
            os.environ.update(current)
        _SERVER_THREADS = BASE_ENV.get("OMP_NUM_THREADS")
        _SERVER_ENV = _import_time_env(BASE_ENV)
        _CONTEXT = ctx
    return _CONTEXT


def _fresh_site_path() -> list[str]:
    """A fresh interpreter's `sys.path` after its first entry: stdlib, site-packages and their .pth entries."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import json, sys; print(json.dumps(sys.path[1:]))"
    out = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


#: Compared otherwise: PYTHONPATH (`_shadowed`) and OMP_NUM_THREADS (`_threads`).
_READ_IN_THE_CHILD = ("PYTHONPATH", "OMP_NUM_THREADS")

#: Variables under IMPORT_TIME_PREFIXES that libraries write into the test process's own environment while
#: tests run, and that nothing reads at import: a command built from `os.environ` after that would otherwise
#: never fork again in that process. torch's inductor stores its default cache folder in
#: TORCHINDUCTOR_CACHE_DIR the first time it compiles and reads it only when it compiles; verl's Megatron
#: engine module sets TORCH_CUDA_ARCH_LIST while it imports on a machine without CUDA (and leaves it set when
#: that import fails), which torch reads only when it builds a C++ extension; `ray.init` points
#: PYTHONBREAKPOINT at its remote debugger, which Python reads at each `breakpoint()` call. The child still
#: gets them in its `os.environ`, where those reads happen.
RUN_TIME_ONLY = ("TORCHINDUCTOR_CACHE_DIR", "TORCH_CUDA_ARCH_LIST", "PYTHONBREAKPOINT")

#: A file to which `start` appends one JSON line per command: forked, or the reason it was not (set it in the
#: environment pytest starts with to see which commands of a run paid for a fresh interpreter).
LOG_ENV = "WARM_PYTHON_LOG"


def _import_time_env(env: Any) -> dict[str, str]:
    skip = (*_READ_IN_THE_CHILD, *RUN_TIME_ONLY)
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES) and k not in skip}


def _threads(env: dict[str, str]) -> tuple[bool, int | None]:
    """(can fork, torch thread count the child sets) for the command's OMP_NUM_THREADS.

    torch fixes its thread count from OMP_NUM_THREADS while it loads, so a child whose command sets another
    value than the server saw calls `torch.set_num_threads` with it first (what that value gives a fresh
    interpreter's torch); a command that unsets the server's value, or sets no positive integer, is not forked.
    """
    mine, server = env.get("OMP_NUM_THREADS"), _SERVER_THREADS
    if mine == server:
        return True, None
    if mine is None or not mine.isdigit() or int(mine) < 1:
        return False, None
    return True, int(mine)


def _package_folders() -> dict[str, Path | None]:
    """The folder each preloaded top-level package imports from in this process, as the fork server's did."""
    out: dict[str, Path | None] = {}
    for name in {module.split(".")[0] for module in PRELOAD}:
        spec = importlib.util.find_spec(name)
        out[name] = Path(spec.origin).resolve().parent if spec and spec.origin else None
    return out


#: Where the session imports each preloaded package from, read once at the start (a test may later put another
#: folder first on `sys.path` or swap a module in `sys.modules`; the fork server imported from these).
_LOADED = _package_folders()


def _shadowed(env: dict[str, str], cwd: str) -> bool:
    """True when the command's PYTHONPATH holds another copy of a preloaded package than the one loaded."""
    for name, loaded in _LOADED.items():
        for entry in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):
            found = Path(cwd, entry, name)
            if (found.is_dir() or found.with_suffix(".py").is_file()) and found.resolve() != loaded:
                return True
    return False


def _entry(cmd: list[str]) -> tuple[str, str] | None:
    """("module", name) or ("path", script) for `sys.executable -m NAME ...` / `sys.executable SCRIPT ...`."""
    if len(cmd) < 2 or os.path.realpath(cmd[0]) != os.path.realpath(sys.executable):
        return None
    if cmd[1] == "-m" and len(cmd) > 2:
        return ("module", cmd[2])
    if not cmd[1].startswith("-") and cmd[1].endswith(".py"):
        return ("path", cmd[1])
    return None


def _child_path(entry: tuple[str, str], cwd: str, env: dict[str, str], base: list[str]) -> list[str]:
    """`sys.path` as a fresh `python -m` / `python SCRIPT` would build it: entry dir, PYTHONPATH, then site."""
    first = cwd if entry[0] == "module" else str(Path(cwd, entry[1]).resolve().parent)
    extra = [str(Path(cwd, p)) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *base]


def _status(code: object) -> int:
    """The exit status Python gives `raise SystemExit(code)`, printing a non-integer code as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(
    entry: tuple[str, str],
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    paths: tuple[list[str], str, str],
    process: tuple[bool, int | None],
) -> None:
    """Runs in the forked child: become the command, run it, and leave by `os._exit` with its status."""
    new_session, threads = process
    if new_session:
        os.setsid()
    if threads is not None:
        import torch  # preloaded

        torch.set_num_threads(threads)
    site, out, err = paths
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = _child_path(entry, cwd, env, site)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if entry[0] == "module":
            sys.argv = ["-m", *argv]  # runpy puts the module's file in argv[0], as `python -m` does
            sys.modules.pop(entry[1], None)  # a fresh `python -m` has not imported its module under its name
            runpy.run_module(entry[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = [entry[1], *argv]
            runpy.run_path(entry[1], run_name="__main__")
        status = 0
    except SystemExit as exc:
        status = _status(exc.code)
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception: the traceback and status 1, as Python gives
        traceback.print_exception(type(exc), exc, _own_frames(exc.__traceback__))
        status = 1
    status = _shutdown(status)
    _write_cpu_seconds(os.path.join(os.path.dirname(out), "cpu"))
    os._exit(status)


def cpu_seconds() -> tuple[float, float]:
    """(this process, the children it has waited for): user + system CPU-seconds."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def _write_cpu_seconds(path: str) -> None:
    """The fork's CPU time and that of the processes it waited for (its parent, the fork server, cannot ask)."""
    try:
        with open(path, "w") as f:
            f.write(repr(sum(cpu_seconds())))
    except OSError:
        pass  # the command's status matters more than this count


def _own_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback from the command's first frame: without this file's and runpy's (a fresh `python -m`
    shows two `<frozen runpy>` lines above the module's frames; these are left out too)."""
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>"):
        tb = tb.tb_next
    return tb


def _shutdown(status: int) -> int:
    """Interpreter exit as Python does it: join non-daemon threads, run atexit handlers, flush the streams."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # Python's status when flushing standard output fails at exit
    return status


class WarmProcess:
    """A `subprocess.Popen`-like handle on a forked command: `pid`, `poll`, `wait`, `communicate` (text)."""

    def __init__(self, cmd: list[str], process: Any, tmp: tempfile.TemporaryDirectory, streams: tuple[str, str]):
        self.args, self.pid, self.returncode = cmd, process.pid, None
        self._process, self._tmp, self._streams = process, tmp, streams

    def poll(self) -> int | None:
        if self.returncode is None and self._process.exitcode is not None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode  # type: ignore[return-value]

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Waits (a `subprocess.TimeoutExpired` leaves the command running, as Popen's does), then its output."""
        self.wait(timeout)
        out, err = (Path(p).read_text(errors="replace") for p in self._streams)
        cpu = Path(self._tmp.name, "cpu")
        _FORKED_CPU[0] += float(cpu.read_text()) if cpu.is_file() else 0.0  # none when it was killed
        self._tmp.cleanup()
        return out, err


def forked_cpu_seconds() -> float:
    """CPU-seconds spent by the commands this process forked and collected (tests/cpu_profile.py)."""
    return _FORKED_CPU[0]


def _why_not_forked(entry: tuple[str, str] | None, env: dict[str, str], cwd: str) -> str | None:
    """None when the command can be forked warm; else what a fork would get wrong."""
    if entry is None:
        return "not `python -m MODULE` or `python SCRIPT` with this interpreter"
    if not _threads(env)[0]:
        return f"OMP_NUM_THREADS={env.get('OMP_NUM_THREADS')!r}, the fork server's {_SERVER_THREADS!r}"
    mine = _import_time_env(env)
    differ = sorted(k for k in {*mine, *_SERVER_ENV} if mine.get(k) != _SERVER_ENV.get(k))
    if differ:
        return "variables read at import differ from the fork server's: " + ", ".join(differ)
    if _shadowed(env, cwd):
        return f"PYTHONPATH={env.get('PYTHONPATH')!r} holds another copy of a preloaded package"
    return None


def append_json_line(path: str, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def _log(cmd: list[str], why: str | None) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        append_json_line(path, {"cmd": cmd[:4], "forked": why is None, "why": why})


def start(
    cmd: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None, new_session: bool = False
) -> WarmProcess | subprocess.Popen:
    """`subprocess.Popen(cmd, stdout=PIPE, stderr=PIPE, text=True, ...)`, forked warm where it can be.

    `new_session` as Popen's `start_new_session` (the child leads a process group of its own id). Falls back to
    a real `subprocess.Popen` where a fork could not be the same (module docstring).
    """
    env = dict(os.environ if env is None else env)
    cwd = str(cwd if cwd is not None else os.getcwd())
    entry = _entry(cmd)
    ctx = _context() if entry is not None else None
    threads = _threads(env)[1]
    why = _why_not_forked(entry, env, cwd)
    _log(cmd, why)
    if entry is None or why is not None:
        pipe = subprocess.PIPE
        return subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=True, start_new_session=new_session
        )
    argv = cmd[3:] if entry[0] == "module" else cmd[2:]
    tmp = tempfile.TemporaryDirectory(prefix="warm-")
    streams = (os.path.join(tmp.name, "stdout"), os.path.join(tmp.name, "stderr"))
    for path in streams:
        Path(path).touch()
    process = ctx.Process(target=_child, args=(entry, argv, env, cwd, (_SITE_PATH, *streams), (new_session, threads)))
    process.start()
    return WarmProcess(cmd, process, tmp, streams)


def run(
    cmd: list[str],
    *,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """`subprocess.run(cmd, cwd=..., env=..., capture_output=True, text=True, timeout=...)`, forked warm.

    Same result type and the same `subprocess.TimeoutExpired` on a timeout (the child and its descendants
    killed first).
    """
    proc = start(cmd, cwd=cwd, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout or 0.0, output=out, stderr=err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode if proc.returncode is not None else 1, out, err)


def descendants(pid: int) -> list[psutil.Process]:
    """Every live descendant of `pid` (none when `pid` is gone)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def kill_and_wait(targets: list[psutil.Process]) -> None:
    """SIGKILL each of `targets` still alive, and return once they are gone (a signal lands asynchronously)."""
    for target in targets:
        try:
            target.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(targets, timeout=10)


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every live descendant (a command's own subprocesses)."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    kill_and_wait([*descendants(pid), root])
