"""A zoo ``seq2seq`` model written back as transformers' Marian (``zoo export --format
transformers``): the paper's base Transformer is a Marian model once its sinusoids
are laid out as Marian's.

zoo's default sinusoids interleave sin and cos (the paper's equation); Marian's put
all sines first. Every operation of the model treats the d_model features alike
(embeddings, projections, LayerNorm), so permuting those features in every weight
turns one layout into the other exactly: feature 2i becomes i, 2i + 1 becomes
d/2 + i. What Marian cannot express (pre-norm, another norm or eps, positions
inside attention, ...) is refused by name.
"""

from __future__ import annotations

from typing import Any

import torch

from zoo.plugin_api import FormatError

ACTIVATIONS = {("relu", None): "relu", ("silu", None): "swish", ("gelu", "none"): "gelu",
               ("gelu", None): "gelu", ("gelu", "tanh"): "gelu_new"}
IN_WIDTH = ("embed.weight", "lm_head.weight", "q_proj.weight", "kv_proj.weight",
            "fc1.weight")
"""Tensors whose columns are the model's features (inputs of d_model)."""
OUT_WIDTH = ("out_proj.weight", "fc2.weight")
"""Tensors whose rows are the model's features (outputs of d_model)."""


def problems(recipe: dict[str, Any]) -> list[str]:
    """What keeps a zoo recipe from being a Marian model, one line each."""
    if recipe["architecture"]["name"] != "seq2seq":
        return [f"architecture {recipe['architecture']['name']!r}: Marian is 'seq2seq'"]
    s, parts, found = recipe["architecture"].get("settings", {}), recipe.get("components", {}), []

    def part(slot: str, default: str) -> tuple[str, dict]:
        ref = parts.get(slot, default)
        return (ref, {}) if isinstance(ref, str) else (ref["name"], ref.get("settings", {}))

    for slot in ("attention", "cross_attention"):
        name, settings = part(slot, "vanilla")
        if name != "vanilla" or settings.get("scale") is not None or settings.get(
                "bias") is False or settings.get("qk_norm"):
            found.append(f"{slot} {name} {settings}: Marian's attention is 'vanilla' with "
                         "biases and the paper's scale, its queries and keys not normed")
    name, settings = part("positional", "sinusoidal")
    if name != "sinusoidal" or settings.get("base", 10000.0) != 10000.0:
        found.append(f"positional {name} {settings}: Marian's positions are the paper's "
                     "sinusoids")
    name, settings = part("norm", "layernorm")
    if name != "layernorm" or settings.get("eps", 1e-5) != 1e-5 or settings.get("bias") is False:
        found.append(f"norm {name} {settings}: Marian's norm is a LayerNorm with eps 1e-5 "
                     "(build with norm.eps=1e-5 and train, or fine-tune, with it)")
    name, settings = part("ffn", "relu")
    if (name, settings.get("approximate")) not in ACTIVATIONS or settings.get("bias") is False:
        found.append(f"ffn {name} {settings}: Marian's feed-forward is ReLU, GELU or SiLU "
                     "with biases")
    for slot, default in (("encoder_block", "encoder"), ("decoder_block", "decoder")):
        if part(slot, default)[0] != default:
            found.append(f"{slot} {part(slot, default)[0]!r}: Marian's blocks are zoo's "
                         f"{default!r}")
    for key, fine in (("norm_placement", "post"), ("final_norm", None), ("head_dim", None),
                      ("embedding_norm", False), ("separate_positions", False),
                      ("scale_output", False)):
        if s.get(key, fine) not in (fine, False if fine is None else fine):
            found.append(f"{key} {s[key]!r}: Marian has {fine!r}")
    if s.get("pad_id", 0) is None:
        found.append("pad_id null: Marian needs a pad token")
    if s.get("d_model", 512) % 2:
        found.append(f"d_model {s['d_model']}: Marian's sinusoids need an even width")
    return found


def marian_config(recipe: dict[str, Any], *, start_id: int, eos_id: int) -> dict[str, Any]:
    """transformers' MarianConfig (as config.json) of a zoo recipe Marian can express."""
    found = problems(recipe)
    if found:
        raise FormatError("this model cannot be written as Marian:\n  - " + "\n  - ".join(found))
    s = recipe["architecture"]["settings"]
    ffn = recipe["components"].get("ffn", "relu")
    ffn = (ffn, None) if isinstance(ffn, str) else (ffn["name"], ffn.get("settings", {}).get(
        "approximate"))
    shared = s.get("share_embeddings", True)
    vocab = s["vocab_size"]
    return {
        "architectures": ["MarianMTModel"], "model_type": "marian",
        "vocab_size": vocab if shared else (s.get("src_vocab_size") or vocab),
        "decoder_vocab_size": vocab, "share_encoder_decoder_embeddings": shared,
        "tie_word_embeddings": s.get("tie_output", True),
        "d_model": s.get("d_model", 512), "encoder_layers": s.get("encoder_layers", 6),
        "decoder_layers": s.get("decoder_layers", 6),
        "encoder_attention_heads": s.get("n_heads", 8), "decoder_attention_heads": s.get("n_heads", 8),
        "encoder_ffn_dim": s.get("d_ff", 2048), "decoder_ffn_dim": s.get("d_ff", 2048),
        "activation_function": ACTIVATIONS[ffn], "dropout": s.get("dropout", 0.1),
        "attention_dropout": s.get("attention_dropout", 0.0),
        "activation_dropout": s.get("activation_dropout", 0.0),
        "encoder_layerdrop": s.get("encoder_layerdrop", 0.0),
        "decoder_layerdrop": s.get("decoder_layerdrop", 0.0),
        "max_position_embeddings": s.get("max_len", 1024),
        "scale_embedding": s.get("scale_embeddings", True),
        "pad_token_id": s.get("pad_id", 0), "eos_token_id": eos_id,
        "decoder_start_token_id": start_id, "forced_eos_token_id": eos_id,
        "is_encoder_decoder": True,
    }


def to_concatenated(state: dict[str, torch.Tensor], d_model: int) -> dict[str, torch.Tensor]:
    """``state`` with its d_model features reordered from the interleaved sinusoid layout
    to Marian's [sin | cos]."""
    order = torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])
    out = {}
    for key, value in state.items():
        if key.endswith(IN_WIDTH):
            value = value[:, order]
        elif key.endswith(OUT_WIDTH):
            value = value[order]
        elif value.dim() == 1 and value.shape[0] == d_model and not key.endswith(
                ("q_proj.bias", "kv_proj.bias", "fc1.bias", "lm_head.bias")):
            value = value[order]  # norms, output biases
        out[key] = value
    return out
