"""Sinusoidal positions (Vaswani et al. 2017, sec. 3.5): PE(pos, 2i) = sin(pos / base^(2i/d)),
PE(pos, 2i+1) = cos(...), the sines and cosines interleaved as in the paper's equation.

``layout: concatenated`` puts all the sines first and all the cosines after them,
[sin | cos], with the same frequencies: the table of Marian (Junczys-Dowmunt et al.
2018) and of the opus-mt models, fairseq and tensor2tensor.

fairseq's own table (M2M100, NLLB-200: ``frequencies: fairseq``) spaces the d/2
frequencies from 1 to 1/base over d/2 - 1 steps instead of d/2, counts only the real
tokens (``count: real``) from the row after the padding token's (``offset: 2`` for pad
id 1), and adds nothing at padding."""

from __future__ import annotations

import math

import torch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from torch import nn


def sinusoid_table(length: int, dim: int, base: float = 10000.0, offset: int = 0,
                   layout: str = "interleaved", frequencies: str = "paper") -> torch.Tensor:
    """(length, dim) table of positions offset .. offset+length-1 (eq. of sec. 3.5),
    sines and cosines ``interleaved`` (even and odd columns) or ``concatenated``;
    ``frequencies`` ``paper`` (base^(-2i/d)) or ``fairseq`` (base^(-i/(d/2 - 1))).

    Computed on the CPU, then moved to the default device. On the meta device (a
    model built only to be counted) it is only shaped: computing it there would run
    torch's reference implementations, whose first use imports torch._dynamo
    (seconds), and computing it on the CPU would allocate what the count is there to
    refuse."""
    if torch.get_default_device().type == "meta":
        return torch.empty(length, dim)
    cpu = torch.device("cpu")
    position = torch.arange(offset, offset + length, dtype=torch.float32, device=cpu)[:, None]
    if frequencies == "fairseq":
        half = dim // 2
        inv_freq = torch.exp(torch.arange(half, dtype=torch.float32, device=cpu)
                             * (-math.log(base) / max(half - 1, 1)))
        if dim % 2:  # fairseq pads an odd width with a zero column
            inv_freq = torch.cat([inv_freq, torch.zeros(1, device=cpu)])
    else:
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
        frequencies: Literal["paper", "fairseq"] = "paper"
        """``paper``: base^(-2i/d); ``fairseq``: base^(-i/(d/2 - 1)) (M2M100, NLLB)."""
        offset: int = Field(0, ge=0, le=2**16)
        """Rows before position 0's: position p is the row p + offset (M2M100's 2)."""
        count: Literal["every", "real"] = "every"
        """``every``: positions count every place; ``real``: only the real tokens, and
        padding gets no position added (fairseq)."""

    def __init__(self, settings: Settings, *, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        self.d_model, self.base, self.layout = d_model, settings.base, settings.layout
        self.frequencies, self.offset, self.count = (settings.frequencies, settings.offset,
                                                     settings.count)
        self.register_buffer("table", self._table(max_len + self.offset), persistent=False)

    def _table(self, length: int) -> torch.Tensor:
        return sinusoid_table(length, self.d_model, self.base, layout=self.layout,
                              frequencies=self.frequencies)

    def _rows(self, end: int) -> torch.Tensor:
        if end > self.table.shape[0]:
            self.table = self._table(end).to(self.table.device)
        return self.table

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d) -> x + PE[offset : offset + L] (rows shifted by the setting's
        offset); with ``count: real`` and ``padding_mask`` (B, L, True at padding), each
        real token gets ``offset`` plus the number of real tokens before it, and padding
        nothing. ``offset`` may be a (B,) tensor, one per row."""
        if self.count == "real" and padding_mask is not None:
            real = ~padding_mask
            if torch.is_tensor(offset):
                offset = offset.view(-1, 1)
            rows = offset + self.offset + real.long().cumsum(1) - 1
            table = self._rows(int(rows.max()) + 1 if rows.numel() else 0)
            added = table[rows.clamp(min=0)] * real[..., None]
            return x + added.to(x.dtype)
        if torch.is_tensor(offset):
            rows = offset.view(-1, 1) + self.offset + torch.arange(x.shape[1], device=x.device)
            table = self._rows(int(rows.max()) + 1 if rows.numel() else 0)
            return x + table[rows].to(x.dtype)
        start = offset + self.offset
        end = start + x.shape[1]
        return x + self._rows(end)[start:end].to(x.dtype)
