"""No positions: the identity (for models that get order from elsewhere, or none)."""

from __future__ import annotations

import torch
from torch import nn


class NoPositions(nn.Module):
    """Returns its input unchanged."""

    def __init__(self, settings: None = None, *, d_model: int, max_len: int = 0) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
