"""transformers' M2M100 (Fan et al. 2021, "Beyond English-Centric Multilingual Machine
Translation", ``M2M100ForConditionalGeneration``) and NLLB-200 (NLLB Team 2022, "No
Language Left Behind", the same class): the most used many-to-many translators.

BART's weight layout (the ``bart`` formats' mapping) with fairseq's choices: pre-norm
layers with a final LayerNorm on each stack, embeddings scaled by sqrt(d_model), no norm
on the embeddings, ReLU, an output tied to the shared embeddings without a bias, and
fairseq's sinusoids (``sinusoidal`` with ``frequencies: fairseq``, [sin | cos], counting
the real tokens from the row after the padding token's, nothing added at padding), which
transformers computes and does not save. The target language is the token forced first
(``forced_bos_token_id``, from the generation settings or given per call), as
transformers' ``generate`` forces it.
"""

from __future__ import annotations

from typing import Any

from zoo.plugin_api import Options

from . import _bart

TOKENIZER_FILES = ("sentencepiece.bpe.model", "vocab.json", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
LEGACY = {"classifier_dropout", "forced_bos_token_id",
          "forced_eos_token_id", "init_std"}
"""Keys that transformers' M2M100 class does not read, or reads only to initialise."""


class M2M100Format(_bart.BartLayoutFormat):
    """Reads transformers' M2M100 and NLLB-200 folders."""

    family = "m2m100"
    files = TOKENIZER_FILES
    legacy = frozenset(LEGACY)
    learned_positions = False

    def architecture(self, options: Options) -> dict[str, Any]:
        options.need("tie_word_embeddings", True, True, "the output tied to the embeddings")
        return {
            "vocab_size": options.get("vocab_size", 128112),
            "norm_placement": "pre", "final_norm": True,
            "share_embeddings": True, "tie_output": True,
            "scale_embeddings": options.get("scale_embedding", True),
            "separate_positions": False, "embedding_norm": False, "output_bias": False,
            "pad_id": options.get("pad_token_id", 1),
        }

    def positional(self, options: Options) -> dict[str, Any]:
        return {"name": "sinusoidal", "settings": {
            "layout": "concatenated", "frequencies": "fairseq",
            "offset": options.get("pad_token_id", 1) + 1,
            "count": "real"}}
