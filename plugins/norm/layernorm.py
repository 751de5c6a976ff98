"""Layer normalisation: y = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias.

Note eps sits inside the square root (not ``std + eps``), as in Ba et al. and
``torch.nn.LayerNorm``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class LayerNorm(nn.Module):
    """LayerNorm over the last dimension."""

    plain_layer_norm = True
    """Says that ``forward`` is exactly ``F.layer_norm`` over the last dimension with
    ``weight``, ``bias`` and ``eps``: the static decoder may run it in zoo's native
    decoding step. A subclass that rewrites ``forward`` loses it unless it says it
    again."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        eps: float = Field(1e-5, gt=0.0, allow_inf_nan=False)
        bias: bool = True

    def __init__(self, settings: Settings, *, dim: int) -> None:
        super().__init__()
        self.eps = settings.eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if settings.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
