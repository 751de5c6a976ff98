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

from . import _bart
from ._generation import generation_json, generation_settings
from ._options import Options

ACTIVATIONS = {"swish": ("silu", {}), "silu": ("silu", {}), "relu": ("relu", {}),
               "gelu": ("gelu", {}), "gelu_new": ("gelu", {"approximate": "tanh"}),
               "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"})}
LEGACY = {"normalize_before", "normalize_embedding", "static_position_embeddings",
          "add_bias_logits", "add_final_layer_norm", "extra_pos_embeddings"}
"""BART-era keys that older Marian configs carry and transformers' Marian does not read
(it is always post-norm with static positions and a logits bias)."""
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "target_vocab.json",
                   "tokenizer_config.json", "special_tokens_map.json")


def ffn_of(options: Options, family: str) -> dict[str, Any]:
    """The ffn slot for ``activation_function``; the encoder and decoder widths must agree."""
    act = options.need("activation_function", tuple(ACTIVATIONS), "gelu",
                       "the activations zoo has as feed-forward components")
    options.need("decoder_ffn_dim", options.get("encoder_ffn_dim", 4096), 4096,
                 "one feed-forward width for both stacks")
    name, settings = ACTIVATIONS[act]
    return {"name": name, "settings": settings}


def stack_sizes(options: Options) -> dict[str, Any]:
    """Widths, heads and layers of a BART-layout config (one head count for both stacks)."""
    heads = options.get("encoder_attention_heads", 16)
    options.need("decoder_attention_heads", heads, 16, "one head count for both stacks")
    return {
        "d_model": options.get("d_model", 1024), "n_heads": heads,
        "d_ff": options.get("encoder_ffn_dim", 4096),
        "encoder_layers": options.get("encoder_layers", 12),
        "decoder_layers": options.get("decoder_layers", 12),
        "dropout": options.get("dropout", 0.1),
        "attention_dropout": options.get("attention_dropout", 0.0),
        "activation_dropout": options.get("activation_dropout", 0.0),
        "encoder_layerdrop": options.get("encoder_layerdrop", 0.0),
        "decoder_layerdrop": options.get("decoder_layerdrop", 0.0),
        "max_len": options.get("max_position_embeddings", 1024),
    }


class MarianFormat:
    """Reads (and writes) transformers' Marian folders."""

    files = TOKENIZER_FILES

    def __init__(self, settings: None = None) -> None:
        pass

    @staticmethod
    def _vocabularies(options: Options) -> tuple[int, int, bool]:
        src = options.get("vocab_size", 58101)
        tgt = options.get("decoder_vocab_size", src)
        shared = options.get("share_encoder_decoder_embeddings", True)
        if shared and tgt != src:
            raise options.refuse("decoder_vocab_size", tgt, "shared embeddings need one "
                                 f"vocabulary (vocab_size {src})")
        return src, tgt, shared

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        """The zoo recipe of a Marian config."""
        options = Options(config, "marian")
        src, tgt, shared = self._vocabularies(options)
        tied = options.get("tie_word_embeddings", True)
        settings = {
            "vocab_size": tgt, "src_vocab_size": None if shared else src,
            **stack_sizes(options), "norm_placement": "post",
            "share_embeddings": shared, "tie_output": tied,
            "scale_embeddings": options.get("scale_embedding", False),
            "output_bias": True, "pad_id": options.get("pad_token_id", tgt - 1),
        }
        ffn = ffn_of(options, "marian")
        options.done(LEGACY)
        return {
            "name": "marian",
            "description": "A Marian (opus-mt) model imported from its transformers folder.",
            "architecture": {"name": "seq2seq", "settings": settings},
            "components": {
                "attention": "vanilla", "cross_attention": "vanilla", "kernel": "sdpa",
                "positional": {"name": "sinusoidal", "settings": {"layout": "concatenated"}},
                "norm": {"name": "layernorm", "settings": {"eps": 1e-5}}, "ffn": ffn,
                "encoder_block": "encoder", "decoder_block": "decoder",
            },
        }

    def weights(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Marian's tensors in zoo's names (the sinusoid tables some files hold are
        dropped: zoo computes them)."""
        options = Options(config, "marian")
        _, _, shared = self._vocabularies(options)
        return _bart.to_zoo(state, shared=shared, tied=options.get("tie_word_embeddings", True),
                            learned_positions=False, family="marian")

    def generation(self, config: dict[str, Any], generation: dict[str, Any]) -> dict[str, Any]:
        return generation_settings(config, generation, "marian")

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
