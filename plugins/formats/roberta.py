"""transformers' RoBERTa (Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT Pretraining
Approach"): ``RobertaModel``, ``RobertaForMaskedLM`` and ``RobertaForSequenceClassification``
folders (roberta-base, distilroberta, and the sentence encoders built on them); and
XLM-RoBERTa (Conneau et al. 2020, "Unsupervised Cross-lingual Representation Learning at
Scale"), the same layer over a SentencePiece vocabulary of 250,002 tokens in 100
languages (xlm-roberta-base, multilingual-e5, bge-m3, bge-reranker).

BERT's layer (the ``bert`` format's mapping) with fairseq's positions: they count the real
tokens only and start after the padding token's row (``padding_idx + 1``, so row 2 for
position 0), which zoo's ``learned`` positions express with ``count: real`` and an
``offset``; one token type; byte-level BPE. Its classification head (a dense layer and
tanh over ``<s>``, then the output layer) is zoo's pooler and classifier.

| transformers | zoo |
|---|---|
| roberta.* (as BERT's) | as the ``bert`` format |
| lm_head.dense, layer_norm, bias | lm_head.dense, norm, bias |
| classifier.dense, out_proj | pooler, classifier |
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.plugin_api import FormatError

from .bert import BertFormat

HEADS = {"RobertaModel": "hidden", "RobertaForMaskedLM": "masked_lm",
         "RobertaForSequenceClassification": "classification"}
NAMES = {"lm_head.dense.weight": "cls.predictions.transform.dense.weight",
         "lm_head.dense.bias": "cls.predictions.transform.dense.bias",
         "lm_head.layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
         "lm_head.layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
         "lm_head.bias": "cls.predictions.bias",
         "lm_head.decoder.weight": "cls.predictions.decoder.weight",
         "lm_head.decoder.bias": "cls.predictions.decoder.bias",
         "classifier.dense.weight": "pooler.dense.weight",
         "classifier.dense.bias": "pooler.dense.bias",
         "classifier.out_proj.weight": "classifier.weight",
         "classifier.out_proj.bias": "classifier.bias"}
"""RoBERTa's heads in BERT's names, which the bert format then maps."""


class RobertaFormat(BertFormat):
    """Reads transformers' RoBERTa folders."""

    family = "roberta"
    example = {"model_type": "roberta", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 32,
               "max_position_embeddings": 66, "type_vocab_size": 1, "pad_token_id": 1,
               "architectures": ["RobertaModel"]}
    files = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
             "config_sentence_transformers.json", "1_Pooling/config.json")
    heads = HEADS
    body = "roberta"

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        pad = config.get("pad_token_id", 1)
        if pad is None or pad < 0:
            raise FormatError(f"{self.family} config option pad_token_id={pad!r}: RoBERTa's "
                              "positions start after the padding token's row; zoo needs it")
        recipe = super().recipe(config)
        s = recipe["architecture"]["settings"]
        s["pad_id"] = pad  # RoBERTa's default, 1 (BERT's 0 is RoBERTa's <s>)
        # fairseq's table holds padding_idx + 1 rows before position 0's
        s["max_len"] -= pad + 1
        if s["max_len"] < 1:
            raise FormatError(f"{self.family} config option max_position_embeddings="
                              f"{config.get('max_position_embeddings')!r} leaves no position "
                              f"after the {pad + 1} rows before the first")
        if s["head"] == "masked_lm":
            s["pooler"] = False
        recipe["components"]["positional"] = {
            "name": "learned", "settings": {"offset": pad + 1, "count": "real"}}
        return recipe

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        renamed = {}
        for key, value in state.items():
            name = key.removeprefix("roberta.")
            renamed[NAMES.get(name, name)] = value
        return super().weights(renamed, config)


    def exported_positions(self, s: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """RoBERTa's positions: learned, counting the real tokens from the pad's row + 1."""
        return ("learned", {"offset": s.get("pad_id", 1) + 1, "count": "real"})

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """BERT's export in this family's names: its model type, the position table's
        rows before position 0 counted in ``max_position_embeddings``, the heads under
        RoBERTa's names (:meth:`weights` backwards)."""
        s = recipe["architecture"].get("settings", {})
        if s.get("type_vocab_size", 2) != 1 or s.get("pad_id", 1) is None:
            raise FormatError(f"this model cannot be written as {self.family}: RoBERTa has one "
                              "token type and a pad token, whose row its positions follow")
        config, _, state = super().export(recipe, state, generation)
        config.update(model_type=self.family, max_position_embeddings=config[
            "max_position_embeddings"] + s.get("pad_id", 1) + 1)
        back = {bert: roberta for roberta, bert in NAMES.items()}
        classifies = s.get("head", "hidden") == "classification"
        out = {}
        for key, value in state.items():
            name = key.removeprefix("bert.")
            if name.startswith(("cls.", "classifier.")) or (classifies and
                                                            name.startswith("pooler.")):
                out[back[name]] = value  # a head: RoBERTa's own names
            else:
                out[("roberta." if key.startswith("bert.") else "") + name] = value
        return config, None, out


class XLMRobertaFormat(RobertaFormat):
    """Reads transformers' XLM-RoBERTa folders: RoBERTa's, under XLM-RoBERTa's classes,
    with a SentencePiece tokenizer."""

    family = "xlm-roberta"
    example = {**RobertaFormat.example, "model_type": "xlm-roberta",
               "architectures": ["XLMRobertaModel"]}
    files = ("sentencepiece.bpe.model", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
             "config_sentence_transformers.json", "1_Pooling/config.json")
    heads = {"XLMRobertaModel": "hidden", "XLMRobertaForMaskedLM": "masked_lm",
             "XLMRobertaForSequenceClassification": "classification"}
