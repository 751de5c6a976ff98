"""transformers' GPT-2 (Radford et al. 2019, ``GPT2LMHeadModel``): gpt2, gpt2-medium,
-large, -xl, distilgpt2 and the models fine-tuned from them.

GPT-2 in zoo's components: the ``decoder`` architecture, learned positions that count
the real tokens (as transformers' ``generate`` numbers a left-padded prompt), pre-norm
LayerNorm with a final norm, a tanh-GELU network, biases everywhere, an output tied to
the embeddings. transformers keeps GPT-2's projections as ``Conv1D`` (the weight
transposed, queries, keys and values in one ``c_attn``); zoo's are linear layers with
``q_proj`` and ``kv_proj``.

| transformers | zoo |
|---|---|
| transformer.wte, wpe | embed, positional |
| transformer.h.i.ln_1, ln_2 | layers.i.norm1, norm2 |
| transformer.h.i.attn.c_attn (q, k, v), c_proj | layers.i.attn.q_proj, kv_proj, out_proj |
| transformer.h.i.mlp.c_fc, c_proj | layers.i.ffn.fc1, fc2 |
| transformer.ln_f | norm |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import (DECODER_FLAGS, Format, FormatError, generation_json,
                            generation_settings)

from ._decoder import ACTIVATIONS, common_problems, part, refuse, to_family

TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json")
INERT = {"summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
         "summary_first_dropout", "reorder_and_upcast_attn", "n_ctx"}
"""The sequence-summary head of GPT2DoubleHeadsModel (not the language model's), and the
upcast of attention's scores (zoo computes them in fp32 there anyway)."""
LAYER = re.compile(r"^(?:transformer\.)?h\.(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|"
                   r"mlp\.c_fc|mlp\.c_proj)\.(weight|bias)$")
NAMES = {"ln_1": "norm1", "ln_2": "norm2", "attn.c_proj": "attn.out_proj",
         "mlp.c_fc": "ffn.fc1", "mlp.c_proj": "ffn.fc2"}
MASKS = re.compile(r"^(?:transformer\.)?h\.\d+\.attn\.(bias|masked_bias)$")
"""The causal-mask buffers older checkpoints saved (no weights)."""


class GPT2Format(Format):
    """Reads transformers' GPT-2 folders, and writes zoo's decoder models that GPT-2
    expresses (``zoo export --format transformers``)."""

    family = "gpt2"
    files = TOKENIZER_FILES
    legacy = frozenset(INERT)
    example = {"model_type": "gpt2", "n_embd": 16, "n_layer": 2, "n_head": 2,
               "vocab_size": 32, "n_positions": 64, "bos_token_id": 1, "eos_token_id": 2}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = self.options(config)
        d_model = options.get("n_embd", 768)
        act = options.need("activation_function", tuple(ACTIVATIONS), "gelu_new")
        options.need("scale_attn_weights", True, True, "softmax(q·k / sqrt(d_k))")
        options.need("scale_attn_by_inverse_layer_idx", False, False,
                     "the same scale in every layer")
        options.need("add_cross_attention", False, False, "a decoder-only model")
        ffn, ffn_settings = ACTIVATIONS[act]
        layers = options.get("n_layer", 12)
        layers = options.get("num_hidden_layers", layers)  # transformers' alias, which wins
        eos = options.get("eos_token_id", 50256)
        bos = options.get("bos_token_id", eos)
        # null: 4 x n_embd; 0 is a width, not unset
        inner = options.count("n_inner", "a feed-forward width of at least 1, or null for "
                              "4 x n_embd")
        settings = {
            "vocab_size": options.get("vocab_size", 50257), "d_model": d_model,
            "n_heads": options.get("n_head", 12),
            "d_ff": 4 * d_model if inner is None else inner,
            "layers": layers,
            "dropout": options.get("resid_pdrop", 0.1),
            "attention_dropout": options.get("attn_pdrop", 0.1),
            "max_len": options.get("n_positions", 1024), "norm_placement": "pre",
            "final_norm": True, "tie_output": options.get("tie_word_embeddings", True),
            "output_bias": False, "bos_id": bos, "eos_id": eos[0] if isinstance(eos, list)
            else eos,
        }
        if options.get("embd_pdrop", settings["dropout"]) != settings["dropout"]:
            raise options.refuse("embd_pdrop", config["embd_pdrop"],
                                 "one dropout on the embeddings and the residuals "
                                 f"(resid_pdrop={settings['dropout']})")
        eps = options.get("layer_norm_epsilon", 1e-5)
        options.done(self.legacy | DECODER_FLAGS)
        return {
            "name": "gpt2",
            "description": "A GPT-2 model imported from its transformers folder.",
            "architecture": {"name": "decoder", "settings": settings},
            "components": {
                "attention": "vanilla", "kernel": "sdpa",
                "positional": {"name": "learned", "settings": {"count": "real"}},
                "norm": {"name": "layernorm", "settings": {"eps": eps}},
                "ffn": {"name": ffn, "settings": ffn_settings}, "block": "causal",
            },
        }

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """The output and the embeddings, unless ``tie_word_embeddings`` is false."""
        if config.get("tie_word_embeddings", True) is False:
            return []
        return [("lm_head.weight", "transformer.wte.weight"), ("lm_head.weight", "wte.weight")]

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        d = config.get("n_embd", 768)
        tied = config.get("tie_word_embeddings", True) is not False
        out: dict[str, torch.Tensor] = {}
        unknown = []
        for key, value in state.items():
            match = LAYER.match(key)
            if match:
                i, part, kind = match.groups()
                # Conv1D keeps (in, out); a linear layer (out, in)
                value = value.t().contiguous() if kind == "weight" and "ln" not in part else value
                if part == "attn.c_attn":
                    if value.shape[0] != 3 * d:
                        raise FormatError(f"gpt2 weights: {key} has {value.shape[0]} outputs, "
                                          f"not 3 x n_embd = {3 * d}.")
                    out[f"layers.{i}.attn.q_proj.{kind}"] = value[:d]
                    out[f"layers.{i}.attn.kv_proj.{kind}"] = value[d:]
                else:
                    out[f"layers.{i}.{NAMES[part]}.{kind}"] = value
            elif MASKS.match(key):
                continue
            elif key in ("transformer.wte.weight", "wte.weight"):
                out["embed.weight"] = value
            elif key in ("transformer.wpe.weight", "wpe.weight"):
                out["positional.weight"] = value
            elif key in ("transformer.ln_f.weight", "ln_f.weight", "transformer.ln_f.bias",
                         "ln_f.bias"):
                out[f"norm.{key.rsplit('.', 1)[1]}"] = value
            elif key == "lm_head.weight":
                if not tied:
                    out["lm_head.weight"] = value
            else:
                unknown.append(key)
        if unknown:
            raise FormatError(f"gpt2 weights hold tensors zoo's decoder has no place for: "
                              f"{sorted(unknown)[:8]}. Nothing was loaded.")
        if not tied and "lm_head.weight" not in out and "embed.weight" in out:
            out["lm_head.weight"] = out["embed.weight"].clone()
        return out

    def generation(self, config: dict[str, Any],
                   generation: dict[str, Any]) -> dict[str, Any] | None:
        """transformers' settings, lengths counting the prompt (20 tokens in all unless
        the files say otherwise, as transformers' default)."""
        return generation_settings(config, generation, self.family, decoder_only=True)

    def export(self, recipe: dict[str, Any], state: dict[str, torch.Tensor],
               generation: dict[str, Any]):
        """A zoo decoder recipe as GPT2LMHeadModel's config.json, generation_config.json
        and state dict; what GPT-2 cannot express is refused by name."""
        found = common_problems(recipe, "gpt2")
        if found and found[0].startswith("architecture"):
            refuse(found, "gpt2")
        s = recipe["architecture"].get("settings", {})
        for key in ("n_kv_heads", "head_dim"):
            if s.get(key) not in (None, s.get("n_heads") if key == "n_kv_heads" else None):
                found.append(f"{key} {s[key]!r}: GPT-2's heads are n_embd / n_head, one "
                             "key/value head each")
        name, settings = part(recipe, "attention")
        if settings.get("bias") is False or settings.get("out_bias") is False \
                or settings.get("window") or settings.get("qk_norm"):
            found.append(f"attention {settings}: GPT-2's has biases, sees every key and norms "
                         "no query or key")
        name, settings = part(recipe, "positional")
        if name != "learned" or settings.get("offset", 0):
            found.append(f"positional {name} {settings}: GPT-2's positions are learned, "
                         "from row 0")
        norm, norm_settings = part(recipe, "norm")
        if norm != "layernorm" or norm_settings.get("bias") is False:
            found.append(f"norm {norm} {norm_settings}: GPT-2's is a LayerNorm with a bias")
        ffn, ffn_settings = part(recipe, "ffn")
        tanh = ffn_settings.get("approximate") == "tanh"
        wanted = (ffn, {"approximate": "tanh"} if tanh else {})
        activation = next((act for act, zoo_ffn in ACTIVATIONS.items() if zoo_ffn == wanted),
                          None)
        if activation is None or ffn_settings.get("bias") is False:
            found.append(f"ffn {ffn} {ffn_settings}: GPT-2's network is one activation "
                         f"({', '.join(sorted(ACTIVATIONS))}) between two biased layers")
        refuse(found, "gpt2")
        d = s.get("d_model", 768)
        config = {
            "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": s["vocab_size"], "n_embd": d, "n_head": s.get("n_heads", 12),
            "n_layer": s.get("layers", 12), "n_inner": s.get("d_ff", 3072),
            "n_positions": s.get("max_len", 1024), "activation_function": activation,
            "resid_pdrop": s.get("dropout", 0.1), "embd_pdrop": s.get("dropout", 0.1),
            "attn_pdrop": s.get("attention_dropout", 0.0),
            "layer_norm_epsilon": norm_settings.get("eps", 1e-5),
            "tie_word_embeddings": s.get("tie_output", True),
            "bos_token_id": generation["start_id"], "eos_token_id": generation["eos_ids"][0],
        }
        return config, generation_json(generation, decoder_only=True), _to_gpt2(state, d, config)


def _to_gpt2(state: dict[str, torch.Tensor], d: int, config: dict) -> dict[str, torch.Tensor]:
    """zoo's decoder state dict in GPT-2's names (linear weights as Conv1D's, q, k and v
    in one c_attn)."""
    back = {v: k for k, v in NAMES.items()}

    def layer(i: str, name: str, kind: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
        if name == "attn.kv_proj":
            return {}
        if name == "attn.q_proj":
            value = torch.cat([value, state[f"layers.{i}.attn.kv_proj.{kind}"]])
            name = "attn.c_attn"
        else:
            name = back[name]
        if kind == "weight" and "ln" not in name:
            value = value.t()
        return {f"transformer.h.{i}.{name}.{kind}": value.contiguous()}

    top = {"embed.weight": "transformer.wte.weight", "positional.weight":
           "transformer.wpe.weight", "norm.weight": "transformer.ln_f.weight",
           "norm.bias": "transformer.ln_f.bias"}
    return to_family(state, top, config["tie_word_embeddings"], layer)
