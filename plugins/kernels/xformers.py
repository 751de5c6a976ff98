"""xFormers' memory-efficient attention (Lefaudeux et al., facebookresearch/xformers),
``xformers.ops.memory_efficient_attention``, on CUDA tensors.

Causal attention uses xFormers' ``LowerTriangularMask`` (no mask in memory);
other masks and biases become a float bias tensor, stored with its last
dimension padded to a multiple of 8 as the CUTLASS kernels require.
"""

from __future__ import annotations

import importlib.util

import torch

from zoo.plugin_api import CapabilityError


def available() -> bool:
    """xFormers is installed (it only runs on CUDA tensors)."""
    return importlib.util.find_spec("xformers") is not None


def _bias(mask: torch.Tensor, q: torch.Tensor, lk: int, is_causal: bool) -> torch.Tensor:
    bsz, heads, lq = q.shape[0], q.shape[1], q.shape[2]
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(
            ~mask, float("-inf"))
    if is_causal:
        tri = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
        mask = mask.masked_fill(~tri, float("-inf"))
    aligned = -(-lk // 8) * 8
    storage = torch.empty(bsz, heads, lq, aligned, dtype=q.dtype, device=q.device)
    bias = storage[..., :lk]
    bias.copy_(mask.to(q.dtype).expand(bsz, heads, lq, lk))
    return bias


def xformers_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """zoo's kernel contract over ``xformers.ops.memory_efficient_attention``."""
    try:
        import xformers.ops as xops
    except ImportError:
        raise CapabilityError(
            "kernel 'xformers' needs the xformers package, which is not installed "
            "(pip install 'zoo-transformers[xformers]'); kernel 'sdpa' runs without it."
        ) from None
    if not q.is_cuda:
        raise CapabilityError(
            f"kernel 'xformers' runs on CUDA tensors only, and these are on {q.device}; "
            "kernel 'sdpa' (or 'auto', which picks one that runs) works here."
        )
    lk = k.shape[-2]
    if attn_mask is not None:
        bias = _bias(attn_mask, q, lk, is_causal)
    elif is_causal:
        bias = xops.LowerTriangularMask()
    else:
        bias = None
    # xFormers takes (B, L, H, D)
    out = xops.memory_efficient_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
        attn_bias=bias, p=dropout_p, scale=scale,
    )
    return out.transpose(1, 2)
