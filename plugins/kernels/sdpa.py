"""PyTorch's fused scaled dot-product attention (FlashAttention on GPUs that have it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with zoo's kernel contract."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale
    )
