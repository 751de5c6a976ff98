"""From a recipe and overrides to checked parts, before any module is built.

``resolve(recipe, overrides)`` applies the overrides, validates every setting
against its component's pydantic model and checks the declared capabilities
of the chosen components against what each slot needs. Whatever cannot work
is refused here with one error naming the part, the reason and what would work.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError

from ._text import did_you_mean, quoted
from .errors import CapabilityError, MissingPluginError, PluginError, RecipeError
from .families import Slot
from .kinds import Kind, as_kind, inferred_kind, missing_methods, said
from .recipe import ComponentRef, Recipe, check_data, missing_requirements
from .registry import Component, describe_validation_error, registry


@dataclass
class Part:
    """One slot's component and its validated settings."""

    slot: str
    component: Component
    settings: BaseModel | None


@dataclass
class Resolved:
    """A recipe whose every part exists, is configured, and fits with the rest."""

    recipe: Recipe
    architecture: Component
    settings: BaseModel
    parts: dict[str, Part]
    kind: Kind | None = None
    """What kind of model it builds (:mod:`zoo.kinds`), declared by the architecture;
    None for none of zoo's kinds."""
    variants: dict[str, "Resolved"] = field(default_factory=dict)
    """The parts of each kind of layer the architecture's ``layer_variants`` name (Gemma 2's
    sliding and full layers): the recipe with that variant's changes, resolved."""

    def variant(self, name: str | None) -> "Resolved":
        """The parts a layer of kind ``name`` is built with (None: the recipe's own)."""
        return self if name is None else self.variants[name]

    def make(self, slot: str, **context: Any) -> Any:
        """Build the component in ``slot`` with ``context`` (what the architecture knows)."""
        part = self.parts[slot]
        return part.component.load()(part.settings, **context)

    def load(self, slot: str) -> Any:
        """The slot's component itself (a kernel function, a class)."""
        return self.parts[slot].component.load()

    @property
    def position_kind(self) -> str:
        """The positional slot's kind: ``absolute``, ``none``, or one acting inside attention."""
        part = self.parts.get("positional")
        return part.component.capabilities.kind if part is not None else "none"

    def embedding_positions(self, *, d_model: int, max_len: int) -> Any:
        """The module that adds positions to the embeddings: the positional slot's when it
        is absolute, else one that adds nothing (the positions then act inside attention)."""
        if self.position_kind in ("absolute", "none"):
            return self.make("positional", d_model=d_model, max_len=max_len)
        from ._modules import PassThrough

        return PassThrough()

    def layer_factories(
        self, *, d_model: int, n_heads: int, d_ff: int, dropout: float, attention_dropout: float,
        max_len: int = 1024, activation_dropout: float = 0.0, head_dim: int | None = None,
        n_kv_heads: int | None = None,
    ) -> dict[str, Any]:
        """The ``make_attention``, ``make_norm`` and ``make_ffn`` a block is built with,
        from the ``attention`` (``cross_attention`` where the architecture has one),
        ``kernel``, ``positional``, ``norm`` and ``ffn`` slots. ``dropout`` is the blocks'
        (residual) dropout, ``activation_dropout`` the one inside the feed-forward network.

        Positions that act inside attention are handed to each self-attention: one
        module per layer when the component says ``per_layer``, else one shared by
        every layer of a stack (a stack being told apart by ``causal``). They are the
        ``positional`` slot's, or, beside absolute ones, the optional ``relative`` slot's
        (MPNet's learned table and T5's buckets). ``head_dim``, when
        given, is passed to each attention (heads narrower or wider than d_model / n_heads),
        and positions inside attention are built for that width (n_heads x head_dim);
        ``n_kv_heads``, when fewer than ``n_heads``, too (grouped-query attention)."""
        source = "relative" if "relative" in self.parts else "positional"
        inside = source == "relative" or self.position_kind not in ("absolute", "none")
        per_layer = inside and self.parts[source].component.capabilities.per_layer
        shared: dict[bool, Any] = {}
        kernel = self.load("kernel")

        def positions(causal: bool) -> Any:
            if not inside:
                return None
            if per_layer or causal not in shared:
                # the width attention works in: heads narrower or wider than d_model / n_heads
                inner = d_model if head_dim is None else n_heads * head_dim
                module = self.make(source, d_model=inner, n_heads=n_heads,
                                   max_len=max_len, causal=causal)
                if per_layer:
                    return module
                shared[causal] = module
            return shared[causal]

        width = {} if head_dim is None else {"head_dim": head_dim}
        if n_kv_heads is not None and n_kv_heads != n_heads:
            width["n_kv_heads"] = n_kv_heads  # grouped-query attention (given only when set)

        def make_attention(*, causal: bool = False, cross: bool = False) -> Any:
            slot = "cross_attention" if cross and "cross_attention" in self.parts else "attention"
            return self.make(
                slot, d_model=d_model, n_heads=n_heads, dropout=attention_dropout,
                kernel=kernel, causal=causal, cross=cross,
                positional=None if cross else positions(causal), **width,
            )

        return dict(
            make_attention=make_attention,
            make_norm=partial(self.make, "norm", dim=d_model),
            make_ffn=partial(self.make, "ffn", d_model=d_model, d_ff=d_ff,
                             dropout=activation_dropout),
        )


def _slots_of(architecture: Component) -> dict[str, Slot]:
    return dict(getattr(architecture.load(), "slots", {}))


def apply_overrides(recipe: Recipe, overrides: dict[str, Any]) -> Recipe:
    """A copy of ``recipe`` with overrides applied.

    Keys: a slot (``norm="rmsnorm"`` or ``norm={"name": ..., "settings": {...}}``; None
    empties an optional slot), an architecture setting (``encoder_layers=3``), or
    ``slot.setting`` (``"norm.eps": 1e-5``).
    """
    recipe = recipe.model_copy(deep=True)
    if not overrides:
        return recipe
    check_data(dict(overrides), f"overrides of recipe {recipe.name!r}")
    arch = registry.get("architecture", recipe.architecture.name)
    slots = _slots_of(arch)
    fields = set(arch.settings_model.model_fields) if arch.settings_model else set()
    for key, value in overrides.items():
        slot, _, setting = key.partition(".")
        if slot in slots and setting:
            ref = recipe.components.get(slot)
            if ref is None:
                ref = _as_ref(slot, slots[slot].default or "")
            ref.settings[setting] = value
            recipe.components[slot] = ref
        elif key in slots and value is None and slots[key].optional:
            recipe.components.pop(key, None)  # an optional slot emptied
        elif key in slots:
            new = _as_ref(key, value)
            old = recipe.components.get(key)
            if old is not None and isinstance(value, str):
                # keep the settings the new component also understands (eps, bias, ...)
                model = registry.get(slots[key].family, new.name).settings_model
                known = model.model_fields if model is not None else {}
                new.settings = {k: v for k, v in old.settings.items() if k in known}
            recipe.components[key] = new
        elif key in fields:
            recipe.architecture.settings[key] = value
        else:
            valid = list(slots) + sorted(fields)
            raise RecipeError(
                f"Unknown override {key!r} for recipe {recipe.name!r} (architecture "
                f"{recipe.architecture.name!r}).{did_you_mean(key, valid)} Valid keys: "
                f"{quoted(valid)}, or 'slot.setting' such as 'norm.eps'."
            )
    return recipe


def _as_ref(slot: str, value: Any) -> ComponentRef:
    """An override's value as a component reference, or one clear error."""
    if isinstance(value, (str, dict, ComponentRef)):
        try:
            return ComponentRef.model_validate(value).model_copy(deep=True)
        except ValidationError as exc:
            raise RecipeError(
                describe_validation_error(exc, f"override {slot!r}", ComponentRef)
            ) from None
    raise RecipeError(
        f"Override {slot!r} takes a component name or {{'name': ..., 'settings': {{...}}}}, "
        f"got {value!r}."
    )


def resolve(
    recipe: Recipe, overrides: dict[str, Any] | None = None, *, device: Any = None
) -> Resolved:
    """Validate a recipe (with overrides) into :class:`Resolved` parts. A recipe whose
    ``requires`` names a package that is not installed is refused first, naming it."""
    missing = missing_requirements(recipe)
    if missing:
        raise MissingPluginError(
            f"Recipe {recipe.name!r} needs "
            + "; ".join(f"plugin {d!r} (pip install {d})" for d in missing)
            + ", which is not installed; its components come from there.")
    recipe = apply_overrides(recipe, overrides or {})
    arch = registry.get("architecture", recipe.architecture.name)
    kind = kind_of_architecture(arch)
    settings = arch.validate_settings(recipe.architecture.settings)
    slots = _slots_of(arch)
    unknown = [s for s in recipe.components if s not in slots]
    if unknown:
        raise RecipeError(
            f"Recipe {recipe.name!r}: architecture {arch.name!r} has no slot "
            f"{quoted(unknown)}.{did_you_mean(unknown[0], slots)} Its slots: {quoted(slots)}."
        )
    parts: dict[str, Part] = {}
    for slot_name, slot in slots.items():
        ref = recipe.components.get(slot_name)
        if ref is None and slot.default is None and slot.optional:
            continue  # left empty: the architecture builds without it
        if ref is None:
            if slot.default is None:
                raise RecipeError(
                    f"Recipe {recipe.name!r} leaves slot {slot_name!r} empty; name a "
                    f"{slot.family} component for it, e.g. {quoted(registry.names(slot.family)[:5])}."
                )
            ref = ComponentRef(name=registry.own_name(arch.plugin, slot.default))
        component = registry.get(slot.family, ref.name)
        _check_requirements(recipe, slot_name, slot, component)
        try:
            part_settings = component.validate_settings(ref.settings)
        except RecipeError as exc:
            raise RecipeError(f"Recipe {recipe.name!r}, slot {slot_name!r}: {exc}") from None
        parts[slot_name] = Part(slot_name, component, part_settings)
    resolved = Resolved(recipe, arch, settings, parts, kind)
    _check_together(resolved, device)
    resolved.variants = _variants(recipe, slots, settings, device)
    check = getattr(arch.load(), "check", None)
    if check is not None:
        check(resolved)
    return resolved


def filled(recipe: dict[str, Any] | Recipe) -> dict[str, Any]:
    """``recipe`` (data, as ``Format.export`` receives it, or a :class:`Recipe`) as data
    with every slot of its architecture and every setting at its value, the defaults
    the recipe left out included: what the model it builds has, read without knowing
    zoo's defaults. A recipe that does not resolve raises its RecipeError."""
    recipe = recipe if isinstance(recipe, Recipe) else Recipe.from_dict(recipe, "recipe")
    resolved = resolve(recipe)
    data = recipe.to_dict()
    data["architecture"] = {"name": recipe.architecture.name,
                            "settings": resolved.settings.model_dump(mode="json")}
    data["components"] = {
        slot: {"name": recipe.components[slot].name if slot in recipe.components
               else part.component.name,
               "settings": part.settings.model_dump(mode="json") if part.settings else {}}
        for slot, part in resolved.parts.items()}
    return data


LAYER_SLOTS = ("attention", "kernel", "positional", "norm", "ffn", "block")
"""The slots whose components a kind of layer may change (``layer_variants``)."""


def _variants(recipe: Recipe, slots: dict[str, Slot], settings: BaseModel,
              device: Any) -> dict[str, Resolved]:
    """Each of the architecture's ``layer_variants`` (name -> changes written as
    overrides of the layer slots: ``{"attention.window": 4096}``), resolved as the recipe
    with those changes; a change to anything but a layer's components refused by name."""
    variants = getattr(settings, "layer_variants", None) or {}
    out: dict[str, Resolved] = {}
    for name, changes in variants.items():
        outside = [k for k in changes if k.partition(".")[0] not in LAYER_SLOTS
                   or k.partition(".")[0] not in slots]
        if outside:
            raise RecipeError(
                f"Recipe {recipe.name!r}: layer variant {name!r} changes {quoted(outside)}; a "
                f"kind of layer changes its components only: {quoted(LAYER_SLOTS)}, or "
                "'slot.setting' such as 'attention.window'.")
        plain = recipe.model_copy(deep=True)
        for key in ("layer_variants", "layer_types"):
            plain.architecture.settings.pop(key, None)
        try:
            out[name] = resolve(plain, changes, device=device)
        except RecipeError as exc:
            raise RecipeError(f"layer variant {name!r}: {exc}") from None
    return out


def kind_of_architecture(arch: Component) -> Kind | None:
    """The kind ``arch`` declares (inferred, with a warning, where an older plugin
    declares none; None where none fits), its class checked against the kind's
    protocol."""
    caps, cls = arch.capabilities, arch.load()
    kind = as_kind(caps.kind) or inferred_kind(cls, caps.inputs, caps.outputs, arch.name)
    missing = missing_methods(cls, kind) if kind else []
    if missing:
        raise PluginError(f"architecture {arch.name!r} (plugin {arch.plugin!r}) declares kind "
                          f"{kind.value!r}, but its class {cls.__name__} defines no "
                          f"{', '.join(missing)}: {said(kind)} has "
                          f"{', '.join(missing_methods(object, kind))} "
                          "(docs/contract/architecture.md).")
    return kind


def _check_requirements(recipe: Recipe, slot_name: str, slot: Slot, component: Component) -> None:
    caps = component.capabilities
    missing = {k: v for k, v in slot.requires.items() if getattr(caps, k, None) != v}
    if not missing:
        return
    fits = [
        c.name
        for c in registry.list(slot.family)
        if all(getattr(c.capabilities, k, None) == v for k, v in slot.requires.items())
    ]
    needs = ", ".join(f"{k}={v}" for k, v in missing.items())
    raise CapabilityError(
        f"Recipe {recipe.name!r}: {slot.family} {component.name!r} cannot fill slot "
        f"{slot_name!r} of architecture {recipe.architecture.name!r}, which needs {needs}"
        f"{' (' + slot.why + ')' if slot.why else ''}. {slot.family.capitalize()} components "
        f"that can: {quoted(fits)}."
    )


def _check_norm_placement(resolved: Resolved) -> None:
    """Refuse a block asked for a norm placement it does not declare (``norm_placements``)."""
    placement = getattr(resolved.settings, "norm_placement", None)
    for part in resolved.parts.values():
        declared = getattr(part.component.capabilities, "norm_placements", None)
        if placement is None or declared is None or placement in declared:
            continue
        raise CapabilityError(
            f"Recipe {resolved.recipe.name!r}: block {part.component.name!r} in slot "
            f"{part.slot!r} exists with norm_placement {quoted(list(declared))} only, and "
            f"the recipe asks for {placement!r}. Set norm_placement: {declared[0]}, or "
            "choose another block.")


def _check_together(resolved: Resolved, device: Any) -> None:
    """Rules that involve more than one slot, or the device."""
    name = resolved.recipe.name
    parts = resolved.parts
    on_cuda = device is not None and str(device).startswith("cuda")
    for part in parts.values():
        caps = part.component.capabilities
        reasons = []
        package = getattr(caps, "requires_package", None)
        if package and importlib.util.find_spec(package) is None:
            reasons.append(f"the package {package!r}, which is not installed "
                           f"(pip install {package})")
        if getattr(caps, "needs_cuda", False) and not on_cuda:
            reasons.append(f"a CUDA device, and the model is built on {device or 'cpu'} "
                           "(build with device='cuda' where there is one)")
        if reasons:
            family = part.component.family
            alternatives = [
                c.name for c in registry.list(family)
                if not getattr(c.capabilities, "needs_cuda", False)
                and not getattr(c.capabilities, "requires_package", None)
            ]
            raise CapabilityError(
                f"Recipe {name!r}: {family} {part.component.name!r} in slot {part.slot!r} "
                f"needs {' and '.join(reasons)}. What runs here: {quoted(alternatives)}"
                + (" ('auto' picks the fastest that runs at each call)."
                   if "auto" in alternatives else ".")
            )
    _check_norm_placement(resolved)
    attention = parts.get("attention")
    for positional in (parts.get("positional"), parts.get("relative")):  # inside attention
        if not attention or not positional:
            continue
        kind = positional.component.capabilities.kind
        supported = attention.component.capabilities.positions
        if kind not in ("absolute", "none") and kind not in supported:
            able = [c.name for c in registry.list("attention") if kind in c.capabilities.positions]
            raise CapabilityError(
                f"Recipe {name!r}: positional {positional.component.name!r} acts inside "
                f"attention ({kind}), and attention {attention.component.name!r} cannot apply "
                f"{kind} positions. Attentions that can: {quoted(able)}."
            )
        kernel = parts.get("kernel")
        if (kind == "bias" and kernel and attention.component.capabilities.uses_kernel
                and not kernel.component.capabilities.bias):
            able = [c.name for c in registry.list("kernel") if c.capabilities.bias]
            raise CapabilityError(
                f"Recipe {name!r}: positional {positional.component.name!r} adds a bias to the "
                f"scores, and kernel {kernel.component.name!r} takes no float bias. Kernels "
                f"that do: {quoted(able)}."
            )
