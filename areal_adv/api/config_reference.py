"""The config reference: every field of the experiment config with its type, default and help.

Each field's help is written once, as `metadata={"help": ...}` on the dataclass
field. docs/configuration.md's tables are generated from it:
`python -m areal_adv.api.config_reference --write` rewrites the generated block, and
`--check` (run by tests/test_config_help.py) fails when the committed block differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from areal_adv.api.train_args import ExperimentConfig

__all__ = [
    "BEGIN",
    "END",
    "FieldDoc",
    "SectionDoc",
    "config_sections",
    "fields_without_help",
    "main",
    "render_reference",
    "replace_reference",
]

BEGIN = "<!-- BEGIN generated config reference: python -m areal_adv.api.config_reference --write -->"
END = "<!-- END generated config reference -->"
DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


@dataclass(frozen=True)
class FieldDoc:
    """One field of a section: its name, annotation, default (as YAML reads it) and help."""

    name: str
    type: str
    default: str
    help: str | None


@dataclass(frozen=True)
class SectionDoc:
    """One config dataclass and the dotted keys it sits at (`""` for the top level)."""

    cls: type
    paths: tuple[str, ...]
    fields: tuple[FieldDoc, ...]


def _nested_dataclasses(annotation: Any) -> list[tuple[type, bool]]:
    """The dataclasses inside a field's type, each with whether it sits in a list."""
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return [(annotation, False)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (list, tuple):
        return [(cls, True) for arg in args for cls, _ in _nested_dataclasses(arg)]
    if origin in (typing.Union, types.UnionType):
        return [found for arg in args for found in _nested_dataclasses(arg)]
    return []


def _yaml(value: Any) -> str:
    """A default as a YAML flow value: null, true, 1e-05, [jsonl, tensorboard], {implementation: default}."""
    if value is None:
        return "null"
    if value == "":
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _yaml(dataclasses.asdict(value))
    return str(value)


def _default(f: dataclasses.Field, nested: list[tuple[type, bool]]) -> str:
    if f.default is not dataclasses.MISSING:
        return _yaml(f.default)
    if f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default_factory()
    if nested and type(value) is nested[0][0] and value == nested[0][0]():
        return "(section)"
    return _yaml(value)


def config_sections(root: type = ExperimentConfig) -> list[SectionDoc]:
    """Every config dataclass reachable from `root`, depth first in field order, with its keys and fields.

    A dataclass reached at several keys (`NormConfig` at `actor.reward_norm` and
    `actor.adv_norm`) is one section listing every key.
    """
    paths: dict[type, list[str]] = {}
    docs: dict[type, tuple[FieldDoc, ...]] = {}

    def visit(cls: type, path: str) -> None:
        paths.setdefault(cls, []).append(path)
        if cls in docs:
            return
        hints = typing.get_type_hints(cls)
        fields, children = [], []
        for f in dataclasses.fields(cls):
            nested = _nested_dataclasses(hints[f.name])
            key = f"{path}.{f.name}" if path else f.name
            children += [(child, f"{key}[]" if in_list else key) for child, in_list in nested]
            fields.append(FieldDoc(f.name, str(f.type), _default(f, nested), f.metadata.get("help")))
        docs[cls] = tuple(fields)
        for child, key in children:
            visit(child, key)

    visit(root, "")
    return [SectionDoc(cls, tuple(keys), docs[cls]) for cls, keys in paths.items()]


def _help_problem(text: str | None) -> str | None:
    """Why a help text is not a sentence a user can act on, or None when it is."""
    if not isinstance(text, str) or not text.strip():
        return "no help"
    if not text.rstrip().endswith("."):
        return "help does not end with a period"
    if len(text.split()) < 4:
        return "help shorter than a sentence (4 words)"
    return None


def fields_without_help(root: type = ExperimentConfig) -> list[str]:
    """`key: problem` for every field of every section under `root` whose help is missing or not a sentence."""
    found = []
    for section in config_sections(root):
        where = section.paths[0]
        for f in section.fields:
            problem = _help_problem(f.help)
            if problem is not None:
                key = f"{where}.{f.name}" if where else f.name
                found.append(f"{key} ({section.cls.__name__}.{f.name}): {problem}")
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _heading(section: SectionDoc) -> str:
    if section.paths == ("",):
        return f"### Top level (`{section.cls.__name__}`)"
    keys = ", ".join(f"`{p}`" for p in section.paths)
    return f"### {keys} (`{section.cls.__name__}`)"


def _summary(cls: type) -> str:
    """The class docstring without its indentation, paragraphs kept: what the section is for."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    return "\n\n".join(" ".join(par.split()) for par in doc.split("\n\n") if par.strip())


def render_reference(root: type = ExperimentConfig) -> str:
    """The generated block of docs/configuration.md: one table per section, markers included."""
    lines = [BEGIN, ""]
    for section in config_sections(root):
        lines += [
            _heading(section),
            "",
            _summary(section.cls),
            "",
            "| key | type | default | help |",
            "| --- | --- | --- | --- |",
        ]
        for f in section.fields:
            default = f.default if f.default == "(section)" else f"`{_cell(f.default)}`"
            lines.append(f"| `{f.name}` | `{_cell(f.type)}` | {default} | {_cell(f.help or '')} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def replace_reference(page: str, block: str) -> str:
    """`page` with the text between its BEGIN and END markers (both included) replaced by `block`."""
    start, stop = page.find(BEGIN), page.find(END)
    if start < 0 or stop < start:
        raise ValueError(f"config reference: the page has no {BEGIN!r} ... {END!r} block")
    return page[:start] + block + page[stop + len(END) :]


def main(argv: list[str] | None = None) -> int:
    """`--write` regenerates the block in docs/configuration.md; `--check` exits 1 when it is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the generated block of the page")
    parser.add_argument("--page", type=Path, default=DOCS_PAGE, help="the Markdown page (docs/configuration.md)")
    args = parser.parse_args(argv)
    page = args.page.read_text(encoding="utf-8")
    updated = replace_reference(page, render_reference())
    if args.write:
        args.page.write_text(updated, encoding="utf-8")
        return 0
    if updated != page:
        print(f"{args.page}: the config reference is stale; run python -m areal_adv.api.config_reference --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
