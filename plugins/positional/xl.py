"""Transformer-XL's relative positions (Dai et al. 2019, sec. 3.3).

The score of query i and key j is the sum of four terms,

    A_ij = q_i·k_j          (a) content           + u·k_j          (c) global content bias
         + q_i·W_R R_{i-j}  (b) content-position  + v·W_R R_{i-j} (d) global position bias

with q_i = W_q x_i, k_j = W_k x_j, R the fixed sinusoids of the distance i - j
(sin and cos halves concatenated, as the paper's code), W_R a learned projection
per layer, and u, v learned per head. Only the offset i - j enters (b) and (d),
so a score does not change when the whole sequence moves. The attention computes
(a) + (c) as (q + u)·k; this module gives (b) + (d) as (q + v)·W_R R over the
distinct offsets, placed at (i, j) by the paper's relative shift.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zoo.plugin_api import InsideAttention, Linear


def rel_shift(per_offset: torch.Tensor, lq: int, lk: int) -> torch.Tensor:
    """The relative shift: (..., Lq, Lq + Lk - 1) scores over the offsets key - query
    from -(Lq - 1) (first column) up, -> (..., Lq, Lk) with row i, column j taken from
    column j - i + Lq - 1. The paper pads a column and reshapes; a strided view of the
    same memory reads the same elements without copying."""
    per_offset = per_offset.contiguous()
    width = per_offset.shape[-1]
    *lead, _, _ = per_offset.shape
    strides = per_offset.stride()[:-2] + (width - 1, 1)
    return per_offset.as_strided((*lead, lq, lk), strides,
                                 per_offset.storage_offset() + lq - 1)


class TransformerXLPositions(InsideAttention):
    """Sinusoidal relative encodings, their per-layer projection W_R, and the global
    content and position biases u and v (one vector per head each)."""

    kind = "relative"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        base: float = Field(10000.0, gt=1.0)
        """Base of the sinusoids' wavelengths."""

    def __init__(self, settings: Settings | None, *, d_model: int, n_heads: int,
                 max_len: int = 0, causal: bool = False) -> None:
        super().__init__()
        settings = settings or self.Settings()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.r_proj = Linear(d_model, d_model, bias=False)  # W_{k,R}
        self.u = nn.Parameter(torch.randn(n_heads, self.head_dim) * 0.02)
        self.v = nn.Parameter(torch.randn(n_heads, self.head_dim) * 0.02)
        inv_freq = settings.base ** (-torch.arange(0, d_model, 2, dtype=torch.float32,
                                                   device="cpu") / d_model)
        self.register_buffer("inv_freq", inv_freq.to(torch.get_default_device()),
                             persistent=False)

    def embeddings(self, distances: torch.Tensor) -> torch.Tensor:
        """R: (n,) distances i - j -> (n, d_model) sinusoids, [sin | cos]."""
        angles = distances.float()[:, None] * self.inv_freq[None, :]
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    def projected(self, distances: torch.Tensor) -> torch.Tensor:
        """W_R R of each distance, split into heads: (H, n, D)."""
        r = self.r_proj(self.embeddings(distances).to(self.r_proj.weight.dtype))
        return r.view(len(distances), self.n_heads, self.head_dim).transpose(0, 1)

    def _plus(self, q: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """q (B, H, ..., D) plus a vector per head (H, D)."""
        return q + bias.to(q.dtype).view(self.n_heads, *[1] * (q.dim() - 3), self.head_dim)

    def content_query(self, q: torch.Tensor) -> torch.Tensor:
        """q + u, whose product with the keys is terms (a) + (c)."""
        return self._plus(q, self.u)

    def scores(self, q: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """Terms (b) + (d): q (B, H, *rel.shape[:-1], D), rel = key - query positions of any
        shape -> (B, H, *rel.shape), unscaled."""
        lo, hi = int(rel.min()), int(rel.max())
        offsets = torch.arange(lo, hi + 1, device=rel.device)
        r = self.projected(-offsets).to(q.dtype)  # distance i - j = -(key - query)
        qv = self._plus(q, self.v)
        b, h = q.shape[:2]
        per_offset = (qv.reshape(b, h, -1, self.head_dim) @ r.transpose(-2, -1))
        per_offset = per_offset.view(b, h, *rel.shape[:-1], len(offsets))
        if rel.dim() == 2 and self._contiguous(rel):
            return rel_shift(per_offset, *rel.shape)
        index = (rel - lo).expand(b, h, *rel.shape)
        return per_offset.gather(-1, index)

    @staticmethod
    def _contiguous(rel: torch.Tensor) -> bool:
        """rel[i, j] = rel[0, 0] + j - i: queries and keys in one run of positions."""
        lq, lk = rel.shape
        expected = (torch.arange(lk, device=rel.device)[None, :]
                    - torch.arange(lq, device=rel.device)[:, None] + rel[0, 0])
        return bool(torch.equal(rel, expected))

    def values_term(self, weights: torch.Tensor, rel: torch.Tensor) -> None:
        """Transformer-XL adds nothing to the values."""
        return None
