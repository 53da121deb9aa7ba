"""`torchrun` whose ranks are forks of the launcher, which has torch, transformers and the trainer imported.

`python warm_torchrun.py ARGS` takes torchrun's arguments and runs torchrun's own code
(`torch.distributed.run.main`: the argument parser, `config_from_args`, the elastic agent with its rendezvous,
rank environment, restarts and failure summary). One thing differs: torchrun starts each rank as a new
interpreter (`python -u -m MODULE ARGS`), which spends 5-8 CPU-seconds importing torch and transformers;
here the agent starts it as a function entry point with the "fork" start method torch's launcher offers for
those, and the forked rank runs the module or script as `__main__` with runpy, its standard streams
unbuffered as `-u` makes them. The launcher imports what the ranks import before it forks them; started by
`warm_python`, it is itself a fork of an interpreter that has them already.

For the tests whose subject is what the ranks compute (DDP/FSDP2 equality, resume, tasks on two ranks);
tests of the launcher itself (failures, restarts, two nodes) run the real `torchrun`.
"""

from __future__ import annotations

import importlib
import io
import os
import runpy
import sys
from typing import Any

import torch.distributed.run as torch_run
from torch.distributed.launcher.api import elastic_launch

#: What a trainer rank imports first: loaded once here, shared by every forked rank.
PRELOAD = ("torch", "transformers.modeling_utils", "areal_adv.trainer.main", "areal_adv.trainer.run.loop")


def _unbuffered() -> None:
    """Standard output and error written through at once, as `python -u` gives a rank."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True))


def rank_main(kind: str, target: str, *argv: str) -> None:
    """One rank: the module (`kind` "module") or script ("path") run as `__main__` with `argv`."""
    _unbuffered()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))  # what a fresh rank's torch takes from the variable as it loads
    try:
        if kind == "module":
            sys.argv = ["-m", *argv]
            sys.modules.pop(target, None)  # as in a fresh `python -m`, the module is not imported under its name
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *argv]
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise  # the rank's exit status, as the interpreter would have ended with it


class _ForkingLaunch:
    """Stands in for `elastic_launch(config, entrypoint)`: a Python command becomes a forked function entry point."""

    def __init__(self, config: Any, entrypoint: Any):
        self.config, self.entrypoint = config, entrypoint

    def __call__(self, *cmd_args: str) -> Any:
        args = list(cmd_args)
        if self.entrypoint != sys.executable or args[:1] != ["-u"] or any("${" in a for a in args):
            return elastic_launch(self.config, self.entrypoint)(*args)  # not a plain Python command: as torchrun
        args = args[1:]
        kind, target, argv = ("module", args[1], args[2:]) if args[0] == "-m" else ("path", args[0], args[1:])
        self.config.start_method = "fork"
        return elastic_launch(self.config, rank_main)(kind, target, *argv)


def main(argv: list[str] | None = None) -> None:
    for module in PRELOAD:
        importlib.import_module(module)
    torch_run.elastic_launch = _ForkingLaunch  # type: ignore[assignment,misc]
    torch_run.main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
