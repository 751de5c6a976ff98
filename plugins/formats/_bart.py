"""The weight layout that transformers' BART, mBART and Marian share, and zoo's.

transformers keeps separate q, k and v projections; zoo's attention has ``q_proj`` and
``kv_proj`` (keys then values), so k and v are stacked on the way in and split on the
way out. Everything else is a rename:

| transformers | zoo |
|---|---|
| model.shared / encoder.embed_tokens / decoder.embed_tokens | tgt_embed / src_embed |
| encoder.layers.i.self_attn, self_attn_layer_norm, fc1, fc2, final_layer_norm | encoder.layers.i.attn, norm1, ffn.fc1, ffn.fc2, norm2 |
| decoder.layers.i.self_attn, encoder_attn, fc1, fc2 | decoder.layers.i.self_attn, cross_attn, ffn.fc1, ffn.fc2 |
| decoder.layers.i.self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm | norm1, norm2, norm3 |
| encoder/decoder.layernorm_embedding, layer_norm | encoder/decoder.embed_norm, norm |
| encoder/decoder.embed_positions (learned) | src_positional / positional |
| lm_head, final_logits_bias | lm_head.weight, lm_head.bias |
"""

from __future__ import annotations

import re
from typing import Any

import torch

from zoo.plugin_api import DECODER_FLAGS, Format, Options

from ._kv import KeysValues, finish, unstacked

ACTIVATIONS = {"swish": ("silu", {}), "silu": ("silu", {}), "relu": ("relu", {}),
               "gelu": ("gelu", {}), "gelu_new": ("gelu", {"approximate": "tanh"}),
               "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"})}

LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.(\d+)\.(\w+)\.(?:(\w+)\.)?(weight|bias)$")
SUBLAYERS = {
    "encoder": {"self_attn": "attn", "self_attn_layer_norm": "norm1",
                "final_layer_norm": "norm2", "fc1": "ffn.fc1", "fc2": "ffn.fc2"},
    "decoder": {"self_attn": "self_attn", "encoder_attn": "cross_attn",
                "self_attn_layer_norm": "norm1", "encoder_attn_layer_norm": "norm2",
                "final_layer_norm": "norm3", "fc1": "ffn.fc1", "fc2": "ffn.fc2"},
}
STACK = {"layernorm_embedding": "embed_norm", "layer_norm": "norm"}
POSITIONS = {"encoder": "src_positional.weight", "decoder": "positional.weight"}
ZOO_LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.(\w+(?:\.fc[12])?)\.(?:(\w+)\.)?"
                       r"(weight|bias)$")


def to_zoo(state: dict[str, torch.Tensor], *, shared: bool, tied: bool, learned_positions: bool,
           family: str) -> dict[str, torch.Tensor]:
    """A BART-layout state dict in zoo's names; a tensor with no place in zoo is refused."""
    out: dict[str, torch.Tensor] = {}
    kv = KeysValues(family, ("k_proj", "v_proj"))
    unknown = []
    for key, value in state.items():
        match = LAYER.match(key)
        if match:
            stack, i, sub, proj, kind = match.groups()
            name = SUBLAYERS[stack].get(sub)
            if name is None:
                unknown.append(key)
            elif proj in ("k_proj", "v_proj"):
                kv.add(f"{stack}.layers.{i}.{name}.kv_proj.{kind}", proj, value)
            else:
                out[f"{stack}.layers.{i}.{name}.{proj + '.' if proj else ''}{kind}"] = value
            continue
        parts = key.split(".")
        if key in ("model.shared.weight", "model.decoder.embed_tokens.weight"):
            if key == "model.shared.weight" or not shared:
                out["tgt_embed.weight"] = value
        elif key == "model.encoder.embed_tokens.weight":
            if not shared:
                out["src_embed.weight"] = value
        elif len(parts) == 4 and parts[2] == "embed_positions":
            if learned_positions:
                out[POSITIONS[parts[1]]] = value
        elif len(parts) == 4 and parts[2] in STACK:
            out[f"{parts[1]}.{STACK[parts[2]]}.{parts[3]}"] = value
        elif key == "lm_head.weight":
            if not tied:
                out["lm_head.weight"] = value
        elif key == "final_logits_bias":
            out["lm_head.bias"] = value.reshape(-1)
        else:
            unknown.append(key)
    return finish(out, kv, unknown, untied=not tied)


def from_zoo(state: dict[str, torch.Tensor], *, shared: bool, tied: bool) -> dict[str, torch.Tensor]:
    """zoo's seq2seq state dict (computed positions, no embedding norm) in the BART
    layout Marian's transformers class reads: :func:`to_zoo` backwards."""
    back = {stack: {v: k for k, v in subs.items()} for stack, subs in SUBLAYERS.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        match = ZOO_LAYER.match(key)
        if match:
            stack, i, name, proj, kind = match.groups()
            base = f"model.{stack}.layers.{i}.{back[stack][name]}"
            if proj == "kv_proj":
                out.update(unstacked(value, f"{base}.k_proj.{kind}", f"{base}.v_proj.{kind}"))
            else:
                out[f"{base}.{proj + '.' if proj else ''}{kind}"] = value
        elif key == "tgt_embed.weight":
            out["model.shared.weight" if shared else "model.decoder.embed_tokens.weight"] = value
        elif key == "src_embed.weight" and not shared:
            out["model.encoder.embed_tokens.weight"] = value
        elif key == "lm_head.weight" and not tied:
            out["lm_head.weight"] = value
        elif key == "lm_head.bias":
            out["final_logits_bias"] = value[None]
    out.setdefault("final_logits_bias", torch.zeros(1, state["tgt_embed.weight"].shape[0]))
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def ffn_of(options: Options) -> dict[str, Any]:
    """The ffn slot for ``activation_function``; the encoder and decoder widths must agree."""
    act = options.need("activation_function", tuple(ACTIVATIONS), "gelu",
                       "the activations zoo has as feed-forward components")
    options.need("decoder_ffn_dim", options.get("encoder_ffn_dim", 4096), 4096,
                 "one feed-forward width for both stacks")
    name, settings = ACTIVATIONS[act]
    return {"name": name, "settings": settings}


def stack_sizes(options: Options) -> dict[str, Any]:
    """Widths, heads and layers of a BART-layout config (one head count for both stacks)."""
    heads = options.get("encoder_attention_heads", 16)
    options.need("decoder_attention_heads", heads, 16, "one head count for both stacks")
    return {
        "d_model": options.get("d_model", 1024), "n_heads": heads,
        "d_ff": options.get("encoder_ffn_dim", 4096),
        # transformers maps num_hidden_layers onto encoder_layers, and it wins
        "encoder_layers": options.get("num_hidden_layers", options.get("encoder_layers", 12)),
        "decoder_layers": options.get("decoder_layers", 12),
        "dropout": options.get("dropout", 0.1),
        "attention_dropout": options.get("attention_dropout", 0.0),
        "activation_dropout": options.get("activation_dropout", 0.0),
        "encoder_layerdrop": options.get("encoder_layerdrop", 0.0),
        "decoder_layerdrop": options.get("decoder_layerdrop", 0.0),
        "max_len": options.get("max_position_embeddings", 1024),
    }


class BartLayoutFormat(Format):
    """The base of the families in BART's layout (Marian, BART, mBART; CTranslate2's
    converters share one loader for them too): the weights' renames, the stacks'
    sizes and feed-forward, the model's settings on top of the family's own."""

    learned_positions = True
    """Positions are a learned table (BART, mBART), not computed sinusoids (Marian)."""

    def embeddings(self, options: Options) -> tuple[bool, bool]:
        """(source and target share embeddings, the output is tied to them)."""
        return True, True

    def architecture(self, options: Options) -> dict[str, Any]:
        """The family's own seq2seq settings, beside :func:`stack_sizes`."""
        raise NotImplementedError

    def positional(self, options: Options) -> dict[str, Any]:
        return {"name": "learned", "settings": {"offset": 2}}

    def recipe(self, config: dict[str, Any]) -> dict[str, Any]:
        """The zoo recipe of the family's config."""
        options = self.options(config)
        settings = {**stack_sizes(options), **self.architecture(options)}
        positional = self.positional(options)
        ffn = ffn_of(options)
        options.done(self.legacy | DECODER_FLAGS)
        return {
            "name": self.family,
            "description": f"A {self.family} model imported from its transformers folder.",
            "architecture": {"name": "seq2seq", "settings": settings},
            "components": {
                "attention": "vanilla", "cross_attention": "vanilla", "kernel": "sdpa",
                "positional": positional,
                "norm": {"name": "layernorm", "settings": {"eps": 1e-5}}, "ffn": ffn,
                "encoder_block": "encoder", "decoder_block": "decoder",
            },
        }

    def tied(self, config: dict[str, Any]) -> list[tuple[str, str]]:
        """The decoder's embeddings and ``model.shared`` (both are zoo's target
        embeddings); with shared embeddings, the encoder's too; with a tied output, the
        output and the target embeddings."""
        shared, tied = self.embeddings(self.options(config))
        pairs = [("model.decoder.embed_tokens.weight", "model.shared.weight")]
        if shared:
            pairs.append(("model.encoder.embed_tokens.weight", "model.shared.weight"))
        if tied:
            pairs += [("lm_head.weight", "model.shared.weight"),
                      ("lm_head.weight", "model.decoder.embed_tokens.weight")]
        return pairs

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The family's tensors in zoo's names (Marian's sinusoid tables dropped: zoo
        computes them)."""
        shared, tied = self.embeddings(self.options(config))
        return to_zoo(state, shared=shared, tied=tied, learned_positions=self.learned_positions,
                      family=self.family)
