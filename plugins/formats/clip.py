"""transformers' CLIP (Radford et al. 2021, "Learning Transferable Visual Models From
Natural Language Supervision"): ``CLIPModel`` folders (openai/clip-vit-base-patch32 and
-patch16, clip-vit-large-patch14, and the fine-tuned CLIPs of the same class).

zoo's ``clip`` architecture: the image tower a ViT (no bias in the patches' convolution,
a norm before the blocks), the text tower the encoder made causal, both pre-norm with
LayerNorms, a network of CLIP's ``quick_gelu`` (GELU's sigmoid approximation) and biased
projections; the two projections and the learned temperature. The towers share zoo's
components, so their activation and norm eps must be the same (they are in every
published CLIP).

| transformers | zoo |
|---|---|
| text_model.embeddings.token_embedding, position_embedding | text.embed, text.positional |
| text_model.encoder.layers.i.self_attn.q_proj, k_proj + v_proj, out_proj | text.layers.i.attn.q_proj, kv_proj, out_proj |
| text_model.encoder.layers.i.layer_norm1, layer_norm2, mlp.fc1, mlp.fc2 | text.layers.i.norm1, norm2, ffn.fc1, ffn.fc2 |
| text_model.final_layer_norm | text.norm |
| vision_model.embeddings.class_embedding, patch_embedding, position_embedding | vision.cls_token, patch_embed, positional |
| vision_model.pre_layrnorm, encoder.layers.i.*, post_layernorm | vision.pre_norm, blocks.i.* (as the text's), norm |
| text_projection, visual_projection, logit_scale | the same |

A config with ``text_config_dict`` and ``vision_config_dict`` (the first published ones:
clip-vit-large-patch14, LAION's) is read from those, as transformers reads it: a tower's
dict, even an empty one, replaces its ``text_config`` or ``vision_config`` (then not read)
with CLIP's defaults for what it leaves out. The keys every config of that time repeats
from transformers' config base (generation settings, ``tie_word_embeddings``, ...) are
passed as every format passes them.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import DECODER_FLAGS, Format, FormatError, Options

from ._kv import KeysValues, finish, unstacked
from .bert import component_part

ACTIVATIONS = {"quick_gelu": {"approximate": "sigmoid"}, "gelu": {},
               "gelu_new": {"approximate": "tanh"}, "gelu_pytorch_tanh": {"approximate": "tanh"}}
LAYER = re.compile(r"^(text|vision)_model\.encoder\.layers\.(\d+)\.(.+)\.(weight|bias)$")
RENAMES = {"self_attn.q_proj": "attn.q_proj", "self_attn.out_proj": "attn.out_proj",
           "layer_norm1": "norm1", "layer_norm2": "norm2", "mlp.fc1": "ffn.fc1",
           "mlp.fc2": "ffn.fc2"}
TOP = {"text_model.embeddings.token_embedding.weight": "text.embed.weight",
       "text_model.embeddings.position_embedding.weight": "text.positional.weight",
       "text_model.final_layer_norm.weight": "text.norm.weight",
       "text_model.final_layer_norm.bias": "text.norm.bias",
       "vision_model.embeddings.patch_embedding.weight": "vision.patch_embed.weight",
       "vision_model.embeddings.position_embedding.weight": "vision.positional.weight",
       "vision_model.pre_layrnorm.weight": "vision.pre_norm.weight",
       "vision_model.pre_layrnorm.bias": "vision.pre_norm.bias",
       "vision_model.post_layernorm.weight": "vision.norm.weight",
       "vision_model.post_layernorm.bias": "vision.norm.bias",
       "text_projection.weight": "text_projection.weight",
       "visual_projection.weight": "visual_projection.weight",
       "logit_scale": "logit_scale"}
BUFFERS = re.compile(r"^(text|vision)_model\.embeddings\.position_ids$")
INERT = {"initializer_factor", "initializer_range", "projection_dim", "dropout",
         "text_config_dict", "vision_config_dict"} | DECODER_FLAGS
"""Keys that change nothing zoo computes: initialisation, each tower's own copy of the
projection's width (the top level's is read), the first configs' unused ``dropout``."""


class CLIPFormat(Format):
    """Reads transformers' CLIPModel folders."""

    family = "clip"
    files = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "preprocessor_config.json")
    generates = False
    example = {"model_type": "clip", "architectures": ["CLIPModel"], "projection_dim": 8,
               "text_config": {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 24,
                               "num_hidden_layers": 2, "num_attention_heads": 2,
                               "max_position_embeddings": 16, "eos_token_id": 63},
               "vision_config": {"hidden_size": 16, "intermediate_size": 24,
                                 "num_hidden_layers": 2, "num_attention_heads": 2,
                                 "image_size": 16, "patch_size": 8}}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, self.family)
        options.need("architectures", (["CLIPModel"], None), ["CLIPModel"],
                     "CLIPModel, both towers with their projections")
        text, text_parts = self._tower(options, "text")
        vision, vision_parts = self._tower(options, "vision")
        if text_parts != vision_parts:
            raise options.refuse("vision_config", {"hidden_act": vision_parts[0],
                                                   "layer_norm_eps": vision_parts[1]},
                                 f"the text tower's activation and norm eps "
                                 f"({text_parts[0]!r}, {text_parts[1]}) in both towers")
        act, eps = text_parts
        settings = {"text": text, "vision": vision,
                    "projection_dim": options.get("projection_dim", 512),
                    "logit_scale": options.get("logit_scale_init_value", 2.6592),
                    "eos_id": text.pop("eos_id")}
        options.done(INERT)
        return {
            "name": self.family,
            "description": "A CLIP imported from its transformers folder.",
            "architecture": {"name": "clip", "settings": settings},
            "components": {
                "attention": "vanilla", "kernel": "sdpa", "positional": "learned",
                "norm": {"name": "layernorm", "settings": {"eps": eps}},
                "ffn": {"name": "gelu", "settings": ACTIVATIONS[act]}, "block": "encoder",
            },
        }

    def _tower(self, top: Options, name: str) -> tuple[dict[str, Any], tuple[str, float]]:
        """The ``name`` tower's settings from ``{name}_config`` (or the first configs'
        ``{name}_config_dict``), and its activation and norm eps."""
        key = f"{name}_config"
        if top.config.get(f"{name}_config_dict") is not None:
            top.get(key)  # transformers replaces it with the dict, filled with defaults
            key = f"{name}_config_dict"
        given = top.get(key, {})
        if not isinstance(given, dict):
            raise top.refuse(key, given, "an object of the tower's keys")
        options = Options(given, f"{self.family} {key}")
        act = options.need("hidden_act", tuple(ACTIVATIONS), "quick_gelu", "GELU or its "
                           "approximations")
        eps = options.get("layer_norm_eps", 1e-5)
        common = {"d_model": options.get("hidden_size", 512 if name == "text" else 768),
                  "n_heads": options.get("num_attention_heads", 8 if name == "text" else 12),
                  "d_ff": options.get("intermediate_size", 2048 if name == "text" else 3072),
                  "dropout": 0.0, "attention_dropout": options.get("attention_dropout", 0.0)}
        layers = options.count("num_hidden_layers", "a number of layers") or 12
        if name == "text":
            eos = options.get("eos_token_id", 49407)
            settings = {**common, "vocab_size": options.get("vocab_size", 49408),
                        "layers": layers, "max_len": options.get("max_position_embeddings", 77),
                        "type_vocab_size": 0, "embedding_norm": False, "causal": True,
                        "norm_placement": "pre", "final_norm": True, "head": "hidden",
                        "pooler": False, "pad_id": None,
                        # the first configs' end token, 2: read at the highest id
                        "eos_id": None if eos == 2 else eos}
        else:
            settings = {**common, "image_size": options.get("image_size", 224),
                        "patch_size": options.get("patch_size", 32),
                        "in_chans": options.get("num_channels", 3), "depth": layers,
                        "num_classes": 0, "class_token": True, "pool": "token",
                        "patch_bias": False, "pre_norm": True}
        options.done(INERT)
        return settings, (act, eps)

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues(self.family, ("key", "value"))
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                tower, i, sub, kind = match.groups()
                base = f"text.layers.{i}." if tower == "text" else f"vision.blocks.{i}."
                if sub in ("self_attn.k_proj", "self_attn.v_proj"):
                    part = "key" if sub.endswith("k_proj") else "value"
                    kv.add(f"{base}attn.kv_proj.{kind}", part, value)
                elif sub in RENAMES:
                    out[f"{base}{RENAMES[sub]}.{kind}"] = value
                else:
                    unknown.append(key)
            elif key in TOP:
                out[TOP[key]] = value
            elif key == "vision_model.embeddings.class_embedding":
                out["vision.cls_token"] = value.reshape(1, 1, -1)
            elif not BUFFERS.match(key):
                unknown.append(key)
        if "logit_scale" in out and out["logit_scale"].dim() != 0:
            raise FormatError(f"{self.family} weights: logit_scale holds "
                              f"{out['logit_scale'].numel()} values, not one. Nothing was "
                              "loaded.")
        return finish(out, kv, unknown, what="zoo's clip")

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """A zoo CLIP as CLIPModel's config.json and state dict (:meth:`weights`
        backwards); what CLIP cannot express is refused by name."""
        if recipe["architecture"]["name"] != "clip":
            raise FormatError(f"this model cannot be written as {self.family}: architecture "
                              f"{recipe['architecture']['name']!r}, not 'clip'")
        s = recipe["architecture"]["settings"]
        text, vision = s["text"], s["vision"]
        parts = {slot: component_part(recipe, slot) for slot in ("attention", "positional",
                                                                  "norm", "ffn", "block")}
        found = [f"{slot} {parts[slot]}: CLIP's is {want!r}" for slot, want in (
            ("attention", "vanilla"), ("positional", "learned"), ("block", "encoder"))
            if parts[slot] != (want, {})]
        (norm, norm_settings), (ffn, ffn_settings) = parts["norm"], parts["ffn"]
        act = next((a for a, v in ACTIVATIONS.items() if v == ffn_settings), None)
        if norm != "layernorm" or set(norm_settings) - {"eps"}:
            found.append(f"norm {parts['norm']}: CLIP's is a LayerNorm")
        if ffn != "gelu" or act is None:
            found.append(f"ffn {parts['ffn']}: CLIP's is GELU (or quick_gelu) between two "
                         "layers")
        if found:
            raise FormatError(f"this model cannot be written as {self.family}:\n  - "
                              + "\n  - ".join(found))
        eps = norm_settings.get("eps", 1e-5)
        tower = {"hidden_act": act, "layer_norm_eps": eps,
                 "projection_dim": s.get("projection_dim", 512)}
        eos = s.get("eos_id")
        config = {
            "architectures": ["CLIPModel"], "model_type": "clip",
            "projection_dim": s.get("projection_dim", 512),
            "logit_scale_init_value": s.get("logit_scale", 2.6592),
            "text_config": {**tower, "vocab_size": text["vocab_size"],
                            "hidden_size": text.get("d_model", 768),
                            "intermediate_size": text.get("d_ff", 3072),
                            "num_hidden_layers": text.get("layers", 12),
                            "num_attention_heads": text.get("n_heads", 12),
                            "max_position_embeddings": text.get("max_len", 512),
                            "attention_dropout": text.get("attention_dropout", 0.0),
                            # the first configs' 2 reads the highest id, as eos_id None
                            "eos_token_id": 2 if eos is None else eos},
            "vision_config": {**tower, "hidden_size": vision.get("d_model", 768),
                              "intermediate_size": vision.get("d_ff", 3072),
                              "num_hidden_layers": vision.get("depth", 12),
                              "num_attention_heads": vision.get("n_heads", 12),
                              "image_size": vision.get("image_size", 224),
                              "patch_size": vision.get("patch_size", 16),
                              "num_channels": vision.get("in_chans", 3),
                              "attention_dropout": vision.get("attention_dropout", 0.0)},
        }
        return config, None, _to_clip(state)


def _to_clip(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """zoo's CLIP state dict in CLIPModel's names: :meth:`CLIPFormat.weights` backwards."""
    names = {v: k for k, v in TOP.items()}
    layer_names = {v: k for k, v in RENAMES.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        value = value.detach().contiguous().clone()
        match = re.match(r"^(text\.layers|vision\.blocks)\.(\d+)\.(.+)\.(weight|bias)$", key)
        if match:
            where, i, sub, kind = match.groups()
            base = f"{'text' if where.startswith('text') else 'vision'}_model.encoder.layers.{i}."
            if sub == "attn.kv_proj":
                out.update(unstacked(value, f"{base}self_attn.k_proj.{kind}",
                                     f"{base}self_attn.v_proj.{kind}"))
            else:
                out[f"{base}{layer_names[sub]}.{kind}"] = value
        elif key in names:
            out[names[key]] = value
        elif key == "vision.cls_token":
            out["vision_model.embeddings.class_embedding"] = value.reshape(-1)
        else:
            raise FormatError(f"clip: zoo's {key} has no place in CLIPModel")
    return out
