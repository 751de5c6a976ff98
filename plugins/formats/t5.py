"""transformers' T5 (Raffel et al. 2020, ``T5ForConditionalGeneration``): the original
T5, T5 v1.1 and Flan-T5 (Chung et al. 2022).

T5 in zoo's components: no absolute positions but a bucketed relative bias computed
in each stack's first layer and shared by all its layers (``t5-bias``), RMSNorm
without a mean and pre-norm with a final norm, no 1/sqrt(d_k) (``scale: 1.0``), no
biases anywhere, heads whose width ``d_kv`` need not be d_model / heads, a ReLU
feed-forward (T5) or gated-GELU (v1.1, Flan: ``geglu`` with the tanh GELU), and an
output tied to the embeddings and rescaled by d_model^-0.5 (T5) or untied (v1.1,
Flan).
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import DECODER_FLAGS, Format, FormatError, Options

from ._kv import KeysValues, finish

FFN = {"relu": ("relu", {"bias": False}), "gelu": ("gelu", {"bias": False}),
       "gated-gelu": ("geglu", {"approximate": "tanh"}), "gated-silu": ("swiglu", {})}
TOKENIZER_FILES = ("spiece.model", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
LEGACY = {"n_positions", "dense_act_fn", "is_gated_act"}
ATTENTION = {"q": "q_proj", "o": "out_proj"}
LAYER = re.compile(r"^(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(\w+)\.(\w+)\.weight$")
NORM = re.compile(r"^(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.layer_norm\.weight$")


def _untied(options: Options) -> bool:
    """v1.1 and Flan: configs of transformers 4 say tie_word_embeddings false; those of
    transformers 5 say scale_decoder_outputs false."""
    return (options.get("tie_word_embeddings", True) is False
            or options.get("scale_decoder_outputs", True) is False)


class T5Format(Format):
    """Reads transformers' T5 folders."""

    family = "t5"
    files = TOKENIZER_FILES

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = Options(config, "t5")
        d_model, heads, d_kv = (options.get("d_model", 512), options.get("num_heads", 8),
                                options.get("d_kv", 64))
        proj = options.need("feed_forward_proj", tuple(FFN), "relu",
                            "T5's, v1.1's and Flan's feed-forwards")
        options.need("is_encoder_decoder", True, True, "zoo imports the encoder-decoder T5")
        untied = _untied(options)
        settings = {
            "vocab_size": options.get("vocab_size", 32128), "d_model": d_model,
            "n_heads": heads, "head_dim": None if d_kv * heads == d_model else d_kv,
            "d_ff": options.get("d_ff", 2048), "encoder_layers": options.get("num_hidden_layers", options.get("num_layers", 6)),
            # transformers maps num_hidden_layers onto num_layers after the decoder's
            # default was taken from num_layers as written
            "decoder_layers": options.get("num_decoder_layers", options.get("num_layers", 6)),
            "dropout": options.get("dropout_rate", 0.1), "norm_placement": "pre",
            "final_norm": True, "share_embeddings": True, "tie_output": not untied,
            "scale_output": not untied, "scale_embeddings": False,
            "pad_id": options.get("pad_token_id", 0),
        }
        bias = {"num_buckets": options.get("relative_attention_num_buckets", 32),
                "max_distance": options.get("relative_attention_max_distance", 128)}
        attention = {"name": "vanilla", "settings": {"bias": False, "scale": 1.0}}
        name, ffn = FFN[proj]
        eps = options.get("layer_norm_epsilon", 1e-6)
        options.done(LEGACY | DECODER_FLAGS)
        return {
            "name": "t5",
            "description": "A T5 model imported from its transformers folder.",
            "architecture": {"name": "seq2seq", "settings": settings},
            "components": {
                "attention": attention, "cross_attention": attention, "kernel": "sdpa",
                "positional": {"name": "t5-bias", "settings": bias},
                "norm": {"name": "rmsnorm",
                         "settings": {"eps": eps}},
                "ffn": {"name": name, "settings": ffn},
                "encoder_block": "encoder", "decoder_block": "decoder",
            },
        }

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """Each stack's embeddings and the shared matrix; the output too, unless untied."""
        pairs = [("encoder.embed_tokens.weight", "shared.weight"),
                 ("decoder.embed_tokens.weight", "shared.weight")]
        return pairs if _untied(Options(config, "t5")) else [
            *pairs, ("lm_head.weight", "shared.weight")]

    def weights(self, state: dict[str, torch.Tensor], config: dict[str, Any]) -> dict[str, torch.Tensor]:
        untied = _untied(Options(config, "t5"))
        gated = config.get("feed_forward_proj", "relu").startswith("gated")
        out: dict[str, torch.Tensor] = {}
        kv = KeysValues("t5", ("k", "v"))
        unknown = []
        for key, value in state.items():
            match, norm = LAYER.match(key), NORM.match(key)
            if norm:
                stack, i, sub = norm.groups()
                out[f"{stack}.layers.{i}.norm{int(sub) + 1}.weight"] = value
            elif match:
                stack, i, sub, module, proj = match.groups()
                attn = {"SelfAttention": "attn" if stack == "encoder" else "self_attn",
                        "EncDecAttention": "cross_attn"}.get(module)
                if attn and proj in ATTENTION:
                    out[f"{stack}.layers.{i}.{attn}.{ATTENTION[proj]}.weight"] = value
                elif attn and proj in ("k", "v"):
                    kv.add(f"{stack}.layers.{i}.{attn}.kv_proj.weight", proj, value)
                elif attn and proj == "relative_attention_bias" and i == "0":
                    out[f"{stack}.layers.0.{attn}.positional.relative_attention_bias.weight"] = value
                elif module == "DenseReluDense" and proj in ("wi", "wo", "wi_0", "wi_1"):
                    ffn = {"wi": "fc1", "wo": "fc2", "wi_0": "fc1_g", "wi_1": "fc1_x"}[proj]
                    if (proj == "wi" and gated) or (proj in ("wi_0", "wi_1") and not gated):
                        unknown.append(key)  # a feed-forward of the other kind
                    out[f"{stack}.layers.{i}.ffn.{ffn}.weight"] = value
                else:
                    unknown.append(key)
            elif key in ("encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight"):
                out[f"{key.split('.')[0]}.norm.weight"] = value
            elif key == "shared.weight":
                out["tgt_embed.weight"] = value
            elif key in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
                continue  # the shared matrix, stored again
            elif key == "lm_head.weight":
                if untied:  # tied: the shared matrix, stored again (checked by tied())
                    out["lm_head.weight"] = value
            else:
                unknown.append(key)
        return finish(out, kv, unknown, untied=untied)

