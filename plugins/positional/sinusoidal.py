"""Sinusoidal positions: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...)."""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


def sinusoid_table(length: int, dim: int, base: float = 10000.0, offset: int = 0) -> torch.Tensor:
    """(length, dim) table of positions offset .. offset+length-1 (eq. of sec. 3.5).

    Computed on the CPU, then moved to the default device. On the meta device (a
    model built only to be counted) it is only shaped: computing it there would run
    torch's reference implementations, whose first use imports torch._dynamo
    (seconds), and computing it on the CPU would allocate what the count is there to
    refuse."""
    if torch.get_default_device().type == "meta":
        return torch.empty(length, dim)
    cpu = torch.device("cpu")
    position = torch.arange(offset, offset + length, dtype=torch.float32, device=cpu)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=cpu)
                         * (-math.log(base) / dim))
    table = torch.zeros(length, dim, device=cpu)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table.to(torch.get_default_device())


class SinusoidalPositions(nn.Module):
    """Adds fixed sinusoids; any length works (the table grows on demand)."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        base: float = Field(10000.0, gt=1.0)

    def __init__(self, settings: Settings, *, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        self.d_model, self.base = d_model, settings.base
        self.register_buffer("table", sinusoid_table(max_len, d_model, self.base), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, L, d) -> x + PE[offset : offset + L]."""
        end = offset + x.shape[1]
        if end > self.table.shape[0]:
            self.table = sinusoid_table(end, self.d_model, self.base).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)
