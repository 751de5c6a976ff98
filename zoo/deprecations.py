"""What zoo still takes under an old name, as data: each entry says what replaced it, the
release that deprecated it and the release that removes it (as timm's deprecations do).

A plugin or a script written against an older zoo keeps working until that release; every
use warns once per place with a :class:`DeprecationWarning` that names the new way and the
release. ``tests/test_plugins.py`` fails once :data:`~zoo.version.__version__` reaches an
entry's ``removed_in``, so a removal is a decision, never a surprise; ``docs/plugins.md``
lists them all ("What is deprecated").
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Deprecation:
    """One old way that still works."""

    old: str
    """What an older plugin or script writes."""
    new: str
    """What to write now."""
    since: str
    """The release that deprecated it."""
    removed_in: str
    """The release that removes it."""


DEPRECATIONS: dict[str, Deprecation] = {
    "register_attention": Deprecation(
        "the hook register_attention", "register_attentions", "0.1.0", "0.3.0"),
    "zoo.plugin": Deprecation(
        "the module zoo.plugin", "zoo.plugin_api", "0.1.0", "0.3.0"),
    "zoo.generation": Deprecation(
        "the module zoo.generation (GenerationSettings, generate_with, greedy_with, "
        "beam_with)", "zoo.decoding: zoo.generate(model, src, settings, **changes)",
        "0.1.0", "0.3.0"),
    "decoding-functions": Deprecation(
        "zoo.decoding.greedy, beam_search and sample",
        "zoo.generate(model, src, ...) with settings by name", "0.1.0", "0.3.0"),
    "generate-keywords": Deprecation(
        "generate(strategy=, beam_size=, bos_id=, eos_id=, alpha=)",
        "num_beams, do_sample, start_id, eos_ids, length_penalty", "0.1.0", "0.3.0"),
    "ZOO_KERNEL_CACHE": Deprecation(
        "the environment variable ZOO_KERNEL_CACHE", "ZOO_NATIVE_CACHE", "0.1.0", "0.3.0"),
    "linear-kernel-methods": Deprecation(
        "zoo.ops.Linear's kernel_* methods", "their native_* names", "0.1.0", "0.3.0"),
    "format-exports": Deprecation(
        "the format capability exports=True", "writes='transformers'", "0.1.0", "0.3.0"),
    "Imported.translate": Deprecation(
        "model.imported.translate(model, texts)", "zoo.translate(model, texts)",
        "0.1.0", "0.3.0"),
    "former-component-names": Deprecation(
        "a component's former name (a plugin's former_names)", "its current name",
        "0.1.0", "0.3.0"),
}
"""Every deprecated name zoo still takes, by key."""


def removal(key: str) -> str:
    """The sentence every warning of ``key`` ends with: when the old way goes."""
    d = DEPRECATIONS[key]
    return (f"deprecated since zoo {d.since}; the old way still works, and is removed in "
            f"zoo {d.removed_in}")


def warn_deprecated(key: str, message: str, stacklevel: int = 2) -> None:
    """A DeprecationWarning: ``message`` (what to write now) and :func:`removal`."""
    warnings.warn(f"{message} ({removal(key)})", DeprecationWarning, stacklevel=stacklevel + 1)
