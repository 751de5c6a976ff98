"""transformers' M2M100 (``M2M100ForConditionalGeneration``, model_type ``m2m_100``):
facebook/m2m100_418M and _1.2B (Fan et al. 2020) and the NLLB-200 models (NLLB Team
2022), read into zoo's ``seq2seq``.

BART's layout with fairseq's choices, each a zoo component or setting:

- pre-norm, with a final LayerNorm (eps 1e-5) after each stack;
- embeddings scaled by sqrt(d_model) (``scale_embedding``);
- a ReLU feed-forward (``activation_function: relu``);
- one embedding matrix for source and target, tied to the output, no bias on the logits;
- fairseq's sinusoidal positions, this plugin's ``fairseq-sinusoidal`` (first token at
  row pad + 1), one module for both stacks (the table has no parameters).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin import FormatError

from .generation import generation_settings
from .options import ConfigOptions

FAMILY = "nllb"
TOKENIZER_FILES = ("sentencepiece.bpe.model", "spm.model", "vocab.json", "tokenizer.json",
                   "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
"""NLLB's (SentencePiece model, tokenizer.json) and M2M100's (vocab.json, SentencePiece
model) tokenizer files."""

LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.(\d+)\.(\w+?)(?:\.(q_proj|k_proj|v_proj|"
                   r"out_proj))?\.(weight|bias)$")
SUBLAYERS = {
    "encoder": {"self_attn": "attn", "self_attn_layer_norm": "norm1", "final_layer_norm": "norm2",
                "fc1": "ffn.fc1", "fc2": "ffn.fc2"},
    "decoder": {"self_attn": "self_attn", "encoder_attn": "cross_attn",
                "self_attn_layer_norm": "norm1", "encoder_attn_layer_norm": "norm2",
                "final_layer_norm": "norm3", "fc1": "ffn.fc1", "fc2": "ffn.fc2"},
}
ATTENTIONS = {"self_attn", "encoder_attn"}
EMBEDDINGS = ("model.shared.weight", "lm_head.weight", "model.decoder.embed_tokens.weight",
              "model.encoder.embed_tokens.weight")
"""The one shared matrix under each of its names, the first present taken (a file keeps
it under one or more of them; the model ties them all)."""
COMPUTED = re.compile(r"^model\.(encoder|decoder)\.embed_positions\.(weights|_float_tensor)$")
"""Sinusoid tables some older files hold: zoo computes them."""


class NLLBFormat:
    """Reads transformers' M2M100 / NLLB-200 folders."""

    files = TOKENIZER_FILES

    def __init__(self, settings: None = None) -> None:
        pass

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        """The zoo recipe of an M2M100 config; an option zoo cannot express is refused by
        name (``FormatError``)."""
        options = ConfigOptions(config, FAMILY)
        vocab = options.integer("vocab_size", 128112)
        d_model = options.integer("d_model", 1024, low=4)
        heads = options.integer("encoder_attention_heads", 16)
        options.need("decoder_attention_heads", heads, 16, "one head count for both stacks")
        if d_model % heads:
            raise options.refuse("encoder_attention_heads", heads,
                                 f"a head count that divides d_model {d_model}")
        d_ff = options.integer("encoder_ffn_dim", 4096)
        options.need("decoder_ffn_dim", d_ff, 4096, "one feed-forward width for both stacks")
        encoder_layers = options.integer("encoder_layers", 12, low=0)
        decoder_layers = options.integer("decoder_layers", 12)
        options.need("num_hidden_layers", encoder_layers, encoder_layers,
                     "transformers' other name of encoder_layers")
        options.need("activation_function", "relu", "relu",
                     "M2M100's feed-forward is ReLU; this plugin maps no other")
        options.need("tie_word_embeddings", True, True,
                     "the output tied to the shared embeddings")
        pad = options.get("pad_token_id", 1)
        if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < vocab:
            raise options.refuse("pad_token_id", pad, f"a token id below vocab_size {vocab} "
                                 "(the positions start after it)")
        max_len = options.integer("max_position_embeddings", 1024)
        settings = {
            "vocab_size": vocab, "d_model": d_model, "n_heads": heads, "d_ff": d_ff,
            "encoder_layers": encoder_layers, "decoder_layers": decoder_layers,
            "dropout": options.rate("dropout", 0.1),
            "attention_dropout": options.rate("attention_dropout", 0.1),
            "activation_dropout": options.rate("activation_dropout", 0.0),
            "encoder_layerdrop": options.rate("encoder_layerdrop", 0.05),
            "decoder_layerdrop": options.rate("decoder_layerdrop", 0.05),
            "max_len": max_len,
            "norm_placement": "pre", "final_norm": True,
            "share_embeddings": True, "tie_output": True,
            "scale_embeddings": options.flag("scale_embedding", True),
            "embedding_norm": False, "output_bias": False,
            "pad_id": pad,
        }
        options.done()
        return {
            "name": "nllb",
            "description": "An M2M100 / NLLB-200 model imported from its transformers folder.",
            "architecture": {"name": "seq2seq", "settings": settings},
            "components": {
                "attention": "vanilla", "cross_attention": "vanilla", "kernel": "sdpa",
                "positional": {"name": "fairseq-sinusoidal", "settings": {"padding_idx": pad}},
                "norm": {"name": "layernorm", "settings": {"eps": 1e-5}},
                "ffn": "relu",
                "encoder_block": "encoder", "decoder_block": "decoder",
            },
        }

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """M2M100's tensors in zoo's names: k_proj and v_proj stacked into kv_proj, the
        shared matrix once, the sinusoid tables dropped; a tensor with no place in zoo's
        seq2seq is refused by name."""
        out: dict[str, torch.Tensor] = {}
        kv: dict[str, dict[str, torch.Tensor]] = {}
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                stack, i, sub, proj, kind = match.groups()
                name = SUBLAYERS[stack].get(sub)
                if name is None or (proj is None) == (sub in ATTENTIONS):
                    unknown.append(key)
                elif proj in ("k_proj", "v_proj"):
                    kv.setdefault(f"{stack}.layers.{i}.{name}.kv_proj.{kind}", {})[proj] = value
                else:
                    out[f"{stack}.layers.{i}.{name}.{proj + '.' if proj else ''}{kind}"] = value
            elif key in EMBEDDINGS or COMPUTED.match(key):
                continue
            elif key in ("model.encoder.layer_norm.weight", "model.encoder.layer_norm.bias",
                         "model.decoder.layer_norm.weight", "model.decoder.layer_norm.bias"):
                _, stack, _, kind = key.split(".")
                out[f"{stack}.norm.{kind}"] = value
            else:
                unknown.append(key)
        if unknown:
            raise FormatError(f"{FAMILY} weights hold tensors zoo's seq2seq has no place for: "
                              f"{sorted(unknown)[:8]}. Nothing was loaded.")
        embedding = next((state[k] for k in EMBEDDINGS if k in state), None)
        if embedding is None:
            raise FormatError(f"{FAMILY} weights hold no embedding matrix (one of "
                              f"{list(EMBEDDINGS)}). Nothing was loaded.")
        out["tgt_embed.weight"] = embedding
        for name, pair in kv.items():
            if set(pair) != {"k_proj", "v_proj"}:
                missing = ({"k_proj", "v_proj"} - set(pair)).pop()
                raise FormatError(f"{FAMILY} weights: {name} lacks its {missing}.")
            out[name] = torch.cat([pair["k_proj"], pair["v_proj"]], dim=0)
        return out

    def generation(self, config: dict[str, Any], generation: dict[str, Any]) -> dict[str, Any]:
        """The folder's generation settings as zoo's ``GenerationSettings`` data."""
        return generation_settings(config, generation, FAMILY)
