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

from zoo.plugin_api import Format, FormatError

from ._decoder import ACTIVATIONS, decoder_generation

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
    """Reads transformers' GPT-2 folders."""

    family = "gpt2"
    files = TOKENIZER_FILES
    legacy = frozenset(INERT)

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        options = self.options(config)
        d_model = options.get("n_embd", 768)
        act = options.need("activation_function", tuple(ACTIVATIONS), "gelu_new")
        options.need("scale_attn_weights", True, True, "softmax(q·k / sqrt(d_k))")
        options.need("scale_attn_by_inverse_layer_idx", False, False,
                     "the same scale in every layer")
        options.need("add_cross_attention", False, False, "a decoder-only model")
        ffn, ffn_settings = ACTIVATIONS[act]
        eos = options.get("eos_token_id", 50256)
        bos = options.get("bos_token_id", eos)
        settings = {
            "vocab_size": options.get("vocab_size", 50257), "d_model": d_model,
            "n_heads": options.get("n_head", 12),
            "d_ff": options.get("n_inner") or 4 * d_model,
            "layers": options.get("n_layer", 12),
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
        options.done(self.legacy)
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
        return decoder_generation(config, generation, self.family)
