"""Kinds of layer in one stack: each layer built with the recipe's components or with a
named variant of them (Gemma 2 and 3 alternate sliding and global layers, ModernBERT
local and global ones with their own RoPE bases; Beltagy et al. 2020's local attention
beside global attention in one model).

A stack's settings take ``layer_types`` (one kind a layer) and ``layer_variants`` (per
kind, its changes to the layer components, written as overrides are); the resolver
builds each variant's parts (``Resolved.variants``) and the architecture builds each
layer from ``parts.variant(kind)``.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, Field, model_validator
from torch import nn


class LayerKinds(BaseModel):
    """``layer_types`` and ``layer_variants``, checked against each other and the
    ``layers`` of the settings they are part of."""

    layer_types: list[str] | None = None
    """Each layer's kind, a name of ``layer_variants`` (Gemma 2 and 3 alternate
    ``sliding_attention`` and ``full_attention`` layers); None: every layer is built
    with the recipe's components."""
    layer_variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per kind of layer, its changes to the recipe's layer components, written as
    overrides are (``{"attention.window": 4096, "positional.base": 10000.0}``); ``{}``
    for a kind built with the recipe's own."""

    @model_validator(mode="after")
    def _check_kinds(self) -> "LayerKinds":
        if self.layer_types is not None:
            layers = getattr(self, "layers")
            if len(self.layer_types) != layers:
                raise ValueError(f"layer_types names {len(self.layer_types)} layers, and the "
                                 f"model has {layers}: one kind a layer")
            unknown = sorted(set(self.layer_types) - set(self.layer_variants))
            if unknown:
                raise ValueError(f"layer_types names {unknown}, which layer_variants does not "
                                 f"define (it defines {sorted(self.layer_variants)}); give "
                                 "each kind its changes, {} for none")
        elif self.layer_variants:
            raise ValueError("layer_variants without layer_types: say which kind each layer "
                             "is")
        return self

    def kinds(self) -> list[str | None]:
        """Each layer's kind, None for the recipe's own components."""
        return list(self.layer_types) if self.layer_types is not None \
            else [None] * getattr(self, "layers")


def layers_of_kinds(parts, kinds: list[str | None], *, factories: dict[str, Any],
                    block: dict[str, Any],
                    adapt: Callable[[Any, dict], dict] | None = None) -> nn.ModuleList:
    """One block per entry of ``kinds``, each built from its kind's parts
    (``parts.variant``): the layer factories made once a kind (so that its layers share
    their positions) from ``factories``, changed by ``adapt(variant, made)`` where given,
    and the block made with ``block``'s arguments and them."""
    made: dict[str | None, dict] = {}

    def one(kind: str | None) -> nn.Module:
        variant = parts.variant(kind)
        if kind not in made:
            made[kind] = variant.layer_factories(**factories)
            if adapt is not None:
                made[kind] = adapt(variant, made[kind])
        return variant.make("block", **block, **made[kind])

    return nn.ModuleList(one(kind) for kind in kinds)
