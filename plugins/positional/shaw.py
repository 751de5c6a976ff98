"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018).

Each attention layer learns two tables of vectors, a^K and a^V, indexed by the
relative distance key - query clipped to [-k, k] and shared by all heads:

    e_ij = q_i . (k_j + a^K_ij) / sqrt(d),     z_i = sum_j alpha_ij (v_j + a^V_ij)

Computed without materialising (Lq, Lk, d) tensors: q . a^K is taken against
the 2k + 1 table rows and gathered, and the attention weights are summed per
distance before meeting a^V (the paper's sec. 3.3 efficiency remark).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zoo.plugin_api import InsideAttention


class ShawRelativePositions(InsideAttention):
    """Learned key and value vectors for each clipped relative distance."""

    kind = "relative"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        max_distance: int = Field(16, ge=1)
        """k of the paper: distances beyond it share the outermost vector."""

    def __init__(
        self, settings: Settings, *, d_model: int, n_heads: int, max_len: int = 0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        settings = settings or self.Settings()
        head_dim = d_model // n_heads
        self.max_distance = settings.max_distance
        self.keys = nn.Parameter(torch.randn(2 * self.max_distance + 1, head_dim) * head_dim**-0.5)
        self.values = nn.Parameter(torch.randn(2 * self.max_distance + 1, head_dim) * head_dim**-0.5)

    def index(self, rel: torch.Tensor) -> torch.Tensor:
        return rel.clamp(-self.max_distance, self.max_distance) + self.max_distance

    def scores(self, q: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """q (B, H, Lq, D), rel (Lq, Lk) -> q_i . a^K_ij, (B, H, Lq, Lk), unscaled."""
        per_distance = q @ self.keys.to(q.dtype).T  # (B, H, Lq, 2k+1)
        index = self.index(rel).expand(*q.shape[:2], *rel.shape)
        return per_distance.gather(-1, index)

    def values_term(self, weights: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """weights (B, H, Lq, Lk), rel (Lq, Lk) -> sum_j w_ij a^V_ij, (B, H, Lq, D)."""
        index = self.index(rel).expand_as(weights)
        per_distance = weights.new_zeros(*weights.shape[:-1], self.values.shape[0])
        per_distance = per_distance.scatter_add(-1, index, weights)
        return per_distance @ self.values.to(weights.dtype)
