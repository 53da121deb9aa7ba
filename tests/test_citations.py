"""The package cites only what a reader can open: docs pages and papers, never internal files or issue numbers.

`advantage.md` (a design file outside the repository), "issue N" and "the seed's" mean
nothing to a user; the docs are cited by page title and section, papers by arXiv id.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNOPENABLE = re.compile(r"advantage\.md|\b[Ii]ssues? #?[0-9]|\bthe seed's\b|\bthe spec's\b")


def test_areal_cites_nothing_a_reader_cannot_open():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "areal_adv").rglob("*"))
        if path.suffix in (".py", ".yaml", ".md", ".txt")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNOPENABLE.search(line)
    ]
    assert not found, "citations a reader cannot open:\n" + "\n".join(found)


#: What a user reads: no design document outside the repository stands behind these words.
USER_PAGES = ("README.md", "CHANGELOG.md", "docs/*.md")
#: (other projects' issues, "TRL issues #4525", are public pages and may be cited there)
UNOPENABLE_IN_PAGES = re.compile(r"(?<!custom-)advantage\.md|\b[Ss]pecification\b|\bthe spec('s)?\b|\bthe seed's\b")


def test_readme_docs_and_changelog_cite_nothing_a_reader_cannot_open():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for pattern in USER_PAGES
        for path in sorted(ROOT.glob(pattern))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNOPENABLE_IN_PAGES.search(line)
    ]
    assert not found, "words naming a document a reader cannot open:\n" + "\n".join(found)


def test_the_pattern_catches_each_kind():
    for text in ("see advantage.md §4", "issue 21", "Issues 20", "the seed's path", "the spec's import path"):
        assert UNOPENABLE.search(text), text
    assert not UNOPENABLE.search("docs: *Custom advantage computation*, *The default pipeline*")
    for text in ("the first YAML of the specification", "the spec says"):
        assert UNOPENABLE_IN_PAGES.search(text), text
