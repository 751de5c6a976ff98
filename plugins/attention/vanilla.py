"""Multi-head attention of "Attention Is All You Need" (Vaswani et al. 2017, sec. 3.2).

Queries are projected from ``x``; keys and values from ``context`` (cross-attention)
or from ``x`` (self-attention) by a projection of their own, so an encoder-decoder
layer's self- and cross-attention never share weights. The score computation is
the ``kernel``'s (eager, sdpa, xformers, ...); positions inside attention (rotary,
ALiBi or T5 bias, Shaw's relative vectors) come from the ``positional`` module.
"""

from __future__ import annotations

import torch

from pydantic import Field

from zoo.plugin_api import (AttentionSettings, HeadNorm, MultiHeadAttention, RecipeError,
                            boolean_mask, relative_positions)


class VanillaSettings(AttentionSettings):
    scale: float | None = Field(None, gt=0, allow_inf_nan=False)
    """The factor of q·k before the softmax; None: 1/sqrt(d_k), the paper's. 1.0 gives
    the unscaled dot product whose softmax saturates as d_k grows (``zoo experiment
    sqrt-dk``)."""
    window: int | None = Field(None, ge=1)
    """Self-attention over the keys fewer than ``window`` positions away: causal, the
    ``window`` most recent keys, the query's own included (Mistral's sliding window,
    Jiang et al. 2023; Child et al. 2019's local attention); bidirectional, ``window - 1``
    keys on each side and its own (ModernBERT's local layers, whose ``local_attention``
    of 128 is a window of 65). Cross-attention sees every key. None: every key."""
    qk_norm: bool = False
    """RMS-normalise each head's queries and keys, with a learned weight per feature,
    before positions act on them (QK-norm, Dehghani et al. 2023; Qwen3)."""
    qk_norm_eps: float = Field(1e-6, gt=0, allow_inf_nan=False)
    """The ``eps`` of those norms."""
    qk_norm_offset: float = Field(0.0, allow_inf_nan=False)
    """Added to those norms' weights (Gemma 3's 1: they store the scale less one)."""
    softcap: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Scores soft-capped to (-cap, cap) before the softmax, cap * tanh(s / cap) (Gemma
    2's 50; Bello et al. 2017, "Neural Combinatorial Optimization"); None: as they are."""


class VanillaAttention(MultiHeadAttention):
    """Multi-head scaled dot-product attention over every key."""

    Settings = VanillaSettings
    groups_queries = True  # cross-attention's queries are independent of one another
    softmax_attention = True  # _attend below is softmax attention over every key

    def __init__(self, settings: VanillaSettings | None, **kwargs) -> None:
        settings = settings or VanillaSettings()
        super().__init__(settings, **kwargs)
        self.scale = settings.scale
        self.window = settings.window if not self.cross else None
        """The sliding window of a self-attention, or None (every key)."""
        if settings.qk_norm:
            self.q_norm = HeadNorm(self.head_dim, settings.qk_norm_eps, settings.qk_norm_offset)
            self.k_norm = HeadNorm(self.head_dim, settings.qk_norm_eps, settings.qk_norm_offset)
        self.softcap = settings.softcap
        """The scores' soft cap, or None."""
        if self.softcap is not None and self.position_kind in ("bias", "relative"):
            raise RecipeError(f"attention softcap {self.softcap} caps the content scores, and "
                              f"{self.position_kind} positions add to them: zoo caps scores "
                              "with rotary or absolute positions only")

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask) -> torch.Tensor:
        lq, lk = q.shape[-2], k.shape[-2]
        causal = self.causal and lq > 1
        if self.window is not None and lk > self.window:
            distance = relative_positions(lq, lk, lk - lq, q.device)
            near = distance > -self.window if self.causal else distance.abs() < self.window
            attn_mask = near if attn_mask is None else attn_mask & near
        if self.softcap is not None:
            return self._capped(q, k, v, boolean_mask(
                lq, lk, causal=causal, key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                device=q.device))
        if causal and attn_mask is None and key_padding_mask is None and lq == lk:
            return self._dense(q, k, v, None, offset=offset, is_causal=True)
        mask = boolean_mask(lq, lk, causal=causal, key_padding_mask=key_padding_mask,
                            attn_mask=attn_mask, device=q.device)
        return self._dense(q, k, v, mask, offset=offset)

    def _capped(self, q, k, v, mask) -> torch.Tensor:
        """Softmax attention with the scores soft-capped (``softcap``) before the mask,
        written out: no kernel caps scores. Its weights are recorded when asked."""
        scale = self.head_dim ** -0.5 if self.scale is None else self.scale
        scores = torch.matmul(q, k.transpose(-2, -1)) * scale
        scores = torch.tanh(scores / self.softcap) * self.softcap
        return torch.matmul(self._weights(scores, mask), v)
