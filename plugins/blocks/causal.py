"""The decoder-only layer (Radford et al. 2018 and 2019, GPT and GPT-2; Touvron et al.
2023, LLaMA): causal self-attention and a feed-forward network, each residual and
normed, with no cross-attention: a language model's layer.

pre (GPT-2, Llama):  x = x + drop(attn(norm1(x)));   x = x + drop(ffn(norm2(x)))
post (GPT):          x = norm1(x + drop(attn(x)));   x = norm2(x + drop(ffn(x)))
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from zoo.plugin_api import DataFlow, Dropout, KVCache


class CausalBlock(nn.Module):
    """Causal self-attention and feed-forward sublayers; ``cache`` (a
    :class:`~zoo.plugin_api.KVCache`) keeps the attention's keys and values between
    decoding steps."""

    static_layout = True
    """``forward`` is exactly: ``attn`` then ``ffn``, each added to its input and normed by
    ``norm1``, ``norm2`` (after the sum, or before the sublayer when ``norm_first``),
    dropout aside. The decoder architecture's native steps compute the same; a subclass
    that changes ``forward`` says so again, or decodes by the general path."""

    def __init__(
        self,
        settings: None = None,
        *,
        d_model: int,
        dropout: float,
        norm_first: bool,
        make_attention: Callable[..., nn.Module],
        make_norm: Callable[[], nn.Module],
        make_ffn: Callable[[], nn.Module],
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.attn = make_attention(causal=True)
        self.norm1 = make_norm()
        self.ffn = make_ffn()
        self.norm2 = make_norm()
        self.drop = Dropout(dropout)

    def data_flow(self) -> DataFlow:
        """``forward``'s wiring for zoo's native step: sequential, ``norm1`` and ``norm2``."""
        return DataFlow(self.attn, self.ffn, (self.norm1, self.norm2), self.norm_first)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        """x (B, L, d); key_padding_mask (B, Lk) True at padding, over every key so far
        (the cached ones and x's); cache: this layer's keys and values."""

        def attend(h: torch.Tensor) -> torch.Tensor:
            return self.drop(self.attn(h, key_padding_mask=key_padding_mask, cache=cache))

        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self.drop(self.ffn(self.norm2(x)))
        x = self.norm1(x + attend(x))
        return self.norm2(x + self.drop(self.ffn(x)))
