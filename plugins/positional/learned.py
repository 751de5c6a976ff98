"""Learned absolute positions: one trained vector per position below ``max_len``.

``offset`` keeps that many rows in front of position 0: BART and mBART (Lewis et al.
2020) look position p up in row p + 2, a leftover of fairseq's padding-aware
positions, so their tables have ``max_len + 2`` rows."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class LearnedPositions(nn.Module):
    """Adds a learned (max_len, d) table."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        init_std: float = Field(0.02, ge=0.0)
        offset: int = Field(0, ge=0, le=2**16)
        """Rows before position 0's (BART's 2): position p is row p + offset."""

    def __init__(self, settings: Settings, *, d_model: int, max_len: int) -> None:
        super().__init__()
        self.offset = settings.offset
        self.weight = nn.Parameter(torch.empty(max_len + self.offset, d_model))
        nn.init.trunc_normal_(self.weight, std=settings.init_std)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, L, d) -> x + P[offset : offset + L] (rows shifted by the setting's offset)."""
        start = offset + self.offset
        end = start + x.shape[1]
        if end > self.weight.shape[0]:
            raise ValueError(
                f"positions up to {end - self.offset} asked of learned positions trained for "
                f"{self.weight.shape[0] - self.offset}; raise max_len in the recipe or use "
                "'sinusoidal'"
            )
        return x + self.weight[start:end].to(x.dtype)
