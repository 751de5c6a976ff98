"""What the decoder-only formats (GPT-2, Llama and its kin) share: the activations of
their feed-forward networks, and the checks of a recipe they write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from zoo.plugin_api import FormatError

ACTIVATIONS = {"gelu_new": ("gelu", {"approximate": "tanh"}),
               "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"}),
               "gelu": ("gelu", {}), "relu": ("relu", {}), "silu": ("silu", {}),
               "swish": ("silu", {})}
"""transformers' ``activation_function`` / ``hidden_act`` names, as zoo's networks."""

DEFAULTS = {"attention": "vanilla", "positional": "learned", "norm": "layernorm",
            "ffn": "gelu", "block": "causal", "kernel": "sdpa"}
"""The decoder architecture's slot defaults (a recipe may leave them out)."""


def part(recipe: dict[str, Any], slot: str) -> tuple[str, dict[str, Any]]:
    """The (name, settings) of a recipe's slot, as data."""
    ref = recipe.get("components", {}).get(slot, DEFAULTS[slot])
    return (ref, {}) if isinstance(ref, str) else (ref["name"], dict(ref.get("settings") or {}))


def common_problems(recipe: dict[str, Any], family: str) -> list[str]:
    """What keeps a zoo recipe from being any decoder-only transformers model: another
    architecture, post-norm, no final norm, scaled embeddings, an output bias, another
    block, or attention other than vanilla's with the paper's scale."""
    if recipe["architecture"]["name"] != "decoder":
        return [f"architecture {recipe['architecture']['name']!r}: {family} is 'decoder'"]
    s, found = recipe["architecture"].get("settings", {}), []
    for key, fine in (("norm_placement", "pre"), ("scale_embeddings", False),
                      ("output_bias", False)):
        if s.get(key, fine) != fine:
            found.append(f"{key} {s[key]!r}: {family} has {fine!r}")
    if s.get("final_norm") is False:
        found.append(f"final_norm false: {family} has a final norm")
    if s.get("layer_types") or s.get("logit_softcap") is not None:
        found.append(f"layer_types or logit_softcap: {family}'s layers are all one kind, its "
                     "logits uncapped")
    if part(recipe, "block")[0] != "causal":
        found.append(f"block {part(recipe, 'block')[0]!r}: {family}'s layers are zoo's 'causal'")
    name, settings = part(recipe, "attention")
    if name != "vanilla" or settings.get("scale") is not None or settings.get("softcap"):
        found.append(f"attention {name} {settings}: {family}'s is 'vanilla' with the paper's "
                     "scale")
    return found


def refuse(found: list[str], family: str) -> None:
    """One FormatError listing what keeps the model from being ``family``'s (if any)."""
    if found:
        raise FormatError(f"this model cannot be written as {family}:\n  - "
                          + "\n  - ".join(found))


def to_family(state: dict[str, torch.Tensor], top: dict[str, str], tied: bool,
              layer: Callable[[str, str, str, torch.Tensor], dict[str, torch.Tensor]]
              ) -> dict[str, torch.Tensor]:
    """zoo's decoder state dict in a family's names: ``top`` renames the tensors outside
    the layers (embeddings, positions, final norm), ``layer(i, name, kind, value)`` gives
    the entries of each layer's tensor (``layers.{i}.{name}.{kind}``); the output matrix
    is left out when ``tied``."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key in top:
            out[top[key]] = value
        elif key == "lm_head.weight":
            if not tied:
                out[key] = value
        else:
            _, i, *rest = key.split(".")
            out.update(layer(i, ".".join(rest[:-1]), rest[-1], value))
    return out
