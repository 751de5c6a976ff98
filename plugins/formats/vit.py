"""transformers' ViT (Dosovitskiy et al. 2021, ``ViTForImageClassification``): the
google/vit-* models.

zoo's ``vit`` architecture with a class token, learned positions, pre-norm
``vit`` blocks, LayerNorm (eps 1e-12 in Google's configs), GELU and the class
token's vector into the classifier.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import DECODER_FLAGS, Format, Options

from ._kv import KeysValues, finish

ACTIVATIONS = {"gelu": {}, "gelu_new": {"approximate": "tanh"},
               "gelu_pytorch_tanh": {"approximate": "tanh"}}
LAYER = re.compile(r"^vit\.encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
RENAMES = {"attention.attention.query": "attn.q_proj", "attention.output.dense": "attn.out_proj",
           "layernorm_before": "norm1", "layernorm_after": "norm2",
           "intermediate.dense": "ffn.fc1", "output.dense": "ffn.fc2"}
TOP = {"vit.embeddings.cls_token": "cls_token",
       "vit.embeddings.patch_embeddings.projection.weight": "patch_embed.weight",
       "vit.embeddings.patch_embeddings.projection.bias": "patch_embed.bias",
       "vit.layernorm.weight": "norm.weight", "vit.layernorm.bias": "norm.bias",
       "classifier.weight": "head.weight", "classifier.bias": "head.bias"}


class ViTFormat(Format):
    """Reads transformers' ViT image classifiers."""

    family = "vit"
    files = ("preprocessor_config.json",)
    generates = False

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, "vit")
        act = options.need("hidden_act", tuple(ACTIVATIONS), "gelu", "GELU")
        options.need("qkv_bias", True, True, "biases in the query, key and value projections")
        labels = config.get("id2label") or {}
        settings = {
            "image_size": options.get("image_size", 224), "patch_size": options.get("patch_size", 16),
            "in_chans": options.get("num_channels", 3),
            "num_classes": len(labels) if labels else 2,
            "d_model": options.get("hidden_size", 768), "n_heads": options.get("num_attention_heads", 12),
            "d_ff": options.get("intermediate_size", 3072), "depth": options.get("num_hidden_layers", 12),
            "dropout": options.get("hidden_dropout_prob", 0.0),
            "attention_dropout": options.get("attention_probs_dropout_prob", 0.0),
            "class_token": True, "pool": "token",
        }
        eps = options.get("layer_norm_eps", 1e-12)
        options.done({"encoder_stride", "pooler_output_size", "pooler_act"} | DECODER_FLAGS)
        return {
            "name": "vit",
            "description": "A ViT image classifier imported from its transformers folder.",
            "architecture": {"name": "vit", "settings": settings},
            "components": {
                "attention": "vanilla", "kernel": "sdpa", "positional": "learned",
                "norm": {"name": "layernorm", "settings": {"eps": eps}},
                "ffn": {"name": "gelu", "settings": ACTIVATIONS[act]}, "block": "vit",
            },
        }

    def weights(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues("vit", ("key", "value"))
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                i, sub, kind = match.groups()
                if sub in ("attention.attention.key", "attention.attention.value"):
                    kv.add(f"blocks.{i}.attn.kv_proj.{kind}", sub.rsplit(".", 1)[1], value)
                elif sub in RENAMES:
                    out[f"blocks.{i}.{RENAMES[sub]}.{kind}"] = value
                else:
                    unknown.append(key)
            elif key in TOP:
                out[TOP[key]] = value
            elif key == "vit.embeddings.position_embeddings":
                out["positional.weight"] = value[0]
            else:
                unknown.append(key)
        return finish(out, kv, unknown, what="zoo's vit (ViTForImageClassification without "
                      "a pooler)")

