"""RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * (weight + offset).

``offset`` 1 is Gemma's form (Gemma Team 2024): the stored weight is the scale less one,
so a weight of zeros is the identity."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zoo.plugin_api import rms_norm


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension; statistics in float32."""

    plain_rms_norm = True
    """Says that ``forward`` is exactly x / sqrt(mean(x^2) + eps) * (weight + offset) over
    the last dimension: the static decoder may run it (offset 0) in zoo's native decoding
    step. A subclass that rewrites ``forward`` loses it unless it says it again."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        eps: float = Field(1e-6, gt=0.0, allow_inf_nan=False)
        offset: float = Field(0.0, allow_inf_nan=False)
        """Added to the weight (Gemma's 1: it stores the scale less one)."""

    def __init__(self, settings: Settings, *, dim: int) -> None:
        super().__init__()
        self.eps, self.offset = settings.eps, settings.offset
        self.weight = nn.Parameter(torch.ones(dim) - self.offset)  # the identity at start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.offset)
