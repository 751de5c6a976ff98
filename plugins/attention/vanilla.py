"""Multi-head attention of "Attention Is All You Need" (Vaswani et al. 2017, sec. 3.2).

Queries are projected from ``x``; keys and values from ``context`` (cross-attention)
or from ``x`` (self-attention) by a projection of their own, so an encoder-decoder
layer's self- and cross-attention never share weights. The score computation is
the ``kernel``'s (eager, sdpa, ...).
"""

from __future__ import annotations

from typing import Callable

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from zoo.cache import KVCache
from zoo.errors import RecipeError


class VanillaAttention(nn.Module):
    """Multi-head scaled dot-product attention."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        bias: bool = True

    def __init__(
        self,
        settings: Settings,
        *,
        d_model: int,
        n_heads: int,
        kernel: Callable[..., torch.Tensor],
        dropout: float = 0.0,
        causal: bool = False,
        cross: bool = False,
        positional: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise RecipeError(
                f"d_model {d_model} is not divisible by n_heads {n_heads}; pick n_heads among "
                f"{[h for h in range(1, min(d_model, 64) + 1) if d_model % h == 0]}."
            )
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.causal, self.cross, self.dropout = causal, cross, dropout
        self.kernel = kernel
        self.q_proj = nn.Linear(d_model, d_model, bias=settings.bias)
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=settings.bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=settings.bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape  # (B, L, H*D) -> (B, H, L, D)
        return x.view(b, n, -1, self.head_dim).transpose(1, 2)

    def _keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv_proj(source).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, Lq, d); context (B, Lk, d) for cross-attention; key_padding_mask (B, Lk),
        True at padding; attn_mask (Lq, Lk) or (B, Lq, Lk), True where attending is allowed."""
        b, lq, d = x.shape
        q = self._heads(self.q_proj(x))
        if self.cross:
            if context is None and (cache is None or cache.empty):
                raise ValueError("cross-attention needs a context (the encoder's output)")
            if cache is not None and not cache.empty:
                k, v = cache.k, cache.v
            else:
                k, v = self._keys_values(context)
                if cache is not None:
                    cache.set(k, v)
        else:
            k, v = self._keys_values(x)
            if cache is not None:
                k, v = cache.append(k, v)
        lk = k.shape[-2]

        mask = None
        if attn_mask is not None:
            mask = attn_mask if attn_mask.dim() == 2 else attn_mask[:, None]
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]
            mask = keep if mask is None else mask & keep
        is_causal = self.causal and lq > 1
        if is_causal and (mask is not None or lq != lk):
            # bottom-right aligned: query i (of the last lq) sees keys up to lk - lq + i
            causal = torch.ones(lq, lk, dtype=torch.bool, device=x.device).tril(lk - lq)
            mask = causal if mask is None else mask & causal
            is_causal = False
        out = self.kernel(
            q, k, v,
            attn_mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
        )
        return self.out_proj(out.transpose(1, 2).reshape(b, lq, d))
