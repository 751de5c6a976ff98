"""The former module of generation settings: ``zoo.generation`` is now :mod:`zoo.decoding`.

Plugins of the first releases imported ``GenerationSettings`` and decoded with
``generate_with``, ``greedy_with`` and ``beam_with`` from here. Each still works, with a
``DeprecationWarning`` naming what replaced it and the release that removes this module
(:data:`zoo.deprecations.DEPRECATIONS`): the settings are
:class:`zoo.decoding.GenerationSettings`, and every decoding is ``zoo.generate(model, src,
settings, **changes)``.
"""

from __future__ import annotations

from typing import Any

from . import decoding
from .deprecations import warn_deprecated

__all__ = ["GenerationSettings", "generate_with", "greedy_with", "beam_with"]


def _said(name: str, now: str) -> None:
    warn_deprecated("zoo.generation", f"zoo.generation.{name} is now {now}", stacklevel=3)


def generate_with(model, src, settings, **changes: Any):
    """Deprecated: ``zoo.generate(model, src, settings, **changes)``."""
    _said("generate_with", "zoo.generate(model, src, settings, **changes)")
    return decoding.generate(model, src, settings, **changes)


def greedy_with(model, src, settings):
    """Deprecated: ``zoo.generate(model, src, settings, num_beams=1, do_sample=False)``."""
    _said("greedy_with", "zoo.generate(model, src, settings, num_beams=1)")
    return decoding.generate(model, src, settings, num_beams=1, do_sample=False)


def beam_with(model, src, settings):
    """Deprecated: ``zoo.generate(model, src, settings)`` with ``num_beams`` > 1."""
    _said("beam_with", "zoo.generate(model, src, settings)")
    return decoding.generate(model, src, settings)


def __getattr__(name: str) -> Any:
    if name == "GenerationSettings":
        _said("GenerationSettings", "zoo.decoding.GenerationSettings (also in "
              "zoo.plugin_api)")
        return decoding.GenerationSettings
    raise AttributeError(f"module 'zoo.generation' (now 'zoo.decoding') has no attribute "
                         f"{name!r}")
