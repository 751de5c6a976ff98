"""Learned absolute positions: one trained vector per position below ``max_len``."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class LearnedPositions(nn.Module):
    """Adds a learned (max_len, d) table."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        init_std: float = Field(0.02, ge=0.0)

    def __init__(self, settings: Settings, *, d_model: int, max_len: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.trunc_normal_(self.weight, std=settings.init_std)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, L, d) -> x + P[offset : offset + L]."""
        end = offset + x.shape[1]
        if end > self.weight.shape[0]:
            raise ValueError(
                f"positions up to {end} asked of learned positions trained for "
                f"{self.weight.shape[0]}; raise max_len in the recipe or use 'sinusoidal'"
            )
        return x + self.weight[offset:end].to(x.dtype)
