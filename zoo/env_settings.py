"""The environment variables zoo reads that hold numbers, each parsed in this one place
by its own rule (a range, finite), so that a value outside it is one
:class:`~zoo.errors.SettingError` naming the variable, the value and what it takes, never
a ``ValueError`` of ``float()``, an ``OverflowError``, or a wait without end. Unset or
empty: the default."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .errors import SettingError

WEEK = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Setting:
    """One environment variable: its default, its range, and what it changes."""

    name: str
    default: float
    least: float
    most: float
    whole: bool
    what: str

    def parse(self, text: str) -> float | int:
        """``text`` as this setting's value, or one SettingError saying what it takes."""
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if (not math.isfinite(value) or not self.least <= value <= self.most
                or (self.whole and value != int(value))):
            kind = "a whole number" if self.whole else "a number"
            raise SettingError(f"{self.name}={text!r}: {self.what}, {kind} from "
                               f"{self.least:g} to {self.most:g} (unset: {self.default:g})")
        return int(value) if self.whole else value


SETTINGS = {s.name: s for s in (
    Setting("ZOO_NATIVE_BUILD_TIMEOUT", 900.0, 1.0, WEEK, False,
            "seconds a native build (or a wait for another process's) may take"),
    Setting("ZOO_HUB_RETRIES", 3, 0, 100, True,
            "times a transient Hub failure is retried"),
    Setting("ZOO_HUB_RETRY_WAIT", 1.0, 0.0, 3600.0, False,
            "seconds before the first retry of the Hub, doubling after each"),
    Setting("ZOO_DIST_TIMEOUT", 300.0, 1.0, WEEK, False,
            "seconds a training process waits for the others before it gives up"),
    Setting("ZOO_NONFINITE_WEIGHTS", 0, 0, 1, True,
            "1 loads weights that hold NaN or infinite values (with a warning), 0 refuses "
            "them"),
)}
"""zoo's numeric environment variables, by name."""


def setting(name: str) -> float | int:
    """The value of environment variable ``name`` (one of :data:`SETTINGS`) as zoo reads
    it: its default where unset or empty, else parsed by its rule."""
    rule = SETTINGS[name]
    text = os.environ.get(name, "").strip()
    return rule.parse(text) if text else (int(rule.default) if rule.whole else rule.default)
