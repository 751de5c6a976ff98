"""transformers' DeBERTa v2 and v3 (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention"; He et al. 2023, "DeBERTaV3"): ``DebertaV2Model``,
``DebertaV2ForMaskedLM`` and ``DebertaV2ForSequenceClassification`` folders
(deberta-v3-xsmall to -large, mdeberta-v3-base, and the NLI models and rerankers built
on them).

BERT's post-norm layer with ``disentangled`` attention in place of vanilla: no absolute
positions (``position_biased_input: false``); one table of bucketed relative distances,
normed and shared by every layer (the ``deberta`` positional component, held by layer
0's attention), which each layer projects with its own query and key projections
(``share_att_key``) into content-to-position and position-to-content scores
(``pos_att_type``). The classification head's pooler is a dense layer and GELU over the
first token (zoo's pooler with ``pooler_activation``).

| transformers | zoo (through BERT's names) |
|---|---|
| deberta.encoder.layer.i.attention.self.query_proj, key_proj + value_proj | layers.i.attn.q_proj, kv_proj |
| deberta.encoder.layer.i.attention.self.pos_query_proj, pos_key_proj | layers.i.attn.pos_q_proj, pos_k_proj |
| deberta.encoder.rel_embeddings, deberta.encoder.LayerNorm | layers.0.attn.positional.rel_embeddings, norm |
| lm_predictions.lm_head.dense, LayerNorm, bias (or cls.predictions.*) | lm_head.dense, norm, bias |
| pooler.dense, classifier | pooler, classifier |
| the rest | as the ``bert`` format |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import FormatError, Options

from .bert import BertFormat, component_part

HEADS = {"DebertaV2Model": "hidden", "DebertaV2ForMaskedLM": "masked_lm",
         "DebertaV2ForSequenceClassification": "classification"}
POOLER_ACTIVATIONS = ("tanh", "relu", "gelu")
OWN = {"relative_attention", "max_relative_positions", "position_buckets", "norm_rel_ebd",
       "share_att_key", "pos_att_type", "position_biased_input", "pooler_hidden_act",
       "pooler_hidden_size", "pooler_dropout", "embedding_size", "conv_kernel_size",
       "conv_act", "conv_groups", "legacy", "attention_head_size", "z_steps"}
"""The DeBERTa keys this format reads itself; the rest are BERT's, read by its format."""
TABLE = "layers.0.attn.positional."
LAYER = re.compile(r"^(?:deberta\.)?encoder\.layer\.(\d+)\.attention\.self\."
                   r"(query_proj|key_proj|value_proj|pos_query_proj|pos_key_proj)\.(weight|bias)$")
SELF = {"query_proj": "attention.self.query", "key_proj": "attention.self.key",
        "value_proj": "attention.self.value"}
HEAD_NAMES = {"lm_predictions.lm_head.dense": "cls.predictions.transform.dense",
              "lm_predictions.lm_head.LayerNorm": "cls.predictions.transform.LayerNorm",
              "pooler.dense": "pooler.dense"}


class DebertaV2Format(BertFormat):
    """Reads transformers' DeBERTa v2 and v3 folders."""

    family = "deberta-v2"
    heads = HEADS
    body = "deberta"
    files = ("spm.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "added_tokens.json", "modules.json", "sentence_bert_config.json",
             "config_sentence_transformers.json", "1_Pooling/config.json")
    example = {"model_type": "deberta-v2", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 64,
               "max_position_embeddings": 64, "relative_attention": True,
               "position_buckets": 8, "norm_rel_ebd": "layer_norm", "share_att_key": True,
               "pos_att_type": "p2c|c2p", "position_biased_input": False,
               "type_vocab_size": 0, "architectures": ["DebertaV2Model"]}

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """A legacy masked LM's output: the word embeddings and the head's bias."""
        if self.head(config) != "masked_lm" or not config.get("legacy", True):
            return []
        return [("cls.predictions.decoder.weight", "deberta.embeddings.word_embeddings.weight"),
                ("cls.predictions.decoder.bias", "cls.predictions.bias")]

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options({k: v for k, v in config.items() if k in OWN}, self.family)
        d = config.get("hidden_size", 1536)
        options.need("relative_attention", True, False, "relative positions")
        options.need("position_biased_input", False, True, "no absolute positions")
        options.need("conv_kernel_size", (0, None), 0, "no convolution beside the first layer")
        options.need("embedding_size", (d, None), d, "embeddings as wide as the layers")
        options.need("pooler_hidden_size", (d, None), d, "a pooler as wide as the layers")
        options.need("attention_head_size", (d // config.get("num_attention_heads", 24), None),
                     None, "heads of hidden_size / num_attention_heads")
        norm = options.need("norm_rel_ebd", ("layer_norm", "none"), "none",
                            "the distance table normed or not")
        terms = options.get("pos_att_type") or []
        if isinstance(terms, str):
            terms = [t.strip() for t in terms.lower().split("|") if t.strip()]
        if not isinstance(terms, list) or set(terms) - {"c2p", "p2c"}:
            raise options.refuse("pos_att_type", config.get("pos_att_type"),
                                 "the position terms c2p and p2c")
        positions = config.get("max_position_embeddings", 512)
        reach = options.get("max_relative_positions", -1)
        reach = positions if reach < 1 else reach
        buckets = options.get("position_buckets", -1)
        act = options.need("pooler_hidden_act", POOLER_ACTIVATIONS, "gelu",
                           "the pooler's tanh, ReLU or GELU")
        share = options.need("share_att_key", (False, True), False)
        options.get("legacy", True)  # which names the masked-LM head has: read by weights
        options.get("pooler_dropout")  # the classifier's dropout in training
        options.get("z_steps")
        options.done()
        recipe = super().recipe({**{k: v for k, v in config.items() if k not in OWN},
                                 "position_embedding_type": "absolute"})
        settings = recipe["architecture"]["settings"]
        settings["pooler_activation"] = act
        settings["pooler"] = settings["head"] == "classification"
        eps = recipe["components"]["norm"]["settings"]["eps"]
        recipe["components"]["attention"] = {"name": "disentangled", "settings": {
            "terms": terms, "share_projections": share}}
        recipe["components"]["positional"] = {"name": "deberta", "settings": {
            "buckets": buckets if buckets > 0 else reach, "max_distance": reach,
            "log": buckets > 0, "norm": norm == "layer_norm", "eps": eps}}
        recipe["description"] = "A deberta-v2 encoder imported from its transformers folder."
        return recipe

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        renamed, extra = {}, {}
        for key, value in state.items():
            name = key.removeprefix("deberta.")
            match = LAYER.match(key)
            module, _, kind = name.rpartition(".")
            if match and match.group(2) in SELF:
                i, sub, kind = match.groups()
                name = f"encoder.layer.{i}.{SELF[sub]}.{kind}"
            elif match:
                i, sub, kind = match.groups()
                extra[f"layers.{i}.attn.{sub.replace('pos_query_proj', 'pos_q_proj')}"
                      .replace("pos_key_proj", "pos_k_proj") + f".{kind}"] = value
                continue
            elif name == "encoder.rel_embeddings.weight":
                extra[f"{TABLE}rel_embeddings.weight"] = value
                continue
            elif module == "encoder.LayerNorm":
                extra[f"{TABLE}norm.{kind}"] = value
                continue
            elif module in HEAD_NAMES:
                name = f"{HEAD_NAMES[module]}.{kind}"
            elif name == "lm_predictions.lm_head.bias":
                name = "cls.predictions.bias"
            renamed[name] = value
        if f"{TABLE}rel_embeddings.weight" not in extra:
            raise FormatError(f"{self.family} weights lack encoder.rel_embeddings.weight, the "
                              "table of relative distances every layer reads. Nothing was "
                              "loaded.")
        return {**super().weights(renamed, config), **extra}

    def export_problems(self, recipe: dict[str, Any], s: dict[str, Any],
                        parts: dict[str, tuple[str, dict[str, Any]]]) -> list[str]:
        """BERT's, with disentangled attention over the deberta positions in place of
        vanilla attention and learned positions, and no token types needed."""
        attention, positional = parts["attention"], parts["positional"]
        found = super().export_problems(
            recipe, {**s, "type_vocab_size": max(1, s.get("type_vocab_size", 0)),
                     "pooler_activation": "tanh"},
            {**parts, "attention": ("vanilla", {}), "positional": ("learned", {})})
        if attention[0] != "disentangled":
            found.append(f"attention {attention}: DeBERTa's is disentangled")
        if positional[0] != "deberta":
            found.append(f"positional {positional}: DeBERTa's are the deberta positions")
        elif positional[1].get("eps", 1e-7) != parts["norm"][1].get("eps", 1e-5):
            found.append("the distance table's norm eps differs from the layers': DeBERTa's "
                         "is the model's layer_norm_eps")
        if s.get("pooler_activation", "tanh") not in POOLER_ACTIVATIONS:
            found.append(f"pooler_activation {s.get('pooler_activation')!r}")
        return found

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """BERT's export in DeBERTa's keys and names (:meth:`weights` backwards; the
        masked-LM head under the legacy ``cls.predictions`` names)."""
        s, state = recipe["architecture"].get("settings", {}), dict(state)
        extra = {k: state.pop(k) for k in list(state) if k.startswith(TABLE)
                 or re.match(r"^layers\.\d+\.attn\.pos_[qk]_proj\.", k)}
        bert, _, weights = super().export(recipe, state, generation)
        attention = component_part(recipe, "attention")[1]
        table = component_part(recipe, "positional")[1]
        buckets = table.get("buckets", 256)
        bert.update(
            model_type="deberta-v2", relative_attention=True, position_biased_input=False,
            pos_att_type="|".join(attention.get("terms", ["c2p", "p2c"])),
            share_att_key=attention.get("share_projections", True),
            position_buckets=buckets if table.get("log", True) else -1,
            max_relative_positions=table.get("max_distance", 512) if table.get("log", True)
            else buckets,
            norm_rel_ebd="layer_norm" if table.get("norm", True) else "none",
            pooler_hidden_act=s.get("pooler_activation", "tanh"), legacy=True)
        bert.pop("position_embedding_type", None)
        out = {}
        for key, value in weights.items():
            name = key.removeprefix("bert.")
            match = re.match(r"^encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)"
                             r"\.(weight|bias)$", name)
            body = "deberta." if key.startswith("bert.") else ""
            if match:
                i, sub, kind = match.groups()
                out[f"{body}encoder.layer.{i}.attention.self.{sub}_proj.{kind}"] = value
            elif name.startswith("pooler.") or name.startswith(("cls.", "classifier.")):
                out[name] = value
            else:
                out[body + name] = value
        body = "" if s.get("head", "hidden") == "hidden" else "deberta."
        for key, value in extra.items():
            if key.startswith(TABLE):
                part = key.removeprefix(TABLE)
                out[body + ("encoder.rel_embeddings.weight" if part.startswith("rel_")
                            else f"encoder.LayerNorm.{part.rpartition('.')[2]}")] = value
            else:
                i, sub = re.match(r"^layers\.(\d+)\.attn\.(pos_[qk]_proj)\.", key).groups()
                full = {"pos_q_proj": "pos_query_proj", "pos_k_proj": "pos_key_proj"}[sub]
                out[f"{body}encoder.layer.{i}.attention.self.{full}.{key.rpartition('.')[2]}"] \
                    = value
        return bert, None, out
