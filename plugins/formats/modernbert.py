"""transformers' ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer: A Modern
Bidirectional Encoder for Fast, Memory Efficient, and Long Context Finetuning and
Inference"): ``ModernBertModel``, ``ModernBertForMaskedLM`` and
``ModernBertForSequenceClassification`` folders (ModernBERT-base and -large, and the
sentence encoders and rerankers built on them).

A pre-norm encoder with RoPE and GeGLU, no biases, LayerNorms without a bias, no token
types and no learned positions; its layers alternate global attention (every
``global_attn_every_n_layers``-th, RoPE of base ``global_rope_theta``) and local
attention (each token sees those at most ``local_attention / 2`` away on either side,
RoPE of base ``local_rope_theta``): zoo's encoder with kinds of layer
(``layer_types``), the local ones vanilla attention with a bidirectional ``window``.
The first layer has no norm before its attention (the embeddings were just normed): its
kind's block says ``attention_norm: false``.

| transformers | zoo |
|---|---|
| embeddings.tok_embeddings, norm | embed, embed_norm |
| layers.i.attn_norm, attn.Wqkv (q; k + v), attn.Wo | layers.i.norm1, attn.q_proj; kv_proj, attn.out_proj |
| layers.i.mlp_norm, mlp.Wi (gate; input), mlp.Wo | layers.i.norm2, ffn.fc1_g; fc1_x, ffn.fc2 |
| final_norm | norm |
| head.dense, head.norm; decoder.bias (masked LM) | lm_head.dense, lm_head.norm; lm_head.bias |
| head.dense, head.norm; classifier (classification) | pooler, pooler_norm; classifier |

Dropout: ``embedding_dropout`` is zoo's ``dropout`` (the embeddings and, in zoo, the
residual branches too), ``attention_dropout`` the attention weights'; ``mlp_dropout``
must be 0 (zoo's encoder has none inside its network). All three are 0 in the
published configs.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import FormatError, Options

from ._kv import KeysValues, finish
from .bert import BertFormat, component_part

HEADS = {"ModernBertModel": "hidden", "ModernBertForMaskedLM": "masked_lm",
         "ModernBertForSequenceClassification": "classification"}
ACTIVATIONS = {"gelu": {}, "gelu_new": {"approximate": "tanh"},
               "gelu_pytorch_tanh": {"approximate": "tanh"}}
GLOBAL, LOCAL = "full_attention", "sliding_attention"
THETAS = {GLOBAL: ("global_rope_theta", 160000.0), LOCAL: ("local_rope_theta", 10000.0)}
"""Each kind of layer's RoPE base: the published configs' key, and transformers' default."""
LAYER = re.compile(r"^(?:model\.)?layers\.(\d+)\.(attn_norm|attn\.Wqkv|attn\.Wo|mlp_norm|"
                   r"mlp\.Wi|mlp\.Wo)\.(weight|bias)$")
RENAMES = {"attn_norm": "norm1", "attn.Wo": "attn.out_proj", "mlp_norm": "norm2",
           "mlp.Wo": "ffn.fc2"}
TOP = {"embeddings.tok_embeddings.weight": "embed.weight",
       "embeddings.norm.weight": "embed_norm.weight", "embeddings.norm.bias": "embed_norm.bias",
       "final_norm.weight": "norm.weight", "final_norm.bias": "norm.bias"}
HEAD_NAMES = {"masked_lm": {"head.dense": "lm_head.dense", "head.norm": "lm_head.norm"},
              "classification": {"head.dense": "pooler", "head.norm": "pooler_norm",
                                 "classifier": "classifier"}}
INERT = {"initializer_cutoff_factor", "deterministic_flash_attn", "reference_compile",
         "repad_logits_with_grad", "sparse_prediction", "sparse_pred_ignore_index",
         "gradient_checkpointing", "layer_norm_eps", "position_embedding_type"}
"""Keys that change nothing zoo computes: initialisation, flash attention's determinism,
torch.compile, training-time shortcuts of the masked-LM loss, and two keys the published
configs carry that ModernBERT never reads."""


class ModernBertFormat(BertFormat):
    """Reads transformers' ModernBERT folders (and sentence-transformers' folders of them)."""

    family = "modernbert"
    heads = HEADS
    body = "model"
    files = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
             "1_Pooling/config.json")
    example = {"model_type": "modernbert", "hidden_size": 16, "num_hidden_layers": 3,
               "num_attention_heads": 2, "intermediate_size": 24, "vocab_size": 64,
               "max_position_embeddings": 64, "pad_token_id": 3, "bos_token_id": 1,
               "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2,
               "architectures": ["ModernBertModel"]}

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """A masked LM's output: the word embeddings."""
        if self.head(config) != "masked_lm":
            return []
        return [("decoder.weight", "model.embeddings.tok_embeddings.weight")]

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, self.family)
        head = self.head(config)
        if head is None:
            raise options.refuse("architectures", config.get("architectures"),
                                 f"zoo's encoder holds {', '.join(self.heads)}")
        act = options.need("hidden_activation", tuple(ACTIVATIONS), "gelu", "GELU")
        bias = options.need("attention_bias", (False, True), False)
        mlp_bias = options.need("mlp_bias", (False, True), False)
        norm_bias = options.need("norm_bias", (False, True), False)
        options.need("mlp_dropout", (0, 0.0), 0.0, "no dropout inside the network")
        options.need("classifier_activation", "gelu", "gelu", "GELU in the head")
        options.need("decoder_bias", True, True, "the masked-LM output has a bias")
        options.need("tie_word_embeddings", True, True,
                     "the masked-LM output is the word embeddings")
        layers = options.count("num_hidden_layers", "a number of layers") or 22
        variants, kinds = self._kinds(options, layers)
        labels = config.get("id2label") or {}
        settings = {
            "vocab_size": options.get("vocab_size", 50368),
            "d_model": options.get("hidden_size", 768),
            "n_heads": options.get("num_attention_heads", 12),
            "d_ff": options.get("intermediate_size", 1152),
            "layers": layers,
            "dropout": options.get("embedding_dropout", 0.0),
            "attention_dropout": options.get("attention_dropout", 0.0),
            "max_len": options.get("max_position_embeddings", 8192),
            "type_vocab_size": 0, "norm_placement": "pre", "final_norm": True,
            "head": head, "pooler": head == "classification",
            "pooler_activation": "gelu", "pooler_norm": True, "head_bias":
                options.need("classifier_bias", (False, True), False),
            "pooling": {"cls": "first", "mean": "mean"}[options.need(
                "classifier_pooling", ("cls", "mean"), "cls", "the first token or the mean")],
            "num_labels": len(labels) if labels else config.get("num_labels") or 2,
            "pad_id": options.get("pad_token_id", 50283),
            "layer_types": kinds, "layer_variants": variants,
        }
        if head != "classification":
            settings.update(pooler_activation="tanh", pooler_norm=False, pooling="first")
        eps = options.get("norm_eps", 1e-5)
        options.done(INERT)
        return {
            "name": self.family,
            "description": "A modernbert encoder imported from its transformers folder.",
            "architecture": {"name": "encoder", "settings": settings},
            "components": {
                "attention": {"name": "vanilla", "settings": {"bias": bias}},
                "kernel": "sdpa",
                "positional": {"name": "rope", "settings": {
                    "base": variants[GLOBAL]["positional.base"]}},
                "norm": {"name": "layernorm", "settings": {
                    "eps": eps, "bias": norm_bias}},
                "ffn": {"name": "geglu", "settings": {"bias": mlp_bias, **ACTIVATIONS[act]}},
                "block": "encoder",
            },
        }

    def _kinds(self, options: Options, layers: int) -> tuple[dict[str, Any], list[str]]:
        """Each layer's kind (``layer_types``, or every ``global_attn_every_n_layers``-th
        global as the published configs say) and each kind's changes: its RoPE base
        (``rope_parameters`` by kind, or the published ``*_rope_theta``) and, for local
        layers, the window; the first layer's kind without the norm before attention."""
        kinds = options.get("layer_types")
        every = options.count("global_attn_every_n_layers",
                              "every how many layers one attends globally") or 3
        if kinds is None:
            kinds = [LOCAL if i % every else GLOBAL for i in range(layers)]
        if (not isinstance(kinds, list) or len(kinds) != layers
                or any(k not in (GLOBAL, LOCAL) for k in kinds)):
            raise options.refuse("layer_types", kinds, f"one of {GLOBAL!r} and {LOCAL!r} for "
                                 f"each of the {layers} layers")
        local = options.count("local_attention", "a window of a whole number of tokens") or 128
        params = options.get("rope_parameters") or {}
        if not isinstance(params, dict):
            raise options.refuse("rope_parameters", params, "an object by kind of layer")
        variants: dict[str, dict[str, Any]] = {}
        for kind, (key, default) in THETAS.items():
            theta = options.get(key, default)
            given = params.get(kind) or {}
            if not isinstance(given, dict) or given.get("rope_type", "default") != "default" \
                    or set(given) - {"rope_type", "rope_theta"}:
                raise options.refuse(f"rope_parameters.{kind}", given, "RoPE unscaled "
                                     "(rope_type 'default' and a rope_theta)")
            variants[kind] = {"positional.base": float(given.get("rope_theta", theta))}
        unknown = set(params) - set(THETAS)
        if unknown:
            raise options.refuse("rope_parameters", params, f"RoPE by {GLOBAL!r} and {LOCAL!r}")
        # transformers' window: |query - key| <= local_attention // 2; zoo's: < window
        variants[LOCAL]["attention.window"] = local // 2 + 1
        first = f"first_{kinds[0]}"
        variants[first] = {**variants[kinds[0]], "block.attention_norm": False}
        return variants, [first] + list(kinds[1:])

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues(self.family, ("key", "value"))
        head = self.head(config)
        heads = HEAD_NAMES.get(head, {})
        d, d_ff = config.get("hidden_size", 768), config.get("intermediate_size", 1152)
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                i, sub, kind = match.groups()
                base = f"layers.{i}."
                if sub == "attn.Wqkv":
                    if value.shape[0] != 3 * d:
                        raise FormatError(f"{self.family} weights: {key} has {value.shape[0]} "
                                          f"rows, not 3 x hidden_size = {3 * d}. Nothing was "
                                          "loaded.")
                    q, k, v = value.split(d, 0)
                    out[f"{base}attn.q_proj.{kind}"] = q
                    kv.add(f"{base}attn.kv_proj.{kind}", "key", k)
                    kv.add(f"{base}attn.kv_proj.{kind}", "value", v)
                elif sub == "mlp.Wi":
                    if value.shape[0] != 2 * d_ff:
                        raise FormatError(f"{self.family} weights: {key} has {value.shape[0]} "
                                          f"rows, not 2 x intermediate_size = {2 * d_ff}. "
                                          "Nothing was loaded.")
                    out[f"{base}ffn.fc1_g.{kind}"], out[f"{base}ffn.fc1_x.{kind}"] = \
                        value.split(d_ff, 0)
                else:
                    out[f"{base}{RENAMES[sub]}.{kind}"] = value
                continue
            name = key.removeprefix("model.")
            module, _, kind = key.rpartition(".")
            if name in TOP:
                out[TOP[name]] = value
            elif module in heads:
                out[f"{heads[module]}.{kind}"] = value
            elif key == "decoder.bias" and head == "masked_lm":
                out["lm_head.bias"] = value
            elif key != "decoder.weight":  # the word embeddings again (checked by tied)
                unknown.append(key)
        return finish(out, kv, unknown, what="zoo's encoder")

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any] | None):
        """A zoo encoder of ModernBERT's shape as its config.json and state dict (no
        generation settings: ``None``); what ModernBERT cannot express is refused by name."""
        if recipe["architecture"]["name"] != "encoder":
            raise FormatError(f"this model cannot be written as {self.family}: architecture "
                              f"{recipe['architecture']['name']!r}, not 'encoder'")
        s = recipe["architecture"].get("settings", {})
        parts = {slot: component_part(recipe, slot) for slot in ("attention", "positional", "norm",
                                                         "ffn", "block")}
        kinds, found = _exported_kinds(s, parts)
        approximate = parts["ffn"][1].get("approximate", "none")
        if parts["ffn"][0] != "geglu" or set(parts["ffn"][1]) - {"bias", "approximate"}:
            found.append(f"ffn {parts['ffn']}: ModernBERT's network is GeGLU")
        if parts["norm"][0] != "layernorm" or set(parts["norm"][1]) - {"eps", "bias"}:
            found.append(f"norm {parts['norm']}: ModernBERT's norms are LayerNorms")
        if parts["attention"][0] != "vanilla" or set(parts["attention"][1]) - {"bias"}:
            found.append(f"attention {parts['attention']}: ModernBERT's is vanilla")
        if parts["block"][0] != "encoder" or parts["block"][1]:
            found.append(f"block {parts['block']}: ModernBERT's is the encoder block")
        if s.get("norm_placement", "post") != "pre" or s.get("final_norm") is False:
            found.append("post-norm or no final norm: ModernBERT is pre-norm, with a final norm")
        if s.get("type_vocab_size", 2) or not s.get("embedding_norm", True):
            found.append("token types or no norm over the embeddings: ModernBERT has no token "
                         "types and norms its embeddings")
        head = s.get("head", "hidden")
        if head == "classification" and (s.get("pooler_activation") != "gelu"
                                         or not s.get("pooler_norm")):
            found.append("a classification pooler without GELU and a norm: ModernBERT's head "
                         "is a dense layer, GELU and a norm")
        if found:
            raise FormatError(f"this model cannot be written as {self.family}:\n  - "
                              + "\n  - ".join(found))
        config = {
            "architectures": [{v: k for k, v in self.heads.items()}[head]],
            "model_type": "modernbert", "vocab_size": s["vocab_size"],
            "hidden_size": s.get("d_model", 768), "intermediate_size": s.get("d_ff", 3072),
            "num_hidden_layers": s.get("layers", 12),
            "num_attention_heads": s.get("n_heads", 12),
            "hidden_activation": "gelu" if approximate == "none" else "gelu_pytorch_tanh",
            "max_position_embeddings": s.get("max_len", 512),
            "norm_eps": parts["norm"][1].get("eps", 1e-5),
            "norm_bias": parts["norm"][1].get("bias", True),
            "attention_bias": parts["attention"][1].get("bias", True),
            "mlp_bias": parts["ffn"][1].get("bias", False),
            "embedding_dropout": s.get("dropout", 0.1),
            "attention_dropout": s.get("attention_dropout", 0.1), "mlp_dropout": 0.0,
            "classifier_pooling": {"first": "cls", "mean": "mean"}[s.get("pooling", "first")],
            "classifier_bias": s.get("head_bias", True), "classifier_activation": "gelu",
            "decoder_bias": True, "tie_word_embeddings": True,
            "pad_token_id": s.get("pad_id", 0), "bos_token_id": None, "eos_token_id": None,
            "cls_token_id": None, "sep_token_id": None, **kinds,
        }
        if head == "classification":
            config["id2label"] = {str(i): f"LABEL_{i}" for i in range(s.get("num_labels", 2))}
        return config, None, _to_modernbert(state, head, s.get("d_ff", 3072))


def _exported_kinds(s: dict[str, Any], parts: dict) -> tuple[dict[str, Any], list[str]]:
    """ModernBERT's keys for the recipe's kinds of layer (``layer_types``, the local
    window, each kind's RoPE base), and what it cannot express of them."""
    found: list[str] = []
    if parts["positional"][0] != "rope" or set(parts["positional"][1]) - {"base"}:
        return {}, [f"positional {parts['positional']}: ModernBERT's positions are RoPE, "
                    "unscaled"]
    base = parts["positional"][1].get("base", 10000.0)
    kinds = s.get("layer_types") or [None] * s.get("layers", 12)
    variants = s.get("layer_variants") or {}
    types, thetas, windows = [], {GLOBAL: set(), LOCAL: set()}, set()
    for i, kind in enumerate(kinds):
        changes = dict(variants.get(kind, {})) if kind is not None else {}
        if changes.pop("block.attention_norm", True) is not (i != 0):
            found.append(f"layer {i}'s norm before attention: ModernBERT's first layer has "
                         "none, the others have one")
        window = changes.pop("attention.window", None)
        kind_name = GLOBAL if window is None else LOCAL
        thetas[kind_name].add(float(changes.pop("positional.base", base)))
        if window is not None:
            windows.add(window)
        if changes:
            found.append(f"layer {i}'s kind changes {sorted(changes)}: ModernBERT's kinds "
                         "change only the window and the RoPE base")
        types.append(kind_name)
    if len(windows) > 1 or 1 in windows:
        found.append(f"local windows {sorted(windows)}: ModernBERT's is one, of 2 keys or "
                     "more (its local_attention / 2 + 1)")
    if any(len(t) > 1 for t in thetas.values()):
        found.append("RoPE bases that differ within a kind of layer")
    keys = {"layer_types": types,
            "global_rope_theta": next(iter(thetas[GLOBAL]), base),
            "local_rope_theta": next(iter(thetas[LOCAL]), base),
            "local_attention": 2 * (next(iter(windows)) - 1) if windows else 128}
    every = next((n for n in range(1, len(types) + 1) if types == [
        LOCAL if i % n else GLOBAL for i in range(len(types))]), None)
    if every is not None:
        keys["global_attn_every_n_layers"] = every
    return keys, found


def _to_modernbert(state: dict[str, torch.Tensor], head: str,
                   d_ff: int) -> dict[str, torch.Tensor]:
    """zoo's encoder state dict in ModernBERT's names (``model.`` before the body of the
    classes with a head): :meth:`ModernBertFormat.weights` backwards."""
    body = "" if head == "hidden" else "model."
    names = {v: k for k, v in TOP.items()}
    heads = {v: k for k, v in HEAD_NAMES.get(head, {}).items()}
    out: dict[str, torch.Tensor] = {}
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        value = value.detach().contiguous().clone()
        match = re.match(r"^layers\.(\d+)\.(.+)\.(weight|bias)$", key)
        if match:
            i, sub, kind = match.groups()
            base = f"{body}layers.{i}."
            joined = {"attn.q_proj": ("attn.Wqkv", 0), "attn.kv_proj": ("attn.Wqkv", 1),
                      "ffn.fc1_g": ("mlp.Wi", 0), "ffn.fc1_x": ("mlp.Wi", 1)}
            if sub in joined:
                name, place = joined[sub]
                pending.setdefault(f"{base}{name}.{kind}", {})[place] = value
            else:
                out[f"{base}{ {v: k for k, v in RENAMES.items()}[sub] }.{kind}"] = value
            continue
        module, _, kind = key.rpartition(".")
        if key in names:
            out[body + names[key]] = value
        elif module in heads:
            out[f"{heads[module]}.{kind}"] = value
        elif key == "lm_head.bias":
            out["decoder.bias"] = value
        elif key != "lm_head.decoder.weight":  # tied: transformers ties it again
            raise FormatError(f"modernbert: zoo's {key} has no place in ModernBERT's layout")
    for name, halves in pending.items():
        out[name] = torch.cat([halves[0], halves[1]])
    return out
