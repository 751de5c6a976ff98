"""SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"):
FFN(x) = (SiLU(x W_g) * (x W_x)) W_2."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict
from torch import nn

from zoo.plugin import Dropout, Linear


class SwiGLUFFN(nn.Module):
    """Gated feed-forward network with a SiLU gate; ``d_ff`` is the hidden width."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        bias: bool = False

    def __init__(self, settings: Settings, *, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.fc1_g = Linear(d_model, d_ff, bias=settings.bias)
        self.fc1_x = Linear(d_model, d_ff, bias=settings.bias)
        self.drop = Dropout(dropout)
        self.fc2 = Linear(d_ff, d_model, bias=settings.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(F.silu(self.fc1_g(x)) * self.fc1_x(x)))
