"""transformers' Gemma (Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and
Technology", ``GemmaForCausalLM``): Llama's layer with three changes, each a setting of
zoo's components: the embeddings scaled by sqrt(d_model) (the decoder's
``scale_embeddings``), RMSNorms that store their scale less one (rmsnorm's ``offset``
1) and a GeGLU network of tanh-approximated GELU; heads of 256 whatever the width, one
key/value head in Gemma-2B, the output tied to the embeddings. gemma-2b, gemma-7b and
their instruction-tuned versions load through it.

Its weights are named as Llama's (the ``llama`` format's table).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ._decoder import part, refuse
from .llama import LlamaFormat

DEFAULTS = {"tie_word_embeddings": True, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-6, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
            "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 256000,
            "max_position_embeddings": 8192}
"""transformers' GemmaConfig defaults, where they differ from Llama's (published
configs leave ``tie_word_embeddings`` out)."""


class GemmaFormat(LlamaFormat):
    """Reads transformers' Gemma folders, and writes zoo's decoders that Gemma expresses."""

    family = "gemma"
    files = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
             "special_tokens_map.json")
    example = {"model_type": "gemma", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
               "intermediate_size": 32, "vocab_size": 32, "max_position_embeddings": 64}

    @staticmethod
    def _as_llama(config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with Gemma's defaults where it leaves a key out, its legacy
        ``hidden_act: gelu`` read as transformers reads it (the tanh approximation), and
        ``hidden_activation`` dropped (transformers 5's Gemma reads ``hidden_act``)."""
        config = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        if config["hidden_act"] == "gelu":
            config["hidden_act"] = "gelu_pytorch_tanh"
        config.pop("hidden_activation", None)
        return config

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        recipe = super().recipe(self._as_llama(config))
        recipe["architecture"]["settings"]["scale_embeddings"] = True
        recipe["components"]["norm"]["settings"]["offset"] = 1.0
        return recipe

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        return super().tied(self._as_llama(config))

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        return super().weights(state, self._as_llama(config))

    def generation(self, config: dict[str, Any],
                   generation: dict[str, Any]) -> dict[str, Any] | None:
        return super().generation(self._as_llama(config), generation)

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any]):
        """A zoo decoder with Gemma's three changes as GemmaForCausalLM's folder: the
        ``llama`` format's export of the same model without them, renamed; what Gemma
        cannot express is refused by name."""
        settings = recipe["architecture"].get("settings", {})
        _, norm = part(recipe, "norm")
        ffn, ffn_settings = part(recipe, "ffn")
        found = []
        if not settings.get("scale_embeddings"):
            found.append("scale_embeddings false: Gemma scales its embeddings by "
                         "sqrt(d_model)")
        if norm.get("offset", 0.0) != 1.0:
            found.append(f"norm offset {norm.get('offset', 0.0)}: Gemma's RMSNorms store their "
                         "scale less one (offset 1)")
        if (ffn, ffn_settings.get("approximate")) != ("geglu", "tanh"):
            found.append(f"ffn {ffn} {ffn_settings}: Gemma's network is GeGLU of "
                         "tanh-approximated GELU")
        refuse(found, "gemma")
        plain = copy.deepcopy(recipe)
        plain["architecture"]["settings"]["scale_embeddings"] = False
        plain["components"]["norm"]["settings"].pop("offset")
        config, generation_file, weights = super().export(plain, state, generation)
        if config["model_type"] != "llama":
            refuse([f"its attention makes it {config['model_type']}'s, not Gemma's (no "
                    "sliding window, normed queries and keys, or biases on q, k and v "
                    "alone)"], "gemma")
        config.pop("mlp_bias", None)
        config.update(model_type="gemma", architectures=["GemmaForCausalLM"],
                      hidden_act="gelu_pytorch_tanh", pad_token_id=settings.get("pad_id"))
        return config, generation_file, weights
