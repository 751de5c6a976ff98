"""Vision Transformer (Dosovitskiy et al. 2021, "An Image is Worth 16x16 Words").

Image -> non-overlapping patches (a strided convolution) -> a class token in
front -> learned positions -> pre-norm encoder blocks -> norm -> the class
token's vector (or the mean of all tokens) -> a linear classifier.

``stem: conv`` replaces the patches' one strided convolution with Xiao et al.'s
convolutional stem (2021, "Early Convolutions Help Transformers See Better"): 3x3
convolutions of stride 2, each followed by BatchNorm and ReLU, as many as halve the
image to the same grid of tokens (log2 of ``patch_size``), their channels doubling up
to ``d_model``, then a 1x1 convolution to ``d_model``: timm's ``ConvStem`` configured
that way (a test holds the two equal). Xiao et al. found that it makes ViTs learn faster
and depend less on the rate and the optimizer, for about the cost of one block.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn
from torch.utils.checkpoint import checkpoint

from zoo.plugin_api import Dropout, Linear, RecipeError, Slot


class ViTSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image_size: int = Field(224, gt=0, le=2**14)
    patch_size: int = Field(16, gt=0, le=2**14)
    in_chans: int = Field(3, gt=0, le=2**10)
    num_classes: int = Field(1000, ge=0, le=2**31)
    d_model: int = Field(768, gt=0, le=2**16)
    n_heads: int = Field(12, gt=0, le=2**10)
    d_ff: int = Field(3072, gt=0, le=2**18)
    depth: int = Field(12, ge=0, le=2**10)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    attention_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    drop_path_rate: float = Field(0.0, ge=0.0, lt=1.0)
    """Stochastic depth (Huang et al. 2016), as timm's ``drop_path_rate``: block i of
    depth N drops each residual branch with probability rate * i / (N - 1)."""
    class_token: bool = True
    pool: Literal["token", "mean"] = "token"
    patch_bias: bool = True
    """A bias in the patches' convolution (CLIP's has none)."""
    pre_norm: bool = False
    """A norm over the tokens before the first block (CLIP's ``pre_layrnorm``)."""
    stem: Literal["patch", "conv"] = "patch"
    """How the image becomes tokens: ``patch`` (one convolution of kernel and stride
    ``patch_size``, the paper's) or ``conv`` (Xiao et al.'s stem, see the module)."""

    @model_validator(mode="after")
    def _check(self) -> "ViTSettings":
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}"
            )
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.stem == "conv" and (self.patch_size < 2 or self.patch_size & (self.patch_size - 1)):
            raise ValueError(
                f"stem 'conv' halves the image log2(patch_size) times, so patch_size must be a "
                f"power of two (2, 4, 8, 16, ...); got {self.patch_size} (or use stem: patch)")
        if self.pool == "token" and not self.class_token:
            raise ValueError("pool 'token' needs class_token: true (or use pool: mean)")
        return self


def conv_stem(in_chans: int, d_model: int, patch_size: int) -> nn.Sequential:
    """Xiao et al.'s stem for a grid of ``patch_size``: log2(patch_size) stride-2 3x3
    convolutions (no bias) each with BatchNorm and ReLU, of ``d_model / 2**(n - 1 - i)``
    channels (at least 8), then a 1x1 convolution (with bias) to ``d_model``. Modules
    ``{i}.conv``, ``{i}.bn``, ``{i}.act`` and ``{n}`` (the 1x1), as timm's ConvStem
    names them."""
    n = patch_size.bit_length() - 1
    stem, chans = nn.Sequential(), in_chans
    for i in range(n):
        out = max(8, d_model >> (n - 1 - i))
        stem.add_module(str(i), nn.Sequential(OrderedDict(
            conv=nn.Conv2d(chans, out, 3, stride=2, padding=1, bias=False),
            bn=nn.BatchNorm2d(out), act=nn.ReLU(inplace=True))))
        chans = out
    stem.add_module(str(n), nn.Conv2d(chans, d_model, 1))
    return stem


class VisionTransformer(nn.Module):
    """forward(images (B, C, H, W)) -> logits (B, num_classes)."""

    Settings = ViTSettings
    slots = {
        "attention": Slot("attention"),
        "kernel": Slot("kernel", default="sdpa"),
        "positional": Slot("positional", default="learned"),
        "norm": Slot("norm", default="layernorm"),
        "ffn": Slot("ffn", default="gelu"),
        "block": Slot("block", {"role": "encoder"}, default="vit"),
    }

    gradient_checkpointing = False
    """Recompute each block in the backward pass instead of keeping its activations."""

    def __init__(self, settings: ViTSettings, parts) -> None:
        super().__init__()
        s = self.settings = settings
        self.num_patches = (s.image_size // s.patch_size) ** 2
        self.num_prefix = int(s.class_token)
        self.patch_embed = (conv_stem(s.in_chans, s.d_model, s.patch_size) if s.stem == "conv"
                            else nn.Conv2d(s.in_chans, s.d_model, s.patch_size,
                                           stride=s.patch_size, bias=s.patch_bias))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, s.d_model)) if s.class_token else None
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)
        tokens = self.num_patches + self.num_prefix
        self.positional = parts.embedding_positions(d_model=s.d_model, max_len=tokens)
        self.drop = Dropout(s.dropout)
        factories = parts.layer_factories(
            d_model=s.d_model, n_heads=s.n_heads, d_ff=s.d_ff, dropout=s.dropout,
            attention_dropout=s.attention_dropout, max_len=tokens,
            activation_dropout=s.dropout,  # timm's Mlp drops after its activation too
        )
        if s.drop_path_rate and "drop_path" not in inspect.signature(parts.load("block")).parameters:
            raise RecipeError(
                f"drop_path_rate {s.drop_path_rate} needs a block that takes drop_path=, and "
                f"block {parts.parts['block'].component.name!r} does not; use block 'vit' or "
                "'encoder', or drop_path_rate: 0")
        # timm's rule: rates rise linearly from 0 at the first block to the rate at the last
        rates = torch.linspace(0, s.drop_path_rate, s.depth, device="cpu").tolist()
        self.blocks = nn.ModuleList(
            parts.make("block", d_model=s.d_model, dropout=s.dropout, norm_first=True,
                       **factories, **({"drop_path": rate} if rate else {}))
            for rate in rates
        )
        self.norm = factories["make_norm"]()
        self.pre_norm = factories["make_norm"]() if s.pre_norm else None
        self.head = Linear(s.d_model, s.num_classes) if s.num_classes else nn.Identity()

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> tokens (B, prefix + patches, d), normed."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, d)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(self.positional(x))
        if self.pre_norm is not None:
            x = self.pre_norm(x)
        for block in self.blocks:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.norm(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.forward_features(images)
        pooled = x[:, 0] if self.settings.pool == "token" else x[:, self.num_prefix:].mean(1)
        return self.head(pooled)
