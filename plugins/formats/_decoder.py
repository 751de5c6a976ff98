"""What the decoder-only formats (GPT-2, Llama and its kin) share: the activations of
their feed-forward networks, and their generation settings, whose lengths count the
prompt."""

from __future__ import annotations

from typing import Any

from zoo.plugin_api import generation_settings

ACTIVATIONS = {"gelu_new": ("gelu", {"approximate": "tanh"}),
               "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"}),
               "gelu": ("gelu", {}), "relu": ("relu", {}), "silu": ("silu", {}),
               "swish": ("silu", {})}
"""transformers' ``activation_function`` / ``hidden_act`` names, as zoo's networks."""

DEFAULT_MAX_LENGTH = 20
"""transformers' ``max_length`` when the files name none: 20 tokens, the prompt counted."""


def decoder_generation(config: dict[str, Any], generation: dict[str, Any],
                       family: str) -> dict[str, Any]:
    """transformers' generation settings of a decoder-only model: as the seq2seq formats
    read them, but a model with no start token of its own starts (and pads) with its
    end token, and the default length counts the prompt."""
    source = generation or config
    if source.get("decoder_start_token_id") is None and source.get("bos_token_id") is None:
        source = {**source, "bos_token_id": _first(source.get("eos_token_id"))}
        if generation:
            generation = source
        else:
            config = source
    data = generation_settings(config, generation, family)
    if source.get("max_length") is None:
        data["max_length"] = DEFAULT_MAX_LENGTH
    return data


def _first(ids: Any) -> Any:
    return ids[0] if isinstance(ids, list) and ids else ids
