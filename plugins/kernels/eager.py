"""The attention formula of Vaswani et al. (2017), eq. 1, in plain PyTorch ops."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def eager_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v over (B, H, L, D); ``attn_mask`` True = may attend."""
    scale = q.size(-1) ** -0.5 if scale is None else scale
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
    if is_causal:
        lq, lk = scores.shape[-2:]
        causal = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return torch.matmul(weights, v)
