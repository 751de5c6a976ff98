"""Text helpers for names and error messages: the name rules, closest names, quoted
lists, a name with its article, and one wording for pydantic's validation errors."""

from __future__ import annotations

import difflib
import re
import reprlib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
"""Component names: lower-case letters, digits and dashes (``sliding-window``)."""
QUALIFIED_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*:[a-z0-9][a-z0-9-]*$")
"""A component's qualified name, ``plugin:name`` (``cosine:geglu``): the plugin's
entry-point name, then the component's."""
RECIPE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
"""Recipe names: also dots and underscores (``vit-small-patch16-224``)."""


DISTRIBUTION_RE = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")
"""A package (distribution) name, as PEP 508 allows it: what ``pip install`` takes."""


def is_git_ref(name: str) -> bool:
    """True for a revision that is safe to hand to git and to the Hub cache: a branch, tag
    or commit name as ``git check-ref-format`` allows it (no ``..``, no leading or trailing
    ``/``, no control characters, no ``~^:?*[\\`` or spaces, no ``@{``)."""
    if not name or len(name) > 255 or name == "@" or ".." in name or "@{" in name:
        return False
    if name.startswith("/") or name.endswith(("/", ".", ".lock")) or "//" in name:
        return False
    if any(ord(c) < 0x20 or ord(c) == 0x7F or c in " ~^:?*[\\" for c in name):
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple = 3, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 80, 80, 40


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut short: a bad value in an error is quoted in at most ``limit``
    characters, however large (or self-repeating) it is."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LETTERS_SAID_WITH_AN = "AEFHILMNORSX"
"""Capitals whose name starts with a vowel sound: an ``LSTM``, an ``MLP``, an ``SVD``."""
_VOWEL_SOUND_EXCEPTIONS = ("uni", "use", "usa", "uti", "eu", "one")
"""Words that start with a vowel letter said as a consonant: a ``UniGram``, a ``user``."""


def with_article(word: str) -> str:
    """``word`` after "a" or "an", as it is said: ``'an Encoder'``, ``'a BertModel'``,
    ``'an int'``, ``'a list'``; a word that opens with two capitals is read letter by
    letter (``'an MLP'``, ``'a GPT2Model'``). Every "a {name}" zoo builds from a class or
    type name goes through it."""
    lower = word.lower()
    if len(word) > 1 and word[:2].isupper() and word[:2].isalpha():
        an = word[0] in _LETTERS_SAID_WITH_AN
    else:
        an = lower[:1] in ("a", "e", "i", "o", "u") and not lower.startswith(
            _VOWEL_SOUND_EXCEPTIONS)
    return f"{'an' if an else 'a'} {word}"


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``vit-2`` before ``vit-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


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


def describe_validation_error(exc: ValidationError, where: str, model: type[BaseModel]) -> str:
    """One readable message for a pydantic error, listing valid keys for unknown ones."""
    lines = []
    valid = list(model.model_fields)
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1])
            lines.append(
                f"unknown key {key!r}.{did_you_mean(key, valid)} Valid keys: {quoted(valid)}"
            )
        elif err["type"] == "missing":
            lines.append(f"missing required key {loc!r}")
        else:
            got = err.get("input")
            note = (" (a bool is never a number: write the number)"
                    if isinstance(got, bool) and err["type"] in ("int_type", "float_type")
                    else " (a number in quotes is text: write it without quotes)"
                    if isinstance(got, str) and err["type"] in ("int_type", "float_type")
                    else " (an integer is written without a decimal point)"
                    if isinstance(got, float) and err["type"] == "int_type"
                    else "")
            lines.append(f"{loc or 'value'}: {err['msg']} (got {short_repr(got)}){note}")
    return f"Invalid {where}: " + "; ".join(lines)


_REFUSED_COERCIONS = ("int_type", "float_type", "bool_type")
"""What strict validation refuses and zoo refuses too: a bool as a number, a number as a
bool, a quoted number as a number, a float as an integer."""


def validate_plain(model: type[BaseModel], data: Any) -> BaseModel:
    """``model`` from plain data (a recipe's, a config's), with pydantic's defaults less
    four coercions: a bool is never a number and a number never a bool, a quoted number
    is text (``"512"`` is no size), and an integer is written as one (``512``, not
    ``512.0``). A list still fills a tuple. Data that is not plain JSON (a Python
    caller's objects) is validated as pydantic does by default."""
    import json

    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError):
        return model.model_validate(data)
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as strict:
        result = model.model_validate(data)  # wrong data is wrong here too, and says so
        refused = [{"type": e["type"], "loc": e["loc"], "input": e["input"]}
                   for e in strict.errors() if e["type"] in _REFUSED_COERCIONS]
        if refused:
            raise ValidationError.from_exception_data(model.__name__, refused) from None
        return result  # strict refused only what JSON cannot say (a tuple, say)


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError
