"""transformers' BERT (Devlin et al. 2019): ``BertModel``, ``BertForMaskedLM`` and
``BertForSequenceClassification`` folders, and the sentence-transformers folders built on
them (all-MiniLM-L6-v2, all-mpnet's BERT kin, ...), whose ``modules.json`` and
``1_Pooling/config.json`` :func:`zoo.embed` reads.

BERT in zoo's components: the ``encoder`` architecture, post-norm ``encoder`` blocks,
learned positions from 0, token types, a LayerNorm over the summed embeddings, GELU.

| transformers | zoo |
|---|---|
| embeddings.word_embeddings, position_embeddings, token_type_embeddings | embed, positional, token_types |
| embeddings.LayerNorm | embed_norm |
| encoder.layer.i.attention.self.query, key + value | layers.i.attn.q_proj, kv_proj |
| encoder.layer.i.attention.output.dense, LayerNorm | layers.i.attn.out_proj, norm1 |
| encoder.layer.i.intermediate.dense, output.dense, output.LayerNorm | layers.i.ffn.fc1, fc2, norm2 |
| pooler.dense | pooler |
| cls.predictions.transform.dense, LayerNorm; cls.predictions.bias | lm_head.dense, norm; lm_head.bias |
| classifier | classifier |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import Format

from ._kv import KeysValues, finish

ACTIVATIONS = {"gelu": {}, "gelu_new": {"approximate": "tanh"},
               "gelu_pytorch_tanh": {"approximate": "tanh"}}
HEADS = {"BertModel": "hidden", "BertForMaskedLM": "masked_lm",
         "BertForSequenceClassification": "classification"}
"""The transformers classes whose whole model zoo's encoder holds, and its head for each."""
LAYER = re.compile(r"^(?:bert\.)?encoder\.layer\.(\d+)\.(.+)\.(weight|bias|gamma|beta)$")
RENAMES = {"attention.self.query": "attn.q_proj", "attention.output.dense": "attn.out_proj",
           "attention.output.LayerNorm": "norm1", "intermediate.dense": "ffn.fc1",
           "output.dense": "ffn.fc2", "output.LayerNorm": "norm2"}
TOP = {"embeddings.word_embeddings.weight": "embed.weight",
       "embeddings.position_embeddings.weight": "positional.weight",
       "embeddings.token_type_embeddings.weight": "token_types.weight",
       "embeddings.LayerNorm.weight": "embed_norm.weight",
       "embeddings.LayerNorm.bias": "embed_norm.bias",
       "pooler.dense.weight": "pooler.weight", "pooler.dense.bias": "pooler.bias",
       "cls.predictions.transform.dense.weight": "lm_head.dense.weight",
       "cls.predictions.transform.dense.bias": "lm_head.dense.bias",
       "cls.predictions.transform.LayerNorm.weight": "lm_head.norm.weight",
       "cls.predictions.transform.LayerNorm.bias": "lm_head.norm.bias",
       "cls.predictions.bias": "lm_head.bias",
       "classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias"}
OLD_NAMES = {"gamma": "weight", "beta": "bias"}
"""The LayerNorm parameters' names in checkpoints converted from TensorFlow."""
TIED = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
"""The masked-LM output: the word embeddings and ``cls.predictions.bias`` again."""
BUFFERS = re.compile(r"^(?:bert\.)?embeddings\.(position_ids|token_type_ids)$")


class BertFormat(Format):
    """Reads transformers' BERT folders (and sentence-transformers' folders of them)."""

    family = "bert"
    files = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
             "1_Pooling/config.json")
    generates = False
    heads = HEADS
    """The transformers classes of this family zoo's encoder holds, and its head for each."""

    def head(self, config: dict[str, Any]) -> str | None:
        """The encoder's head for the folder's class (``architectures``), None for a class
        zoo does not hold."""
        return self.heads.get((config.get("architectures") or [next(iter(self.heads))])[0])

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = self.options(config)
        act = options.need("hidden_act", tuple(ACTIVATIONS), "gelu", "GELU")
        options.need("position_embedding_type", "absolute", "absolute",
                     "learned positions from 0")
        options.need("tie_word_embeddings", True, True,
                     "the masked-LM output is the word embeddings")
        head = self.head(config)
        if head is None:
            raise options.refuse("architectures", config.get("architectures"),
                                 f"zoo's encoder holds {', '.join(self.heads)}")
        labels = config.get("id2label") or {}
        settings = {
            "vocab_size": options.get("vocab_size", 30522),
            "d_model": options.get("hidden_size", 768),
            "n_heads": options.get("num_attention_heads", 12),
            "d_ff": options.get("intermediate_size", 3072),
            "layers": options.get("num_hidden_layers", 12),
            "dropout": options.get("hidden_dropout_prob", 0.1),
            "attention_dropout": options.get("attention_probs_dropout_prob", 0.1),
            "max_len": options.get("max_position_embeddings", 512),
            "type_vocab_size": options.get("type_vocab_size", 2),
            "norm_placement": "post", "head": head, "pooler": head != "masked_lm",
            "num_labels": len(labels) if labels else config.get("num_labels") or 2,
            "pad_id": options.get("pad_token_id", 0),
        }
        eps = options.get("layer_norm_eps", 1e-12)
        options.done({"gradient_checkpointing", "pooler_fc_size", "pooler_num_attention_heads",
                      "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type",
                      "directionality"})
        return {
            "name": self.family,
            "description": f"A {self.family} encoder imported from its transformers folder.",
            "architecture": {"name": "encoder", "settings": settings},
            "components": {
                "attention": "vanilla", "kernel": "sdpa", "positional": "learned",
                "norm": {"name": "layernorm", "settings": {"eps": eps}},
                "ffn": {"name": "gelu", "settings": ACTIVATIONS[act]}, "block": "encoder",
            },
        }

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues(self.family, ("key", "value"))
        masked_lm = self.head(config) == "masked_lm"
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                i, sub, kind = match.groups()
                kind = OLD_NAMES.get(kind, kind)
                if sub in ("attention.self.key", "attention.self.value"):
                    kv.add(f"layers.{i}.attn.kv_proj.{kind}", sub.rsplit(".", 1)[1], value)
                elif sub in RENAMES:
                    out[f"layers.{i}.{RENAMES[sub]}.{kind}"] = value
                else:
                    unknown.append(key)
                continue
            name = re.sub(r"\.(gamma|beta)$", lambda m: "." + OLD_NAMES[m.group(1)],
                          key.removeprefix("bert."))
            if masked_lm and (name.startswith("pooler.") or key in TIED):
                continue  # BertForMaskedLM has no pooler; its output is the embeddings
            if name in TOP:
                out[TOP[name]] = value
            elif not BUFFERS.match(key):
                unknown.append(key)
        return finish(out, kv, unknown, what="zoo's encoder")
