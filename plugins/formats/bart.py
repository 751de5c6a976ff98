"""transformers' BART (Lewis et al. 2020, ``BartForConditionalGeneration``) and mBART
(Liu et al. 2020, ``MBartForConditionalGeneration``).

Both: learned positions looked up two rows on (``offset: 2``), one table per stack,
a LayerNorm on the embeddings (``embedding_norm``), GELU, a bias on the logits, and
the output tied to the shared embeddings. BART is post-norm with unscaled
embeddings; mBART is pre-norm with a final LayerNorm on each stack and embeddings
scaled by sqrt(d_model).
"""

from __future__ import annotations

from typing import Any

import torch

from . import _bart
from ._generation import generation_settings
from ._options import Options
from .marian import ffn_of, stack_sizes

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "sentencepiece.bpe.model")
LEGACY = {"normalize_before", "add_final_layer_norm", "normalize_embedding",
          "static_position_embeddings", "add_bias_logits", "extra_pos_embeddings",
          "force_bos_token_to_be_generated", "num_hidden_layers", "output_past",
          "classifier_dropout", "forced_bos_token_id", "forced_eos_token_id"}
"""Keys of older BART configs that transformers' BART classes do not read."""


class BartFormat:
    """Reads transformers' BART folders."""

    family = "bart"
    pre_norm = False
    files = TOKENIZER_FILES

    def __init__(self, settings: None = None) -> None:
        pass

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        """The zoo recipe of a BART (or mBART) config."""
        options = Options(config, self.family)
        vocab = options.get("vocab_size", 50265)
        options.need("tie_word_embeddings", True, True, "the output tied to the embeddings")
        settings = {
            "vocab_size": vocab, **stack_sizes(options),
            "norm_placement": "pre" if self.pre_norm else "post", "final_norm": self.pre_norm,
            "share_embeddings": True, "tie_output": True,
            "scale_embeddings": options.get("scale_embedding", False),
            "separate_positions": True, "embedding_norm": True, "output_bias": True,
            "pad_id": options.get("pad_token_id", 1),
        }
        ffn = ffn_of(options, self.family)
        options.done(LEGACY)
        return {
            "name": self.family,
            "description": f"A {self.family} model imported from its transformers folder.",
            "architecture": {"name": "seq2seq", "settings": settings},
            "components": {
                "attention": "vanilla", "cross_attention": "vanilla", "kernel": "sdpa",
                "positional": {"name": "learned", "settings": {"offset": 2}},
                "norm": {"name": "layernorm", "settings": {"eps": 1e-5}}, "ffn": ffn,
                "encoder_block": "encoder", "decoder_block": "decoder",
            },
        }

    def weights(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
        return _bart.to_zoo(state, shared=True, tied=True, learned_positions=True,
                            family=self.family)

    def generation(self, config: dict[str, Any], generation: dict[str, Any]) -> dict[str, Any]:
        return generation_settings(config, generation, self.family)


class MBartFormat(BartFormat):
    """Reads transformers' mBART folders (pre-norm, a final norm per stack)."""

    family = "mbart"
    pre_norm = True
