"""Learned absolute positions: one trained vector per position below ``max_len``.

``offset`` keeps that many rows in front of position 0: BART and mBART (Lewis et al.
2020) look position p up in row p + 2, a leftover of fairseq's padding-aware
positions, so their tables have ``max_len + 2`` rows.

``count: real`` numbers only the real tokens, as fairseq and RoBERTa (Liu et al. 2019)
do (``cumsum(tokens != pad)``): a sentence padded on the left gets the positions it
gets alone, and padding takes row ``offset - 1`` (RoBERTa's pad row, with ``offset:
2`` for its pad id 1). ``count: every`` (the default) numbers every place, padding
included, as BERT, GPT-2, BART and ViT do."""

from __future__ import annotations

from typing import Literal

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
        count: Literal["every", "real"] = "every"
        """``every``: positions count every place; ``real``: only the real tokens, padding
        skipped (fairseq, RoBERTa)."""

    def __init__(self, settings: Settings, *, d_model: int, max_len: int) -> None:
        super().__init__()
        self.offset, self.count = settings.offset, settings.count
        self.weight = nn.Parameter(torch.empty(max_len + self.offset, d_model))
        nn.init.trunc_normal_(self.weight, std=settings.init_std)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, L, d) -> x + P[offset : offset + L] (rows shifted by the setting's offset);
        with ``count: real`` and ``padding_mask`` (B, L, True at padding), each real token
        gets ``offset`` plus the number of real tokens before it. ``offset`` may be a (B,)
        tensor, one per row (a language model's left-padded prompts, step by step)."""
        if torch.is_tensor(offset):
            offset = offset.view(-1, 1)
            if self.count == "real" and padding_mask is not None:
                return x + self._real_positions(padding_mask, offset).to(x.dtype)
            rows = offset + self.offset + torch.arange(x.shape[1], device=x.device)
            if rows.numel() and int(rows.max()) >= self.weight.shape[0]:
                raise ValueError(
                    f"positions up to {int(rows.max()) + 1 - self.offset} asked of learned "
                    f"positions trained for {self.weight.shape[0] - self.offset}; raise "
                    "max_len in the recipe")
            return x + self.weight[rows].to(x.dtype)
        if self.count == "real" and padding_mask is not None:
            return x + self._real_positions(padding_mask, offset).to(x.dtype)
        start = offset + self.offset
        end = start + x.shape[1]
        if end > self.weight.shape[0]:
            raise ValueError(
                f"positions up to {end - self.offset} asked of learned positions trained for "
                f"{self.weight.shape[0] - self.offset}; raise max_len in the recipe or use "
                "'sinusoidal'"
            )
        return x + self.weight[start:end].to(x.dtype)

    def _real_positions(self, padding_mask: torch.Tensor,
                        offset: int | torch.Tensor) -> torch.Tensor:
        real = ~padding_mask
        rows = offset + self.offset + real.long().cumsum(1) - 1
        # (not checked inside an exported graph: the check reads the data)
        if (not torch.compiler.is_exporting() and real.any()
                and int(rows[real].max()) >= self.weight.shape[0]):
            raise ValueError(
                f"positions up to {int(rows[real].max()) + 1 - self.offset} asked of learned "
                f"positions trained for {self.weight.shape[0] - self.offset}; raise max_len "
                "in the recipe")
        rows = rows.masked_fill(padding_mask, max(self.offset - 1, 0))
        return self.weight[rows]
