"""transformers' MPNet (Song et al. 2020, "MPNet: Masked and Permuted Pre-training for
Language Understanding"): ``MPNetModel``, ``MPNetForMaskedLM`` and
``MPNetForSequenceClassification`` folders (mpnet-base, and all-mpnet-base-v2 and the
other sentence encoders built on it).

RoBERTa's layer and positions (learned, counting the real tokens from row
``padding_idx + 1``; no token types) with, beside them, T5's relative position bias: each
head adds a learned scalar per bucket of key - query distance (32 buckets, bidirectional,
up to 128), one table shared by every layer: zoo's encoder's ``relative`` slot, filled
with the ``t5-bias`` component.

| transformers | zoo (through RoBERTa's and BERT's names) |
|---|---|
| encoder.layer.i.attention.attn.q, k + v, o | layers.i.attn.q_proj, kv_proj, out_proj |
| encoder.layer.i.attention.LayerNorm | layers.i.norm1 |
| encoder.relative_attention_bias | layers.0.attn.positional.relative_attention_bias |
| the rest | as the ``roberta`` format |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import FormatError

from .bert import BertFormat
from .roberta import NAMES, RobertaFormat

HEADS = {"MPNetModel": "hidden", "MPNetForMaskedLM": "masked_lm",
         "MPNetForSequenceClassification": "classification"}
ATTENTION = {"attn.q": "self.query", "attn.k": "self.key", "attn.v": "self.value",
             "attn.o": "output.dense", "LayerNorm": "output.LayerNorm"}
MAX_DISTANCE, BUCKETS = 128, 32
"""transformers' MPNet buckets distances up to 128 into 32 buckets (not config keys: its
``relative_attention_num_buckets`` sizes the table only)."""
BIAS = "encoder.relative_attention_bias.weight"


class MPNetFormat(RobertaFormat):
    """Reads transformers' MPNet folders (and sentence-transformers' folders of them)."""

    family = "mpnet"
    heads = HEADS
    body = "mpnet"
    example = {"model_type": "mpnet", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 32,
               "max_position_embeddings": 66, "architectures": ["MPNetModel"]}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        buckets = config.get("relative_attention_num_buckets", BUCKETS)
        if buckets != BUCKETS:  # its table would have other rows than the buckets it reads
            raise FormatError(f"mpnet config option relative_attention_num_buckets={buckets!r} "
                              f"is not one zoo can express: transformers' MPNet buckets the "
                              f"distances into {BUCKETS} whatever the config says. Nothing was "
                              "loaded.")
        recipe = super().recipe({**{k: v for k, v in config.items()
                                    if k != "relative_attention_num_buckets"},
                                 "type_vocab_size": 0})
        recipe["components"]["relative"] = {"name": "t5-bias", "settings": {
            "num_buckets": buckets, "max_distance": MAX_DISTANCE}}
        recipe["description"] = "A mpnet encoder imported from its transformers folder."
        return recipe

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        renamed, bias = {}, None
        for key, value in state.items():
            name = key.removeprefix("mpnet.")
            if name == BIAS:
                bias = value
                continue
            match = re.match(r"^encoder\.layer\.(\d+)\.attention\.(.+)\.(weight|bias)$", name)
            if match and match.group(2) in ATTENTION:
                i, sub, kind = match.groups()
                name = f"encoder.layer.{i}.attention.{ATTENTION[sub]}.{kind}"
            renamed[name] = value
        if bias is None:
            raise FormatError(f"mpnet weights lack {BIAS}, the relative position bias every "
                              "layer shares. Nothing was loaded.")
        out = super().weights(renamed, config)
        out["layers.0.attn.positional.relative_attention_bias.weight"] = bias
        return out

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """RoBERTa's layout with no token types, in MPNet's names, and the relative bias
        (the ``relative`` slot's ``t5-bias``, 32 buckets up to 128) as
        ``encoder.relative_attention_bias`` (:meth:`weights` backwards)."""
        relative = recipe.get("components", {}).get("relative")
        expected = {"name": "t5-bias", "settings": {"num_buckets": BUCKETS,
                                                    "max_distance": MAX_DISTANCE}}
        if relative != expected:
            raise FormatError(f"this model cannot be written as {self.family}: its relative "
                              f"positions are {relative!r}, MPNet's are {expected!r}")
        s = recipe["architecture"].get("settings", {})
        if s.get("type_vocab_size", 2):
            raise FormatError(f"this model cannot be written as {self.family}: MPNet has no "
                              "token types")
        plain = {**recipe, "components": {k: v for k, v in recipe["components"].items()
                                          if k != "relative"}}
        state = dict(state)
        bias = state.pop("layers.0.attn.positional.relative_attention_bias.weight")
        config, _, weights = BertFormat.export(
            self, {**plain, "architecture": {**plain["architecture"], "settings": {
                **s, "type_vocab_size": 1}}}, state, generation)
        pad = s.get("pad_id", 1)
        config.update(model_type="mpnet", relative_attention_num_buckets=BUCKETS,
                      max_position_embeddings=config["max_position_embeddings"] + pad + 1)
        config.pop("type_vocab_size", None)
        config.pop("position_embedding_type", None)
        back = {bert: mpnet for mpnet, bert in NAMES.items()}
        attention = {f"attention.{bert}": f"attention.{mpnet}" for mpnet, bert in ATTENTION.items()}
        classifies = s.get("head", "hidden") == "classification"
        body = "" if s.get("head", "hidden") == "hidden" else "mpnet."
        out = {f"{body}encoder.relative_attention_bias.weight": bias}
        for key, value in weights.items():
            name = key.removeprefix("bert.")
            match = re.match(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", name)
            if name.startswith(("cls.", "classifier.")) or (classifies
                                                            and name.startswith("pooler.")):
                out[back[name]] = value
            elif match and match.group(2) in attention:
                i, sub, kind = match.groups()
                out[f"{body}encoder.layer.{i}.{attention[sub]}.{kind}"] = value
            else:
                out[body + name] = value
        return config, None, out
