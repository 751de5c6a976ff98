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

from zoo.plugin_api import Options

from . import _bart

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "sentencepiece.bpe.model")
LEGACY = {"normalize_before", "add_final_layer_norm", "normalize_embedding",
          "static_position_embeddings", "add_bias_logits", "extra_pos_embeddings",
          "force_bos_token_to_be_generated", "output_past",
          "classifier_dropout", "forced_bos_token_id", "forced_eos_token_id"}
"""Keys of older BART configs that transformers' BART classes do not read."""


class BartFormat(_bart.BartLayoutFormat):
    """Reads transformers' BART folders."""

    family = "bart"
    pre_norm = False
    files = TOKENIZER_FILES
    legacy = frozenset(LEGACY)

    def architecture(self, options: Options) -> dict[str, Any]:
        options.need("tie_word_embeddings", True, True, "the output tied to the embeddings")
        return {
            "vocab_size": options.get("vocab_size", 50265),
            "norm_placement": "pre" if self.pre_norm else "post", "final_norm": self.pre_norm,
            "share_embeddings": True, "tie_output": True,
            "scale_embeddings": options.get("scale_embedding", False),
            "separate_positions": True, "embedding_norm": True, "output_bias": True,
            "pad_id": options.get("pad_token_id", 1),
        }


class MBartFormat(BartFormat):
    """Reads transformers' mBART folders (pre-norm, a final norm per stack)."""

    family = "mbart"
    pre_norm = True
