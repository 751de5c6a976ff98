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

import torch

from ._kv import KeysValues, finish

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
                out[f"{base}.k_proj.{kind}"], out[f"{base}.v_proj.{kind}"] = value.chunk(2, 0)
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
