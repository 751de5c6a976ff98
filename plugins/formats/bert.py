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

from zoo.plugin_api import Format, FormatError

from ._kv import KeysValues, finish, unstacked

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
    example = {"model_type": "bert", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 32,
               "max_position_embeddings": 64, "architectures": ["BertModel"]}
    files = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
             "1_Pooling/config.json")
    generates = False
    heads = HEADS
    """The transformers classes of this family zoo's encoder holds, and its head for each."""
    body = "bert"
    """The name under which a class with a head keeps the encoder (``bert.encoder...``)."""

    def head(self, config: dict[str, Any]) -> str | None:
        """The encoder's head for the folder's class (``architectures``), None for a class
        zoo does not hold."""
        return self.heads.get((config.get("architectures") or [next(iter(self.heads))])[0])

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """A masked LM's output and bias: the word embeddings and the head's bias."""
        if self.head(config) != "masked_lm":
            return []
        return [(f"{head}decoder.{kind}", original) for head in ("cls.predictions.", "lm_head.")
                for kind, original in (
                    ("weight", f"{self.body}.embeddings.word_embeddings.weight"),
                    ("weight", "embeddings.word_embeddings.weight"),
                    ("bias", f"{head}bias"))]

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
        options.need("is_decoder", False, False, "an encoder: every token sees every other")
        options.need("add_cross_attention", False, False, "an encoder reads no other sequence")
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

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """A zoo encoder recipe as this family's config.json and state dict (no generation
        settings: ``None``); what the family cannot express is refused by name."""
        if recipe["architecture"]["name"] != "encoder":
            raise FormatError(f"this model cannot be written as {self.family}: architecture "
                              f"{recipe['architecture']['name']!r}, not 'encoder'")
        s = recipe["architecture"].get("settings", {})
        parts = {slot: component_part(recipe, slot) for slot in ("attention", "positional",
                                                                  "norm", "ffn", "block")}
        found = self.export_problems(recipe, s, parts)
        ffn, ffn_settings = parts["ffn"]
        activation = next((a for a, v in ACTIVATIONS.items() if v == ffn_settings), None)
        if ffn != "gelu" or activation is None:
            found.append(f"ffn {parts['ffn']}: BERT's network is GELU between two biased "
                         "layers")
        if found:
            raise FormatError(f"this model cannot be written as {self.family}:\n  - "
                              + "\n  - ".join(found))
        head = s.get("head", "hidden")
        cls = {v: k for k, v in self.heads.items()}[head]
        d = s.get("d_model", 768)
        config = {
            "architectures": [cls], "model_type": "bert", "vocab_size": s["vocab_size"],
            "hidden_size": d, "num_attention_heads": s.get("n_heads", 12),
            "intermediate_size": s.get("d_ff", 3072), "num_hidden_layers": s.get("layers", 12),
            "hidden_act": activation, "hidden_dropout_prob": s.get("dropout", 0.1),
            "attention_probs_dropout_prob": s.get("attention_dropout", 0.1),
            "max_position_embeddings": s.get("max_len", 512),
            "type_vocab_size": s.get("type_vocab_size", 2),
            "layer_norm_eps": parts["norm"][1].get("eps", 1e-5),
            "pad_token_id": s.get("pad_id", 0), "position_embedding_type": "absolute",
        }
        if head == "classification":
            config["id2label"] = {str(i): f"LABEL_{i}" for i in range(s.get("num_labels", 2))}
        return config, None, _to_bert(state, head)

    def export_problems(self, recipe: dict[str, Any], s: dict[str, Any],
                        parts: dict[str, tuple[str, dict[str, Any]]]) -> list[str]:
        """What of the recipe (its settings ``s``, its layer components ``parts``) this
        family's layout cannot hold, each said in a line."""
        found = []
        if s.get("norm_placement", "post") != "post" or s.get("final_norm"):
            found.append("pre-norm or a final norm: BERT's layers are post-norm")
        if not s.get("embedding_norm", True):
            found.append("embedding_norm false: BERT norms its summed embeddings")
        if s.get("type_vocab_size", 2) < 1:
            found.append("type_vocab_size 0: BERT has token types")
        if s.get("causal") or s.get("layer_types") or recipe.get("components", {}).get(
                "relative"):
            found.append("causal attention, kinds of layer or relative positions beside "
                         "the learned ones: BERT has none")
        pooled = s.get("pooler", True) or s.get("head") == "classification"
        if pooled and (s.get("pooler_activation", "tanh") != "tanh" or s.get("pooler_norm")
                       or s.get("pooling", "first") != "first"):
            found.append("a pooler other than dense and tanh over the first token: BERT's "
                         "is")
        if not s.get("head_bias", True):
            found.append("head_bias false: BERT's pooler and prediction head have biases")
        if parts["attention"] != ("vanilla", {}):
            found.append(f"attention {parts['attention']}: BERT's is vanilla, with biases")
        expected = self.exported_positions(s)
        if parts["positional"] != expected:
            found.append(f"positional {parts['positional']}: {self.family}'s positions are "
                         f"{expected}")
        norm, norm_settings = parts["norm"]
        if norm != "layernorm" or set(norm_settings) - {"eps"}:
            found.append(f"norm {parts['norm']}: BERT's is a LayerNorm with a bias")
        if parts["block"] != ("encoder", {}):
            found.append(f"block {parts['block']}: BERT's is the encoder block")
        return found

    def exported_positions(self, s: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The positional component this family's layout is: BERT's learned from row 0."""
        return ("learned", {})


def component_part(recipe: dict[str, Any], slot: str) -> tuple[str, dict[str, Any]]:
    """The component in ``slot`` of a recipe (as data) and its settings; the encoder's
    default where the recipe names none."""
    ref = recipe.get("components", {}).get(slot)
    if ref is None:
        return {"attention": "vanilla", "positional": "learned", "norm": "layernorm",
                "ffn": "gelu", "block": "encoder"}[slot], {}
    return (ref, {}) if isinstance(ref, str) else (ref["name"], dict(ref.get("settings") or {}))


def _to_bert(state: dict[str, torch.Tensor], head: str) -> dict[str, torch.Tensor]:
    """zoo's encoder state dict in BERT's names (``bert.`` before the body of the classes
    with a head, as transformers saves them): :meth:`BertFormat.weights` backwards."""
    prefix = "" if head == "hidden" else "bert."
    top = {zoo: bert for bert, zoo in TOP.items()}
    layer_names = {zoo: bert for bert, zoo in RENAMES.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        value = value.detach().contiguous().clone()
        match = re.match(r"^layers\.(\d+)\.(.+)\.(weight|bias)$", key)
        if match:
            i, name, kind = match.groups()
            base = f"{prefix}encoder.layer.{i}."
            if name == "attn.kv_proj":
                out.update(unstacked(value, f"{base}attention.self.key.{kind}",
                                     f"{base}attention.self.value.{kind}"))
            else:
                out[f"{base}{layer_names[name]}.{kind}"] = value
            continue
        if key == "lm_head.decoder.weight":
            continue  # tied to the word embeddings: transformers ties it again
        name = top[key]
        body = not name.startswith(("cls.", "classifier."))
        out[(prefix if body else "") + name] = value
    return out
