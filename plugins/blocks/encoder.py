"""The encoder layer (Vaswani et al. 2017, sec. 3.1), post-norm or pre-norm.

post: x = norm1(x + drop(attn(x)));       x = norm2(x + drop(ffn(x)))
pre:  x = x + drop(attn(norm1(x)));       x = x + drop(ffn(norm2(x)))

``drop_path`` > 0 adds stochastic depth to each residual branch (ViT).

``attention_norm: false`` leaves out norm1: ModernBERT's first layer
(Warner et al. 2024, "Smarter, Better, Faster, Longer: A Modern Bidirectional Encoder"),
whose input is the embeddings just normed.
"""

from __future__ import annotations

from typing import Callable

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from zoo.plugin_api import Dropout, DropPath


class EncoderBlockSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attention_norm: bool = True
    """A norm before (pre-norm) or after (post-norm) the attention; false: none
    (ModernBERT's first layer)."""


class EncoderBlock(nn.Module):
    """Self-attention and feed-forward sublayers, each residual and normalised."""

    Settings = EncoderBlockSettings

    plain_encoder_layer = True
    """Its forward (with ``_attend`` and ``_feed``) is the paper's encoder layer above
    (zoo's native encoder pass may run it); a subclass that rewrites one of them must say
    it again."""

    def __init__(
        self,
        settings: EncoderBlockSettings | None = None,
        *,
        d_model: int,
        dropout: float,
        norm_first: bool,
        make_attention: Callable[..., nn.Module],
        make_norm: Callable[[], nn.Module],
        make_ffn: Callable[[], nn.Module],
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.attn = make_attention()
        self.norm1 = make_norm() if settings is None or settings.attention_norm \
            else nn.Identity()
        self.ffn = make_ffn()
        self.norm2 = make_norm()
        self.drop = Dropout(dropout)
        # stochastic depth on each residual branch (ViT's drop_path_rate, as timm's Block)
        self.drop_path1 = DropPath(drop_path) if drop_path else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path else nn.Identity()

    def _attend(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        return self.drop(self.attn(x, key_padding_mask=key_padding_mask))

    def _feed(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.ffn(x))

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d); key_padding_mask (B, L), True at padding."""
        if self.norm_first:
            x = x + self.drop_path1(self._attend(self.norm1(x), key_padding_mask))
            return x + self.drop_path2(self._feed(self.norm2(x)))
        x = self.norm1(x + self.drop_path1(self._attend(x, key_padding_mask)))
        return self.norm2(x + self.drop_path2(self._feed(x)))
