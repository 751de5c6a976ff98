"""Sinusoidal positions (Vaswani et al. 2017, sec. 3.5): PE(pos, 2i) = sin(pos / base^(2i/d)),
PE(pos, 2i+1) = cos(...), the sines and cosines interleaved as in the paper's equation.

``layout: concatenated`` puts all the sines first and all the cosines after them,
[sin | cos], with the same frequencies: the table of Marian (Junczys-Dowmunt et al.
2018) and of the opus-mt models, fairseq and tensor2tensor."""

from __future__ import annotations

import math

import torch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from torch import nn


def sinusoid_table(length: int, dim: int, base: float = 10000.0, offset: int = 0,
                   layout: str = "interleaved") -> torch.Tensor:
    """(length, dim) table of positions offset .. offset+length-1 (eq. of sec. 3.5),
    sines and cosines ``interleaved`` (even and odd columns) or ``concatenated``.

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
    sines, cosines = (slice(0, dim, 2), slice(1, dim, 2)) if layout == "interleaved" else (
        slice(0, (dim + 1) // 2), slice((dim + 1) // 2, dim))
    table[:, sines] = torch.sin(position * inv_freq)
    table[:, cosines] = torch.cos(position * inv_freq[: dim // 2])
    return table.to(torch.get_default_device())


class SinusoidalPositions(nn.Module):
    """Adds fixed sinusoids; any length works (the table grows on demand)."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        base: float = Field(10000.0, gt=1.0)
        layout: Literal["interleaved", "concatenated"] = "interleaved"
        """``interleaved``: sin and cos in alternate columns (the paper's equation);
        ``concatenated``: [sin | cos] (Marian, opus-mt, fairseq)."""

    def __init__(self, settings: Settings, *, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        self.d_model, self.base, self.layout = d_model, settings.base, settings.layout
        self.register_buffer("table", self._table(max_len), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        return sinusoid_table(length, self.d_model, self.base, layout=self.layout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, L, d) -> x + PE[offset : offset + L]."""
        end = offset + x.shape[1]
        if end > self.table.shape[0]:
            self.table = self._table(end).to(self.table.device)
        return x + self.table[offset:end].to(x.dtype)
