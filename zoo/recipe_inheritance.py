"""Recipes that extend recipes: ``base: transformer-tiny`` and only what differs.

A recipe's data may name a ``base``: a named recipe (built in or from a plugin) or a
recipe file (``.yaml``/``.json``, relative to the file that names it). The recipe is
then the base with these changes:

- ``name`` is the new recipe's own (required); ``description``, unless given, says
  what changed (``transformer-tiny, changed: architecture.d_model, components.ffn``);
  ``weights`` are never inherited (the base's weights fit the base only); ``requires``
  is the base's list and the new one's, together.
- ``architecture`` and each slot of ``components`` merge with the base's: a bare
  name (``ffn: swiglu``) or a different ``name:`` replaces the base's component and
  its settings; the same name, or ``settings:`` alone (``{settings: {eps: 1e-5}}``),
  keeps the base's component and changes only the settings given. ``null`` removes
  the slot (it takes the architecture's default).

The result is a whole recipe, validated like any other; its ``based_on`` keeps the
base's name as a record (a recipe's own ``based_on`` is never read as a base), and
saved models hold the whole recipe, so a later change to the base never changes a
saved model.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from ._text import quoted, short_repr
from .errors import RecipeError

MAX_DEPTH = 8
"""How many bases a chain may have (a base of a base of ...)."""
_CHAIN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("recipe_bases",
                                                                        default=())


def extend(data: dict[str, Any], source: str,
           read_base: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """The data of the recipe ``data["base"]`` with ``data``'s changes, as plain data;
    ``read_base(name)`` gives a base's data (whole, its own base already applied)."""
    base_name = data["base"]
    if not isinstance(base_name, str) or not base_name:
        raise RecipeError(f"{source}: base is the name of a recipe or a recipe file (e.g. "
                          f"base: transformer-tiny), got {short_repr(base_name, 60)}.")
    if "name" not in data:
        raise RecipeError(f"{source}: a recipe with a base still names itself; add name: "
                          "(the base's name is never taken over).")
    chain = _CHAIN.get()
    if base_name in chain or len(chain) >= MAX_DEPTH:
        loop = " -> ".join([*chain, base_name])
        raise RecipeError(f"{source}: the bases go round or too deep ({loop}); a recipe's "
                          f"base chain ends at a recipe without base:, within {MAX_DEPTH}.")
    token = _CHAIN.set((*chain, base_name))
    try:
        base = read_base(base_name)
    finally:
        _CHAIN.reset(token)
    merged = {key: value for key, value in base.items() if key != "weights"}
    merged["based_on"] = base_name
    merged["description"] = f"{base['name']}, changed: {', '.join(_changed(data)) or 'nothing'}"
    for key, value in data.items():
        if key in ("base", "based_on"):
            continue
        if key == "architecture":
            merged[key] = _merge_ref(base["architecture"], value, f"{source}: architecture")
        elif key == "components":
            merged[key] = _merge_components(base.get("components") or {}, value, source)
        elif key == "requires" and isinstance(value, list):
            merged[key] = list(dict.fromkeys([*base.get("requires", []), *value]))
        else:
            merged[key] = value  # an unknown key is left for validation to name
    return merged


def _merge_ref(base: dict[str, Any] | None, change: Any, where: str) -> Any:
    """One component reference changed: see the module's rules."""
    if change is None or base is None:
        return change
    if isinstance(change, str):
        return change if change != base["name"] else base
    if not isinstance(change, dict):
        return change  # validation names what a reference may be
    name = change.get("name", base["name"])
    if name != base["name"]:
        return change
    unknown = set(change) - {"name", "settings"}
    if unknown:
        raise RecipeError(f"{where}: unknown key {quoted(sorted(unknown))}; a component is "
                          "{name:, settings:}.")
    settings = change.get("settings") or {}
    if not isinstance(settings, dict):
        return {"name": name, "settings": settings}
    return {"name": name, "settings": {**base.get("settings", {}), **settings}}


def _merge_components(base: dict[str, Any], change: Any, source: str) -> Any:
    if not isinstance(change, dict):
        return change
    merged = dict(base)
    for slot, ref in change.items():
        if ref is None:
            merged.pop(slot, None)
        else:
            merged[slot] = _merge_ref(base.get(slot), ref, f"{source}: components.{slot}")
    return merged


def _changed(data: dict[str, Any]) -> list[str]:
    """The keys a recipe with a base changes, as dotted paths, for its description."""
    out = []
    architecture = data.get("architecture")
    if isinstance(architecture, dict) and "name" not in architecture:
        out += [f"architecture.{k}" for k in architecture.get("settings") or {}]
    elif "architecture" in data:
        out.append("architecture")
    components = data.get("components")
    if isinstance(components, dict):
        out += [f"components.{slot}" for slot in components]
    return out
