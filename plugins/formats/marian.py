"""transformers' Marian (``MarianMTModel``): the opus-mt models of Tiedemann & Thottingal
(2020), trained with the Marian toolkit (Junczys-Dowmunt et al. 2018).

The paper's base Transformer with Marian's choices, each a zoo component or setting:
sinusoidal positions in the [sin | cos] layout, post-norm, a SiLU ("swish")
feed-forward, embeddings scaled by sqrt(d_model), a bias on the logits, and the pad
token as the decoder's start. opus-mt-tc-big models with separate source and target
vocabularies (``share_encoder_decoder_embeddings: false``) map to
``share_embeddings: false`` with ``src_vocab_size``.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.plugin_api import Options, generation_json

from . import _bart

LEGACY = {"normalize_before", "normalize_embedding", "static_position_embeddings",
          "add_bias_logits", "add_final_layer_norm", "extra_pos_embeddings"}
"""BART-era keys that older Marian configs carry and transformers' Marian does not read
(it is always post-norm with static positions and a logits bias)."""
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "target_vocab.json",
                   "tokenizer_config.json", "special_tokens_map.json")


class MarianFormat(_bart.BartLayoutFormat):
    """Reads (and writes) transformers' Marian folders."""

    family = "marian"
    files = TOKENIZER_FILES
    legacy = frozenset(LEGACY)
    example = {"model_type": "marian", "d_model": 16, "encoder_layers": 1,
               "decoder_layers": 1, "encoder_attention_heads": 2,
               "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
               "vocab_size": 32, "max_position_embeddings": 64, "pad_token_id": 31,
               "decoder_start_token_id": 31, "eos_token_id": 0}
    learned_positions = False

    @staticmethod
    def _vocabularies(options: Options) -> tuple[int, int, bool]:
        src = options.get("vocab_size", 58101)
        tgt = options.get("decoder_vocab_size", src)
        shared = options.get("share_encoder_decoder_embeddings", True)
        if shared and tgt != src:
            raise options.refuse("decoder_vocab_size", tgt, "shared embeddings need one "
                                 f"vocabulary (vocab_size {src})")
        return src, tgt, shared

    def embeddings(self, options: Options) -> tuple[bool, bool]:
        return self._vocabularies(options)[2], options.get("tie_word_embeddings", True)

    def architecture(self, options: Options) -> dict[str, Any]:
        src, tgt, shared = self._vocabularies(options)
        return {
            "vocab_size": tgt, "src_vocab_size": None if shared else src,
            "norm_placement": "post", "share_embeddings": shared,
            "tie_output": options.get("tie_word_embeddings", True),
            "scale_embeddings": options.get("scale_embedding", False),
            "output_bias": True, "pad_id": options.get("pad_token_id", tgt - 1),
        }

    def positional(self, options: Options) -> dict[str, Any]:
        return {"name": "sinusoidal", "settings": {"layout": "concatenated"}}

    # -- back out ------------------------------------------------------------------------------
    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any]):
        """A zoo seq2seq recipe, state dict and generation settings (as data) as Marian's
        ``config.json``, ``generation_config.json`` and state dict; what Marian cannot
        express is refused by name (``FormatError``)."""
        from .marian_export import marian_config, to_concatenated

        config = marian_config(recipe, start_id=generation["start_id"],
                               eos_id=generation["eos_ids"][0])
        positional = recipe["components"].get("positional", "sinusoidal")
        layout = "interleaved" if isinstance(positional, str) else positional.get(
            "settings", {}).get("layout", "interleaved")
        if layout == "interleaved":
            state = to_concatenated(state, config["d_model"])
        return config, generation_json(generation), _bart.from_zoo(
            state, shared=config["share_encoder_decoder_embeddings"],
            tied=config["tie_word_embeddings"])
