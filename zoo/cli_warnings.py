"""How the command line shows a warning: one line on standard error, once, naming zoo
or the library that warned, not Python's file path and source line.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
import warnings
from collections.abc import Iterator
from typing import Any


def _warned_by(frame: Any) -> str | None:
    """The package whose code called ``warnings.warn`` (``zoo`` for its built-in plugins
    too), from the frame that shows the warning: the first frame outside the warnings
    module. None where that frame's line calls no warning: C code warned (torch's C++
    does) below it, and which library's is not known."""
    while frame is not None and frame.f_globals.get("__name__") == "warnings":
        frame = frame.f_back
    if frame is None or "warn" not in linecache.getline(frame.f_code.co_filename,
                                                        frame.f_lineno):
        return None
    return str(frame.f_globals.get("__name__", "")).split(".")[0]


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Within, each warning prints as one line on standard error, once however often it
    comes: zoo's as ``zoo: warning: MESSAGE``, another library's naming its category and,
    where known, the library (``zoo: warning: FutureWarning from transformers: ...``).
    Only the wording changes (``warnings.formatwarning``, restored after): Python's
    filters still decide which warnings show, and a caller recording them
    (``warnings.catch_warnings(record=True)``, ``pytest.warns``) still gets them. The
    command line runs within it (:func:`main`); a Python caller of zoo keeps Python's
    own wording."""
    shown: set[tuple[type, str]] = set()

    def one_line(message, category, filename, lineno, line=None) -> str:
        text = " ".join(str(message).split())
        if (category, text) in shown:
            return ""  # written as nothing
        shown.add((category, text))
        package = _warned_by(sys._getframe(1))
        origin = ("" if package == "zoo" else f"{category.__name__}: " if package is None
                  else f"{category.__name__} from {package}: ")
        return f"zoo: warning: {origin}{text}\n"

    before, warnings.formatwarning = warnings.formatwarning, one_line
    try:
        yield
    finally:
        warnings.formatwarning = before
