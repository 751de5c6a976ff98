"""transformers' Llama (Touvron et al. 2023, ``LlamaForCausalLM``) and the models of its
layout: Mistral (Jiang et al. 2023, ``MistralForCausalLM``), Qwen2 (Yang et al. 2024,
``Qwen2ForCausalLM``), Qwen3 (Yang et al. 2025, ``Qwen3ForCausalLM``: each head's
queries and keys RMS-normed, ``head_dim`` free of the width, no biases) and Phi-3
(Abdin et al. 2024, ``Phi3ForCausalLM``: q, k and v in one matrix, gate and up in one,
a share of each head rotated where ``partial_rotary_factor`` says, a sliding window);
TinyLlama, Llama 2 and 3, Mistral-7B, Qwen2.5, Qwen3 and Phi-3-mini-4k load through it.

Llama in zoo's components: the ``decoder`` architecture with RoPE (``rope_theta``,
and the ``linear`` and ``llama3`` scalings of ``rope_scaling``), RMSNorm pre-norm with
a final norm, a SwiGLU network, grouped-query attention (``num_key_value_heads``), no
biases (Qwen2: on q, k and v only), an output of its own or tied. Mistral's
``sliding_window`` is vanilla attention's ``window``.

| transformers | zoo |
|---|---|
| model.embed_tokens | embed |
| model.layers.i.input_layernorm, post_attention_layernorm | layers.i.norm1, norm2 |
| model.layers.i.self_attn.q_proj, k_proj + v_proj, o_proj | layers.i.attn.q_proj, kv_proj, out_proj |
| model.layers.i.self_attn.q_norm, k_norm (Qwen3) | layers.i.attn.q_norm, k_norm |
| model.layers.i.self_attn.qkv_proj (Phi-3) | layers.i.attn.q_proj, kv_proj |
| model.layers.i.mlp.gate_proj, up_proj, down_proj | layers.i.ffn.fc1_g, fc1_x, fc2 |
| model.layers.i.mlp.gate_up_proj (Phi-3) | layers.i.ffn.fc1_g, fc1_x |
| model.norm, lm_head | norm, lm_head |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import (DECODER_FLAGS, Format, FormatError, Options, generation_json,
                            generation_settings)

from ._decoder import common_problems, part, refuse, to_family
from ._kv import KeysValues, unstacked

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                   "special_tokens_map.json", "vocab.json", "merges.txt")
GATED = {"silu": ("swiglu", {}), "swish": ("swiglu", {}),
         "gelu": ("geglu", {}), "gelu_pytorch_tanh": ("geglu", {"approximate": "tanh"}),
         "gelu_new": ("geglu", {"approximate": "tanh"})}
"""``hidden_act`` of the gated network down(act(gate(x)) * up(x)), as zoo's networks."""
INERT = {"pretraining_tp", "max_window_layers", "is_llama_config", "rope_interleaved",
         "auto_map"}
"""``pretraining_tp`` splits the products into slices whose sum is the same product;
``max_window_layers`` matters only to Qwen2's and Qwen3's ``use_sliding_window`` (read
there);
``is_llama_config`` and ``rope_interleaved`` (SmolLM2's config, written by nanotron)
are read by no transformers class; ``auto_map`` names remote code that transformers runs
only for a family it does not have (Phi-3's configs keep it)."""
LAYER = re.compile(r"^model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)_proj\.(weight|bias)$")
FUSED = {"qkv", "gate_up"}
"""Phi-3's fused projections: q, k and v stacked; the gate's rows, then the up's."""
NORMS = re.compile(r"^model\.layers\.(\d+)\.(input_layernorm|post_attention_layernorm)\.weight$")
HEAD_NORMS = re.compile(r"^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight$")
"""Qwen3's norms of each head's queries and keys."""
PROJ = {"q": "attn.q_proj", "o": "attn.out_proj", "gate": "ffn.fc1_g", "up": "ffn.fc1_x",
        "down": "ffn.fc2"}
ROTARY = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")
"""The frequencies older checkpoints saved (computed, not learned)."""


SCALING_KEYS = {"default": ((), ()), "linear": (("factor",), ()),
                "llama3": (("factor", "low_freq_factor", "high_freq_factor"),
                           ("original_max_position_embeddings",))}
"""The RoPE scalings zoo computes, each with the keys transformers requires of it and those
it may leave out (``rope_type`` and ``rope_theta`` aside)."""


def _rope(options: Options, partial: bool = False) -> dict[str, Any]:
    """The rope component's settings: ``rope_parameters`` (transformers 5) or
    ``rope_theta`` and ``rope_scaling`` (the published configs), read key by key: a key
    transformers requires is required by name, and one zoo does not read is refused.
    With ``partial`` (Phi-3's), ``partial_rotary_factor`` is the share of a head rotated."""
    params, scaling = (options.get(k, {}) or {} for k in ("rope_parameters", "rope_scaling"))
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if not isinstance(value, dict):
            raise options.refuse(key, value, "an object of RoPE's keys (rope_type, factor, ...)")
    params, scaling = dict(params), dict(scaling)
    key = "rope_parameters" if params else "rope_scaling"
    merged = {**scaling, **params}
    top, theta = options.get("rope_theta", 10000.0), merged.pop("rope_theta", None)
    theta = top if theta is None else theta
    kind = merged.pop("rope_type", merged.pop("type", "default"))
    fraction = None
    if partial:  # rope_parameters' own, else the top level's (as transformers reads them)
        top_fraction = options.get("partial_rotary_factor")
        fraction = merged.pop("partial_rotary_factor", None)
        fraction = top_fraction if fraction is None else fraction
    if kind not in SCALING_KEYS:
        raise options.refuse(key, {"rope_type": kind, **merged},
                             "RoPE unscaled, or scaled 'linear' or 'llama3'")
    required, optional = SCALING_KEYS[kind]
    missing = [k for k in required if merged.get(k) is None]
    if missing:
        raise FormatError(f"{options.family} config option {key} ({kind!r} scaling) lacks "
                          f"{', '.join(missing)}, which transformers requires of it too. "
                          "Nothing was loaded.")
    unread = sorted(set(merged) - set(required) - set(optional))
    if unread:
        raise options.refuse(f"{key}.{unread[0]}", merged[unread[0]],
                             f"{kind!r} scaling reads {', '.join(required + optional) or 'no key'}")
    settings: dict[str, Any] = {"base": theta}
    if fraction is not None and fraction != 1:
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
                0 < fraction < 1):
            raise options.refuse("partial_rotary_factor", fraction, "a share of each head "
                                 "above 0 and at most 1")
        settings["fraction"] = fraction
    if kind == "linear":
        settings.update(scaling="linear", factor=merged["factor"])
    elif kind == "llama3":  # as transformers: the context trained for, else the config's
        original = merged.get("original_max_position_embeddings") or options.get(
            "original_max_position_embeddings") or options.get("max_position_embeddings", 2048)
        settings.update(scaling="llama3", factor=merged["factor"],
                        low_freq_factor=merged["low_freq_factor"],
                        high_freq_factor=merged["high_freq_factor"], original_max_len=original)
    return settings


def _attention(options: Options, kind: str) -> tuple[dict[str, Any], float, dict[str, Any]]:
    """The vanilla attention's settings of a ``kind`` config (its biases, Mistral's and
    Phi-3's window, Qwen3's normed queries and keys), the residual dropout (Phi-3's
    ``resid_pdrop``; the others have none), and the decoder's kinds of layer where some
    layers slide and others do not (Qwen2's and Qwen3's ``use_sliding_window`` from layer
    ``max_window_layers`` on; else ``{}``)."""
    dropout, window, kinds = 0.0, None, {}
    if kind == "phi3":  # q, k, v and the network without biases, in fused matrices
        bias = out_bias = options.need("attention_bias", False, False,
                                       "Phi-3's projections have no biases")
        dropout = options.get("resid_pdrop", 0.0)
        options.get("embd_pdrop")  # read by no module of transformers' Phi-3
        options.get("original_max_position_embeddings")  # longrope's, refused with it
    elif kind in ("qwen2", "qwen3"):
        # Qwen2: biases on q, k and v only; Qwen3: as attention_bias says (none)
        bias = True if kind == "qwen2" else options.get("attention_bias", False)
        out_bias = False if kind == "qwen2" else bias
        window, kinds = _qwen_windows(options)
    else:
        bias = out_bias = options.get("attention_bias", False)
    if kind in ("mistral", "phi3"):
        window = options.count("sliding_window", "a window of at least 1 key, or null for "
                               "every key")
    if not kinds:
        layer_types = options.get("layer_types") or []
        layers = options.get("num_hidden_layers", 32)
        expected = "sliding_attention" if window else "full_attention"
        if layer_types and (not isinstance(layer_types, list) or len(layer_types) != layers
                            or any(t != expected for t in layer_types)):
            raise options.refuse("layer_types", layer_types,
                                 f"{layers} kinds (one a layer), every one '{expected}'")
    attention: dict[str, Any] = {"bias": bias}
    if out_bias != bias:
        attention["out_bias"] = out_bias
    if window:
        attention["window"] = window
    if kind == "qwen3":
        attention.update(qk_norm=True, qk_norm_eps=options.get("rms_norm_eps", 1e-6))
    return attention, dropout, kinds


def _qwen_windows(options: Options) -> tuple[int | None, dict[str, Any]]:
    """Qwen2's and Qwen3's sliding windows: none without ``use_sliding_window``; with it,
    ``sliding_window`` keys in the layers ``layer_types`` names (else from layer
    ``max_window_layers`` on, as transformers makes them): every layer's window, or the
    decoder's kinds of layer where some slide and some do not."""
    if not options.get("use_sliding_window", False):
        options.get("sliding_window"), options.get("max_window_layers")  # inert
        return None, {}
    window = options.count("sliding_window", "a window of at least 1 key")
    layers = options.get("num_hidden_layers", 32)
    first = options.get("max_window_layers", 28)
    types = options.get("layer_types") or [
        "sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers or set(types) - {
            "sliding_attention", "full_attention"}:
        raise options.refuse("layer_types", types, f"{layers} kinds, each "
                             "'sliding_attention' or 'full_attention'")
    if window is None or set(types) == {"full_attention"}:
        return None, {}
    if set(types) == {"sliding_attention"}:
        return window, {}
    return None, {"layer_types": types, "layer_variants": {
        "full_attention": {}, "sliding_attention": {"attention.window": window}}}


class LlamaFormat(Format):
    """Reads transformers' Llama, Mistral and Qwen2 folders, and writes zoo's decoder
    models that they express (``zoo export --format transformers``)."""

    family = "llama"
    files = TOKENIZER_FILES
    legacy = frozenset(INERT)
    example = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2,
               "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 32,
               "vocab_size": 32, "max_position_embeddings": 64, "bos_token_id": 1,
               "eos_token_id": 2}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        kind = config.get("model_type", "llama")
        options = Options(config, kind)
        d_model = options.get("hidden_size", 4096)
        heads = options.get("num_attention_heads", 32)
        head_dim = options.get("head_dim", d_model // heads)
        act = options.need("hidden_act", tuple(GATED), "silu")
        ffn, ffn_settings = GATED[act]
        attention, dropout, kinds = _attention(options, kind)
        eos = options.get("eos_token_id", 2)
        eos = eos[0] if isinstance(eos, list) else eos
        settings = {
            "vocab_size": options.get("vocab_size", 32000), "d_model": d_model,
            "n_heads": heads, "n_kv_heads": options.get("num_key_value_heads", heads),
            "head_dim": None if head_dim * heads == d_model else head_dim,
            "d_ff": options.get("intermediate_size", 11008),
            "layers": options.get("num_hidden_layers", 32),
            "dropout": dropout, "attention_dropout": options.get("attention_dropout", 0.0),
            "max_len": options.get("max_position_embeddings", 2048),
            "norm_placement": "pre", "final_norm": True,
            "tie_output": options.get("tie_word_embeddings", False), "bos_id":
            options.get("bos_token_id"), "eos_id": eos,
            "pad_id": options.get("pad_token_id"),
            **kinds,
        }
        ffn_settings = {**ffn_settings, "bias": options.get("mlp_bias", False)}
        rope = _rope(options, partial=kind == "phi3")
        eps = options.get("rms_norm_eps", 1e-6)
        options.done(self.legacy | DECODER_FLAGS)
        return {
            "name": kind,
            "description": f"A {kind} model imported from its transformers folder.",
            "architecture": {"name": "decoder", "settings": settings},
            "components": {
                "attention": {"name": "vanilla", "settings": attention}, "kernel": "sdpa",
                "positional": {"name": "rope", "settings": rope},
                "norm": {"name": "rmsnorm", "settings": {"eps": eps}},
                "ffn": {"name": ffn, "settings": ffn_settings}, "block": "causal",
            },
        }

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """The output and the embeddings, under ``tie_word_embeddings``."""
        tied = bool(config.get("tie_word_embeddings", False))
        return [("lm_head.weight", "model.embed_tokens.weight")] if tied else []

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        kind = config.get("model_type", "llama")
        tied = bool(config.get("tie_word_embeddings", False))
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues(kind, ("k", "v"))
        unknown = []
        for key, value in state.items():
            layer, norm, head_norm = LAYER.match(key), NORMS.match(key), HEAD_NORMS.match(key)
            if head_norm and kind == "qwen3":
                i, which = head_norm.groups()
                out[f"layers.{i}.attn.{which}_norm.weight"] = value
            elif layer and layer.group(3) in FUSED and kind == "phi3":
                i, _, proj, part = layer.groups()
                out.update(_unfused(config, i, proj, part, value))
            elif layer:
                i, _, proj, part = layer.groups()
                if proj in ("k", "v"):
                    kv.add(f"layers.{i}.attn.kv_proj.{part}", proj, value)
                elif proj in PROJ:
                    out[f"layers.{i}.{PROJ[proj]}.{part}"] = value
                else:
                    unknown.append(key)
            elif norm:
                i, which = norm.groups()
                out[f"layers.{i}.norm{1 if which == 'input_layernorm' else 2}.weight"] = value
            elif key == "model.embed_tokens.weight":
                out["embed.weight"] = value
            elif key == "model.norm.weight":
                out["norm.weight"] = value
            elif key == "lm_head.weight":
                if not tied:
                    out["lm_head.weight"] = value
            elif not ROTARY.match(key):
                unknown.append(key)
        out.update(kv.stacked())
        if unknown:
            raise FormatError(f"{kind} weights hold tensors zoo's decoder has no place for: "
                              f"{sorted(unknown)[:8]}. Nothing was loaded.")
        if not tied and "lm_head.weight" not in out:
            raise FormatError(f"{kind} weights lack lm_head.weight, and the config does not "
                              "tie it to the embeddings (tie_word_embeddings).")
        return out

    def generation(self, config: dict[str, Any],
                   generation: dict[str, Any]) -> dict[str, Any] | None:
        """transformers' settings, lengths counting the prompt."""
        return generation_settings(config, generation, config.get("model_type", "llama"), decoder_only=True)

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any]):
        """A zoo decoder recipe as LlamaForCausalLM's config.json (Qwen2's with biases on
        q, k and v only, Mistral's with a window, Qwen3's with its queries and keys
        normed), generation_config.json and state dict; what they cannot express is
        refused by name."""
        found = common_problems(recipe, "llama")
        if found and found[0].startswith("architecture"):
            refuse(found, "llama")
        s = recipe["architecture"].get("settings", {})
        _, attention = part(recipe, "attention")
        name, rope = part(recipe, "positional")
        kind, problems = _family_of(attention, rope)
        found += problems
        bias = attention.get("bias", True)
        if name != "rope" or rope.get("layout", "half") != "half":
            found.append(f"positional {name} {rope}: Llama's positions are RoPE, halves paired")
        norm, norm_settings = part(recipe, "norm")
        if norm != "rmsnorm" or norm_settings.get("offset"):
            found.append(f"norm {norm} {norm_settings}: Llama's is RMSNorm, its weight the "
                         "scale itself (no offset)")
        ffn, ffn_settings = part(recipe, "ffn")
        act = {("swiglu", None): "silu", ("geglu", "tanh"): "gelu_pytorch_tanh",
               ("geglu", None): "gelu", ("geglu", "none"): "gelu"}.get(
            (ffn, ffn_settings.get("approximate")))
        if act is None:
            found.append(f"ffn {ffn}: Llama's network is gated (swiglu, geglu)")
        if kind == "qwen3" and attention.get("qk_norm_eps", 1e-6) != norm_settings.get(
                "eps", 1e-6):
            found.append(f"attention qk_norm_eps {attention.get('qk_norm_eps', 1e-6)}: Qwen3's "
                         f"query and key norms take the layers' eps, {norm_settings.get('eps')}")
        refuse(found, "llama")
        heads = s.get("n_heads", 32)
        d = s.get("d_model", 4096)
        config = {
            "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                               "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                               "phi3": "Phi3ForCausalLM"}[kind]],
            "model_type": kind,
            "vocab_size": s["vocab_size"], "hidden_size": d, "num_attention_heads": heads,
            "num_key_value_heads": s.get("n_kv_heads") or heads,
            "head_dim": s.get("head_dim") or d // heads,
            "intermediate_size": s.get("d_ff", 11008), "num_hidden_layers": s.get("layers", 12),
            "hidden_act": act, "max_position_embeddings": s.get("max_len", 1024),
            "rms_norm_eps": norm_settings.get("eps", 1e-6),
            "rope_theta": rope.get("base", 10000.0), "rope_scaling": _scaling(rope),
            "attention_dropout": s.get("attention_dropout", 0.0),
            "tie_word_embeddings": s.get("tie_output", True),
            "bos_token_id": generation["start_id"], "eos_token_id": generation["eos_ids"][0],
        }
        if kind == "llama":
            config.update(attention_bias=bias, mlp_bias=ffn_settings.get("bias", False))
        elif kind == "qwen3":
            config["attention_bias"] = bias
        if kind != "llama" and ffn_settings.get("bias", False):
            raise FormatError(f"this model cannot be written as {kind}: its feed-forward "
                              f"network has biases, which {kind}'s has not")
        if kind in ("mistral", "phi3"):
            config["sliding_window"] = attention.get("window")
        if kind == "phi3":
            config.update(partial_rotary_factor=rope["fraction"], pad_token_id=s.get("pad_id"),
                          resid_pdrop=s.get("dropout", 0.0), embd_pdrop=0.0)
        return config, generation_json(generation, decoder_only=True), _to_llama(state, config)


def _family_of(attention: dict[str, Any], rope: dict[str, Any]) -> tuple[str, list[str]]:
    """Which of the Llama layout's transformers families writes a model of these
    attention and rope settings (Qwen3: normed queries and keys; Qwen2: biases on q, k
    and v only; Phi-3: a share of each head rotated; Mistral: a window; else Llama), and
    what that family cannot express of them."""
    bias, out_bias = attention.get("bias", True), attention.get("out_bias")
    out_bias = bias if out_bias is None else out_bias
    kind = "qwen3" if attention.get("qk_norm") else "qwen2" if (bias, out_bias) == (
        True, False) else "phi3" if rope.get("fraction", 1.0) < 1 else "mistral" if (
        attention.get("window")) else "llama"
    found = []
    if kind != "qwen2" and bias != out_bias:
        found.append(f"attention {attention}: Llama's projections all have biases or none")
    if kind in ("qwen2", "qwen3") and attention.get("window"):
        found.append(f"attention window with {kind}'s layout: transformers' {kind} slides "
                     "only over its upper layers")
    if rope.get("fraction", 1.0) < 1 and kind != "phi3":
        found.append(f"positional rope fraction {rope['fraction']} with {kind}'s layout: "
                     "of transformers' Llama family, Phi-3 alone rotates a share of a head")
    if kind == "phi3" and bias:
        found.append(f"attention {attention}: Phi-3's projections have no biases")
    return kind, found


def _unfused(config: dict[str, Any], i: str, proj: str, part: str,
             value: torch.Tensor) -> dict[str, torch.Tensor]:
    """Phi-3's ``qkv_proj`` as zoo's ``q_proj`` and ``kv_proj`` (its rows: every query
    head's, then the keys', then the values'), or its ``gate_up_proj`` as ``fc1_g`` and
    ``fc1_x``; a matrix of another height refused by name."""
    if proj == "gate_up":
        if value.shape[0] % 2:
            raise FormatError(f"phi3 layer {i}'s gate_up_proj has {value.shape[0]} rows; it "
                              "stacks the gate's and the up projection's, as many each")
        gate, up = value.chunk(2, dim=0)
        return {f"layers.{i}.ffn.fc1_g.{part}": gate, f"layers.{i}.ffn.fc1_x.{part}": up}
    heads = config.get("num_attention_heads") or 32
    kv_heads = config.get("num_key_value_heads") or heads
    width = config.get("head_dim") or (config.get("hidden_size") or 3072) // heads
    queries = heads * width
    if value.shape[0] != queries + 2 * kv_heads * width:
        raise FormatError(f"phi3 layer {i}'s qkv_proj has {value.shape[0]} rows; its config "
                          f"asks for {queries} of queries and {kv_heads * width} each of keys "
                          "and values. Nothing was loaded.")
    return {f"layers.{i}.attn.q_proj.{part}": value[:queries],
            f"layers.{i}.attn.kv_proj.{part}": value[queries:]}


def _fused(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with each layer's q_proj and kv_proj as one ``attn.qkv_proj``, and its
    fc1_g and fc1_x as one ``ffn.gate_up_proj``: :func:`_unfused` backwards."""
    out = dict(state)
    for key in state:
        match = re.match(r"^layers\.(\d+)\.attn\.q_proj\.weight$", key)
        if match:
            i = match.group(1)
            out[f"layers.{i}.attn.qkv_proj.weight"] = torch.cat(
                [out.pop(key), out.pop(f"layers.{i}.attn.kv_proj.weight")])
            out[f"layers.{i}.ffn.gate_up_proj.weight"] = torch.cat(
                [out.pop(f"layers.{i}.ffn.fc1_g.weight"), out.pop(f"layers.{i}.ffn.fc1_x.weight")])
    return out


def _scaling(rope: dict[str, Any]) -> dict[str, Any] | None:
    """The rope component's scaling as ``rope_scaling``."""
    scaling = rope.get("scaling", "none")
    if scaling == "none":
        return None
    if scaling == "linear":
        return {"rope_type": "linear", "factor": rope.get("factor", 1.0)}
    return {"rope_type": "llama3", "factor": rope.get("factor", 1.0),
            "low_freq_factor": rope.get("low_freq_factor", 1.0),
            "high_freq_factor": rope.get("high_freq_factor", 4.0),
            "original_max_position_embeddings": rope.get("original_max_len", 8192)}


def _to_llama(state: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """zoo's decoder state dict in Llama's names (kv_proj split into k_proj and v_proj;
    Phi-3's q, k and v in qkv_proj, its gate and up in gate_up_proj)."""
    if config["model_type"] == "phi3":
        state = _fused(state)
    back = {v: k for k, v in PROJ.items()}

    def layer(i: str, name: str, kind: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
        if name in ("norm1", "norm2"):
            which = "input_layernorm" if name == "norm1" else "post_attention_layernorm"
            return {f"model.layers.{i}.{which}.{kind}": value}
        if name in ("attn.q_norm", "attn.k_norm"):  # Qwen3's
            return {f"model.layers.{i}.self_attn.{name[5:]}.{kind}": value}
        if name in ("attn.qkv_proj", "ffn.gate_up_proj"):  # Phi-3's, fused by _fused
            module = "self_attn" if name.startswith("attn.") else "mlp"
            return {f"model.layers.{i}.{module}.{name.split('.')[1]}.{kind}": value}
        if name == "attn.kv_proj":
            return unstacked(value, f"model.layers.{i}.self_attn.k_proj.{kind}",
                             f"model.layers.{i}.self_attn.v_proj.{kind}")
        module = "self_attn" if name.startswith("attn.") else "mlp"
        return {f"model.layers.{i}.{module}.{back[name]}_proj.{kind}": value}

    top = {"embed.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"}
    return to_family(state, top, config["tie_word_embeddings"], layer)
