"""Registry functions of the public API (``zoo.list_components`` and friends)."""

from __future__ import annotations

from typing import Any

from . import plugin_manager
from .families import FAMILIES, Family
from .registry import Component, registry


def list_families() -> list[Family]:
    """The component families, with their call contracts."""
    return list(FAMILIES.values())


def list_components(family: str, pattern: str = "*") -> list[Component]:
    """Components of ``family`` whose names match ``pattern`` (fnmatch), naturally sorted.

    Each has ``name``, ``plugin``, ``capabilities`` and ``description``.
    """
    return registry.list(family, pattern)


def get_component(family: str, name: str) -> Component:
    """One component; an unknown name raises with the closest names and the plugins."""
    return registry.get(family, name)


def register_component(
    family: str, name: str, target: Any, *, description: str = "",
    capabilities: Any = None, override: bool = False,
) -> Component:
    """Register one component directly, outside any plugin."""
    plugin_manager.get_manager().ensure_loaded()
    return registry.register(
        family, name, target, description=description, capabilities=capabilities,
        override=override, plugin="<runtime>",
    )
