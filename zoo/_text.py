"""Small helpers for error messages: closest names, quoted lists."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The up-to-``n`` choices that look most like ``name`` (difflib)."""
    return difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)


def quoted(names: Iterable[str]) -> str:
    """``'a', 'b', 'c'`` or ``(none)``."""
    names = list(names)
    return ", ".join(repr(n) for n in names) if names else "(none)"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` or the empty string."""
    near = closest(name, choices)
    return f" Did you mean {quoted(near)}?" if near else ""
