"""timm's ``VisionTransformer`` checkpoints (Dosovitskiy et al. 2021, "An Image is Worth
16x16 Words"; timm's ``vit_*`` models) in zoo's ``vit`` names: the format a recipe's
``weights.converter: timm-vit`` names. It reads no transformers folder (no
``model_types``): a recipe gives the architecture, this gives the weights."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from zoo.plugin_api import Format, FormatError

_VIT_RENAMES = [
    (r"^pos_embed$", "positional.weight"),
    (r"^patch_embed\.proj\.", "patch_embed."),
    (r"^blocks\.(\d+)\.attn\.proj\.", r"blocks.\1.attn.out_proj."),
    (r"^blocks\.(\d+)\.mlp\.", r"blocks.\1.ffn."),
    (r"^blocks\.(\d+)\.ls([12])\.gamma$", r"blocks.\1.ls\2"),
    (r"^(cls_token|norm\.weight|norm\.bias|head\.weight|head\.bias)$", r"\1"),
    (r"^blocks\.(\d+)\.(norm[12]\.(weight|bias))$", r"blocks.\1.\2"),
]
_QKV = re.compile(r"^blocks\.(\d+)\.attn\.qkv\.(weight|bias)$")
_STEM = re.compile(r"^patch_embed\.backbone\.(\d+)\.(conv|bn)\.(.+)$")


def convert(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A timm ``VisionTransformer`` state dict renamed for zoo's ``vit`` architecture.

    timm's fused ``qkv`` projection is split into zoo's ``q_proj`` (the first
    third) and ``kv_proj`` (keys then values); ``pos_embed`` (1, N, d) becomes the
    learned positions' (N, d) table; a hybrid's ``ConvStem`` (``patch_embed.backbone``,
    3x3 convolutions with BatchNorm, then a 1x1) becomes ``stem: conv``'s layers. A key
    with no counterpart raises.
    """
    out: dict[str, torch.Tensor] = {}
    unknown = []
    normed = {m.group(1) for k in state_dict if (m := _STEM.match(k)) and m.group(2) == "bn"}
    for key, value in state_dict.items():
        stem = _STEM.match(key)
        if stem:  # timm's ConvStem: a layer with a norm keeps conv/bn; the last is the 1x1
            index, part, rest = stem.groups()
            out[f"patch_embed.{index}." + (f"{part}.{rest}" if index in normed else rest)] = value
            continue
        match = _QKV.match(key)
        if match:
            layer, kind = match.groups()
            dim = value.shape[0] // 3
            out[f"blocks.{layer}.attn.q_proj.{kind}"] = value[:dim].clone()
            out[f"blocks.{layer}.attn.kv_proj.{kind}"] = value[dim:].clone()
            continue
        for pattern, replacement in _VIT_RENAMES:
            if re.match(pattern, key):
                new = re.sub(pattern, replacement, key)
                out[new] = value[0].clone() if key == "pos_embed" else value
                break
        else:
            unknown.append(key)
    if unknown:
        raise FormatError(
            f"timm ViT weights hold tensors zoo's vit has no place for: {unknown[:8]}"
            f"{' ...' if len(unknown) > 8 else ''}. zoo converts the plain ViT (class token, "
            "learned positions, token pooling, optional LayerScale); models with register "
            "tokens, fc_norm or attention pooling are not supported yet."
        )
    return out


class TimmViTFormat(Format):
    """timm's ViT state dicts (``pos_embed``, fused ``qkv``, ``mlp``, a hybrid's
    ``ConvStem``) renamed for zoo's ``vit``; see :func:`convert`."""

    family = "timm-vit"
    generates = False

    def weights(self, state: dict[str, torch.Tensor],
                config: dict[str, Any]) -> dict[str, torch.Tensor]:
        """timm's names as zoo's (:func:`convert`); ``config`` is not read."""
        return convert(state)
