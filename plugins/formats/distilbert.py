"""transformers' DistilBERT (Sanh et al. 2019, "DistilBERT, a distilled version of BERT"):
``DistilBertModel``, ``DistilBertForMaskedLM`` and ``DistilBertForSequenceClassification``
folders (distilbert-base-uncased, its SST-2 classifier, and the sentence encoders built
on it).

BERT's layer under other names, with no token types, LayerNorms of eps 1e-12 and, for
classification, a ReLU where BERT's pooler has tanh (zoo's encoder's
``pooler_activation``); it is read as the ``bert`` format reads BERT.

| transformers | zoo (through BERT's names) |
|---|---|
| embeddings.word_embeddings, position_embeddings, LayerNorm | embed, positional, embed_norm |
| transformer.layer.i.attention.q_lin, k_lin + v_lin, out_lin | layers.i.attn.q_proj, kv_proj, out_proj |
| transformer.layer.i.sa_layer_norm, output_layer_norm | layers.i.norm1, norm2 |
| transformer.layer.i.ffn.lin1, lin2 | layers.i.ffn.fc1, fc2 |
| vocab_transform, vocab_layer_norm, vocab_projector.bias | lm_head.dense, norm, bias |
| pre_classifier, classifier | pooler, classifier |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import FormatError, Options

from .bert import ACTIVATIONS, BertFormat

HEADS = {"DistilBertModel": "hidden", "DistilBertForMaskedLM": "masked_lm",
         "DistilBertForSequenceClassification": "classification"}
LAYER = {"attention.q_lin": "attention.self.query", "attention.k_lin": "attention.self.key",
         "attention.v_lin": "attention.self.value", "attention.out_lin": "attention.output.dense",
         "sa_layer_norm": "attention.output.LayerNorm", "ffn.lin1": "intermediate.dense",
         "ffn.lin2": "output.dense", "output_layer_norm": "output.LayerNorm"}
TOP = {"vocab_transform": "cls.predictions.transform.dense",
       "vocab_layer_norm": "cls.predictions.transform.LayerNorm",
       "pre_classifier": "pooler.dense", "classifier": "classifier"}
KEYS = {"dim": "hidden_size", "n_heads": "num_attention_heads", "n_layers": "num_hidden_layers",
        "hidden_dim": "intermediate_size", "activation": "hidden_act",
        "dropout": "hidden_dropout_prob", "attention_dropout": "attention_probs_dropout_prob"}
"""DistilBERT's config keys, and BERT's for the same."""
DEFAULTS = {"dim": 768, "n_heads": 12, "n_layers": 6, "hidden_dim": 3072,
            "activation": "gelu", "dropout": 0.1, "attention_dropout": 0.1}


class DistilBertFormat(BertFormat):
    """Reads transformers' DistilBERT folders (and sentence-transformers' folders of them)."""

    family = "distilbert"
    heads = HEADS
    body = "distilbert"
    example = {"model_type": "distilbert", "dim": 16, "n_layers": 2, "n_heads": 2,
               "hidden_dim": 32, "vocab_size": 32, "max_position_embeddings": 64,
               "architectures": ["DistilBertModel"]}

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """A masked LM's output: the word embeddings."""
        if self.head(config) != "masked_lm":
            return []
        return [("vocab_projector.weight", "distilbert.embeddings.word_embeddings.weight")]

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, self.family)  # refusals name DistilBERT's own keys
        if options.get("sinusoidal_pos_embds", False):
            raise options.refuse("sinusoidal_pos_embds", True, "learned positions")
        options.need("activation", tuple(ACTIVATIONS), "gelu", "GELU")
        # a question-answering head's dropout, the classifier's in training, an old flag
        inert = ("sinusoidal_pos_embds", "qa_dropout", "seq_classif_dropout", "tie_weights_")
        as_bert = {KEYS.get(k, k): v for k, v in config.items() if k not in inert}
        as_bert.update({KEYS[k]: v for k, v in DEFAULTS.items() if k not in config})
        as_bert.update(type_vocab_size=0, layer_norm_eps=1e-12)
        recipe = super().recipe(as_bert)
        settings = recipe["architecture"]["settings"]
        if settings["head"] == "classification":
            settings["pooler_activation"] = "relu"
        settings["pooler"] = settings["head"] == "classification"
        recipe["description"] = "A distilbert encoder imported from its transformers folder."
        return recipe

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        renamed = {}
        for key, value in state.items():
            name = key.removeprefix("distilbert.")
            layer = re.match(r"^transformer\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
            top = re.match(r"^(\w+)\.(weight|bias)$", name)
            if layer and layer.group(2) in LAYER:
                name = f"encoder.layer.{layer.group(1)}.{LAYER[layer.group(2)]}.{layer.group(3)}"
            elif name == "vocab_projector.bias":
                name = "cls.predictions.bias"
            elif name == "vocab_projector.weight":
                continue  # the word embeddings again (checked by tied)
            elif top and top.group(1) in TOP:
                name = f"{TOP[top.group(1)]}.{top.group(2)}"
            renamed[name] = value
        return super().weights(renamed, config)

    def export_problems(self, recipe: dict[str, Any], s: dict[str, Any],
                        parts: dict[str, tuple[str, dict[str, Any]]]) -> list[str]:
        """BERT's, but with no token types, and a ReLU pooler for a classifier (its
        pre_classifier) and none otherwise."""
        found = super().export_problems(
            recipe, {**s, "type_vocab_size": 2, "pooler_activation": "tanh"}, parts)
        if s.get("type_vocab_size", 2):
            found.append("token types: DistilBERT has none")
        if s.get("head", "hidden") == "classification":
            if s.get("pooler_activation", "tanh") != "relu":
                found.append("a classifier's pooler without ReLU: DistilBERT's pre_classifier "
                             "is dense and ReLU")
        elif s.get("pooler", True):
            found.append("a pooler: DistilBERT has none outside its classifier")
        norm = parts["norm"][1].get("eps", 1e-5)
        if norm != 1e-12:
            found.append(f"norm eps {norm}: DistilBERT's LayerNorms have eps 1e-12")
        return found

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """BERT's export in DistilBERT's config keys and names (:meth:`weights`
        backwards)."""
        bert, _, weights = super().export(recipe, state, generation)
        config = {KEYS_BACK.get(k, k): v for k, v in bert.items()
                  if k not in ("type_vocab_size", "layer_norm_eps", "position_embedding_type")}
        config.update(model_type="distilbert", sinusoidal_pos_embds=False)
        out = {}
        for key, value in weights.items():
            name = key.removeprefix("bert.")
            layer = re.match(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
            prefix = "distilbert." if key.startswith("bert.") else ""
            if layer:
                sub = {v: k for k, v in LAYER.items()}[layer.group(2)]
                out[f"{prefix}transformer.layer.{layer.group(1)}.{sub}.{layer.group(3)}"] = value
            elif name == "cls.predictions.bias":
                out["vocab_projector.bias"] = value
            elif name.rpartition(".")[0] in TOP_BACK:
                out[f"{TOP_BACK[name.rpartition('.')[0]]}.{name.rpartition('.')[2]}"] = value
            elif name.startswith("embeddings."):
                out[prefix + name] = value
            else:
                raise FormatError(f"distilbert: zoo's {key} has no place in DistilBERT")
        return config, None, out


KEYS_BACK = {v: k for k, v in KEYS.items()}
"""BERT's config keys, and DistilBERT's for the same."""
TOP_BACK = {v: k for k, v in TOP.items()}
"""BERT's names of the heads, and DistilBERT's."""
