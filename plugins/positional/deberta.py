"""DeBERTa's relative positions (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", sec. 3.1; log buckets from "DeBERTaV3", He et al. 2023).

A learned vector for each relative distance query - key, clipped to ``buckets`` on each
side, one table shared by every layer of a stack and normed (DeBERTa v3's
``norm_rel_ebd: layer_norm``). Distances beyond ``buckets / 2`` share vectors: their
bucket grows with the logarithm of the distance up to ``max_distance``. The
``disentangled`` attention projects the table with its own query and key projections
(or projections of its own) and adds content-to-position and position-to-content
scores (kind ``disentangled``): this module only keeps the table and says which of its
rows each pair of positions reads.
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zoo.plugin_api import InsideAttention


def log_buckets(rel: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """DeBERTa v3's bucket of each distance ``rel`` (query - key): itself within
    ``buckets / 2`` of 0, else ``buckets / 2`` plus the ceiling of the distance's
    logarithm scaled so that ``max_distance`` lands at ``buckets - 1``, with its sign."""
    mid = buckets // 2
    near = (rel < mid) & (rel > -mid)
    distance = torch.where(near, torch.full_like(rel, mid - 1), rel.abs()).float()
    far = torch.ceil(torch.log(distance / mid) / math.log((max_distance - 1) / mid)
                     * (mid - 1)) + mid
    return torch.where(distance <= mid, rel.float(), far * rel.sign()).long()


class DisentangledPositions(InsideAttention):
    """The relative-distance table (2 x ``buckets`` rows of d_model), normed."""

    kind = "disentangled"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        buckets: int = Field(256, ge=2)
        """Distances on each side with a row (DeBERTa v3's ``position_buckets``)."""
        max_distance: int = Field(512, ge=2)
        """The distance the logarithmic buckets reach: ``buckets - 1`` (DeBERTa's
        ``max_relative_positions``, else its ``max_position_embeddings``)."""
        log: bool = True
        """Bucket far distances logarithmically (v3); False clips them at ``buckets``."""
        norm: bool = True
        """A LayerNorm over the table (``norm_rel_ebd: layer_norm``)."""
        eps: float = Field(1e-7, gt=0, allow_inf_nan=False)
        """That norm's eps (the model's ``layer_norm_eps``)."""

    def __init__(self, settings: Settings | None, *, d_model: int, n_heads: int,
                 max_len: int = 0, causal: bool = False) -> None:
        super().__init__()
        s = settings or self.Settings()
        self.buckets, self.max_distance, self.log = s.buckets, s.max_distance, s.log
        self.rel_embeddings = nn.Embedding(2 * s.buckets, d_model)
        nn.init.normal_(self.rel_embeddings.weight, std=0.02)
        self.norm = nn.LayerNorm(d_model, eps=s.eps) if s.norm else None

    def table(self) -> torch.Tensor:
        """(2 x buckets, d_model): the vector of each clipped distance, normed."""
        table = self.rel_embeddings.weight
        return self.norm(table) if self.norm is not None else table

    def rows(self, lq: int, lk: int, offset: int, device) -> torch.Tensor:
        """(Lq, Lk) the table's row of each query (at ``offset`` on) and key: its bucketed
        distance query - key, shifted by ``buckets`` and clipped to the table."""
        q = torch.arange(offset, offset + lq, device=device)
        rel = q[:, None] - torch.arange(lk, device=device)[None, :]
        if self.log:
            rel = log_buckets(rel, self.buckets, self.max_distance)
        return (rel + self.buckets).clamp(0, 2 * self.buckets - 1)
