"""The best kernel that runs where the tensors are, chosen at each call:
xFormers for half-precision CUDA tensors when it is installed, else PyTorch's
SDPA (which itself dispatches to FlashAttention, memory-efficient or math
kernels). The choice never changes results beyond floating-point rounding."""

from __future__ import annotations

import torch

from . import xformers as xformers_kernel
from .sdpa import sdpa_attention

_XFORMERS = None


def choose(q: torch.Tensor) -> str:
    """Name of the kernel ``auto`` runs for queries like ``q``."""
    global _XFORMERS
    if _XFORMERS is None:
        _XFORMERS = xformers_kernel.available()
    if _XFORMERS and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return "xformers"
    return "sdpa"


def auto_attention(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    kernel = xformers_kernel.xformers_attention if choose(q) == "xformers" else sdpa_attention
    return kernel(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p,
                  scale=scale)
