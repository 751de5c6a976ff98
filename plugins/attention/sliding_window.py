"""Sliding-window (local) attention with optional global tokens, as in Longformer
(Beltagy, Peters & Cohan 2020, sec. 3.1).

Each query attends to the keys at most ``window`` positions away (in a causal
decoder: the ``window`` before it and itself). Positions listed in
``global_tokens`` (a classification token, a question) attend to every key and
every query attends to them. Memory and time grow as L * window, not L^2.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from zoo.plugin_api import AttentionSettings
from ._sparse import BlockSparseAttention


class SlidingWindowSettings(AttentionSettings):
    window: int = Field(128, ge=1)
    """Keys up to this many positions away on each side (causal: before) are seen."""
    global_tokens: list[int] = Field(default_factory=list)
    """Positions that attend to, and are attended by, every position."""
    block_size: int | None = Field(None, ge=1)
    """Queries computed together; default max(window, 16)."""


class SlidingWindowAttention(BlockSparseAttention):
    Settings = SlidingWindowSettings

    def __init__(self, settings: SlidingWindowSettings | None, **kwargs) -> None:
        settings = settings or SlidingWindowSettings()
        super().__init__(settings, **kwargs)
        self.window = settings.window
        self.block_size = settings.block_size or max(settings.window, 16)
        self.register_buffer(
            "global_tokens", torch.tensor(sorted(set(settings.global_tokens)), dtype=torch.long),
            persistent=False,
        )

    def _member(self, nb: int, causal: bool) -> torch.Tensor:
        radius = math.ceil(self.window / self.block_size)
        i, j = torch.arange(nb)[:, None], torch.arange(nb)[None, :]
        member = (i - j).abs() <= radius
        if causal:
            member &= j <= i
        blocks = (self.global_tokens.cpu() // self.block_size).unique()
        member[:, blocks[blocks < nb]] = True
        return member

    def _refine(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        near = (q_pos - k_pos).abs() <= self.window
        if self.global_tokens.numel():
            near = near | torch.isin(k_pos, self.global_tokens.to(k_pos.device))
        return near

    def _global_queries(self, length: int) -> torch.Tensor:
        return self.global_tokens.cpu()
