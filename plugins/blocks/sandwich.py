"""The decoder-only layer with sandwich norms (Ding et al. 2021, "CogView", sec. 3.2;
Gemma Team 2024, "Gemma 2", sec. 2): each sublayer normed before it and again after it,
before the residual sum, so that no sublayer's output grows the residual stream
unbounded.

x = x + drop(norm1_out(attn(norm1(x))));   x = x + drop(norm2_out(ffn(norm2(x))))

Gemma 2 and 3's layer (transformers' ``input_layernorm``, ``post_attention_layernorm``,
``pre_feedforward_layernorm``, ``post_feedforward_layernorm``). Its norms are on both sides
of each sublayer whatever ``norm_placement`` says (as ViT's block is always pre-norm).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from zoo.plugin_api import DataFlow, Dropout, KVCache


class SandwichBlock(nn.Module):
    """Causal self-attention and feed-forward sublayers, each between two norms;
    ``cache`` keeps the attention's keys and values between decoding steps."""

    sandwich_layout = True
    """``forward`` is exactly: ``attn`` of ``norm1(x)``, normed by ``norm1_out`` and added to
    x; then ``ffn`` of ``norm2(x)``, normed by ``norm2_out`` and added, dropout aside. The
    decoder architecture's native step computes the same; a subclass that changes
    ``forward`` says so again, or decodes by the general path."""

    def __init__(
        self,
        settings: None = None,
        *,
        d_model: int,
        dropout: float,
        norm_first: bool = True,
        make_attention: Callable[..., nn.Module],
        make_norm: Callable[[], nn.Module],
        make_ffn: Callable[[], nn.Module],
    ) -> None:
        super().__init__()
        self.norm_first = True  # and after: norm_placement is not read
        self.attn = make_attention(causal=True)
        self.norm1, self.norm1_out = make_norm(), make_norm()
        self.ffn = make_ffn()
        self.norm2, self.norm2_out = make_norm(), make_norm()
        self.drop = Dropout(dropout)

    def data_flow(self) -> DataFlow:
        """``forward``'s wiring for zoo's native step: pre-norm, each sublayer's output
        normed again (``norm1_out``, ``norm2_out``)."""
        return DataFlow(self.attn, self.ffn, (self.norm1, self.norm2), True,
                        after=(self.norm1_out, self.norm2_out))

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        """x (B, L, d); key_padding_mask (B, Lk) True at padding, over every key so far;
        cache: this layer's keys and values."""
        h = self.attn(self.norm1(x), key_padding_mask=key_padding_mask, cache=cache)
        x = x + self.drop(self.norm1_out(h))
        return x + self.drop(self.norm2_out(self.ffn(self.norm2(x))))
