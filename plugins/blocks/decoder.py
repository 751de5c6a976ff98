"""The decoder layer (Vaswani et al. 2017, sec. 3.1): causal self-attention,
cross-attention over the encoder's output, feed-forward; each residual and normed.

The cross-attention is a module of its own, with its own projections.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from zoo.plugin_api import DataFlow, Dropout


class DecoderBlock(nn.Module):
    """Masked self-attention, encoder-decoder attention and feed-forward sublayers."""

    static_layout = True
    """``forward`` is exactly: ``self_attn``, ``cross_attn`` and ``ffn`` in turn, each
    added to its input and normed by ``norm1``, ``norm2``, ``norm3`` (after the sum, or
    before the sublayer when ``norm_first``), dropout aside. The seq2seq architecture's
    static decoder writes the same step out; a subclass that changes ``forward``
    says so again, or decodes by the general path."""

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
        self.self_attn = make_attention(causal=True)
        self.norm1 = make_norm()
        self.cross_attn = make_attention(cross=True)
        self.norm2 = make_norm()
        self.ffn = make_ffn()
        self.norm3 = make_norm()
        self.drop = Dropout(dropout)

    def data_flow(self) -> DataFlow:
        """``forward``'s wiring for zoo's native step: self-attention, cross-attention and
        the network in turn, normed by ``norm1``, ``norm2``, ``norm3``."""
        return DataFlow(self.self_attn, self.ffn, (self.norm1, self.norm3), self.norm_first,
                        cross_attention=self.cross_attn, cross_norm=self.norm2)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None,
        self_padding_mask: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        cache: dict | None = None,
    ) -> torch.Tensor:
        """x (B, Lt, d); memory (B, Ls, d); masks True at padding; cache from DecoderCache."""
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None

        def attend(h: torch.Tensor) -> torch.Tensor:
            return self.drop(self.self_attn(h, key_padding_mask=self_padding_mask, cache=self_cache))

        def cross(h: torch.Tensor) -> torch.Tensor:
            return self.drop(
                self.cross_attn(h, memory, key_padding_mask=memory_padding_mask, cache=cross_cache)
            )

        def feed(h: torch.Tensor) -> torch.Tensor:
            return self.drop(self.ffn(h))

        if self.norm_first:
            x = x + attend(self.norm1(x))
            x = x + cross(self.norm2(x))
            return x + feed(self.norm3(x))
        x = self.norm1(x + attend(x))
        x = self.norm2(x + cross(x))
        return self.norm3(x + feed(x))
