"""A chat template's rendering, bounded in time.

Jinja's sandbox keeps a template from touching anything but its data, not from running
for ever: each ``range`` is at most 100,000 long, yet three nested ones run 10^15 turns,
a ``namespace`` counter does the same, and ``9 ** (messages|length * 10**9)`` is one
big-number power Python cannot interrupt. zoo renders a folder's template (through
transformers' ``apply_chat_template``) under a deadline that every line of Python the
rendering runs is checked against (:func:`bounded`), and refuses before rendering a
template that raises to a power it computes (:func:`check_template`), the one Jinja
operation long enough to matter that runs no line of Python.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from ..errors import RecipeError

SECONDS = 5.0
"""How long a chat template may render one conversation; real ones take milliseconds."""

SMALL_POWER = 64
"""The largest literal exponent a template may use (``2 ** 10`` is a template's business)."""


class TemplateTimeout(RecipeError):
    """A chat template still rendering at its deadline."""


@contextmanager
def bounded(seconds: float | None = None, what: str = "the model's chat template"
            ) -> Iterator[None]:
    """Runs the block with a deadline ``seconds`` (:data:`SECONDS`) away on this thread:
    past it, the next line of Python the block runs raises :class:`TemplateTimeout`. The
    thread's own tracer (a debugger, coverage) is put back after."""
    seconds = SECONDS if seconds is None else seconds
    deadline = time.monotonic() + seconds
    before = sys.gettrace()
    counted = [0]

    def line(frame, event, arg):  # noqa: ARG001 - the tracer's signature
        counted[0] += 1
        if counted[0] % 1024 == 0 and time.monotonic() > deadline:
            raise TemplateTimeout(f"{what} ran past {seconds:g} s rendering these messages "
                                  "and was stopped: a template that loops without end is "
                                  "refused; fix the template (chat_template.jinja, or "
                                  "tokenizer_config.json's chat_template)")
        return line

    sys.settrace(line)
    try:
        yield
    finally:
        sys.settrace(before)


def check_template(tokenizer: Any) -> None:
    """One RecipeError where ``tokenizer``'s chat template (each, where it holds several)
    raises to a power that is not a literal of at most :data:`SMALL_POWER`: such a power
    can run for hours inside one operation, where no deadline reaches it."""
    templates = tokenizer.chat_template
    for source in templates.values() if isinstance(templates, dict) else [templates]:
        line = computed_power(source) if isinstance(source, str) else None
        if line is not None:
            raise RecipeError(
                f"the model's chat template raises to a power it computes (line {line}): "
                "such a power can run for hours, so zoo refuses the template; an exponent "
                f"in a chat template is a number of at most {SMALL_POWER}")


@lru_cache(maxsize=64)
def computed_power(source: str) -> int | None:
    """The line of the first power in the Jinja ``source`` whose exponent is not a
    literal of at most :data:`SMALL_POWER`; None where there is none (or the source does
    not parse: rendering gives the template's own error)."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        tree = ImmutableSandboxedEnvironment().parse(source)
    except TemplateSyntaxError:
        return None
    for power in tree.find_all(nodes.Pow):
        exponent = power.right
        if not (isinstance(exponent, nodes.Const) and isinstance(exponent.value, int)
                and abs(exponent.value) <= SMALL_POWER):
            return power.lineno
    return None
