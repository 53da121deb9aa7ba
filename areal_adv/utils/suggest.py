"""'Did you mean ...?' for a mistyped name: the nearest known names by difflib's similarity ratio.

Our own, so the suggestion does not depend on the installed OmegaConf (2.4
adds one to its messages, 2.3 does not). Imports nothing from areal_adv.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: difflib's default: a pair sharing less than 60 % of its characters is not suggested.
CUTOFF = 0.6


def close_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Up to `n` of `candidates` nearest to `name`, best first (none below `CUTOFF`)."""
    return difflib.get_close_matches(str(name), sorted({str(c) for c in candidates}), n=n, cutoff=CUTOFF)


def did_you_mean(names: str | Iterable[str], candidates: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for one unknown name, "; did you mean 'x' for 'y'?" for several; "" if none is close."""
    candidates = list(candidates)
    if isinstance(names, str):
        close = close_names(names, candidates)
        return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    pairs = [(name, close_names(name, candidates, n=1)) for name in names]
    found = [f"{close[0]!r} for {name!r}" for name, close in pairs if close]
    return f"; did you mean {', '.join(found)}?" if found else ""
