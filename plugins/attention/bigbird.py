"""BigBird's block-sparse attention (Zaheer et al. 2020, sec. 2 and appendix D).

The sequence is cut into blocks of ``block_size``; each query block attends to
``window_blocks`` neighbouring blocks, to the first ``global_blocks`` blocks
(whose queries in turn attend to everything), and to ``random_blocks`` other
blocks drawn once from a generator seeded with ``seed``, so every run and every
rebuild sees the same pattern. A causal decoder only draws random blocks from
the past, so the pattern of a block never depends on the sequence's length.
"""

from __future__ import annotations

import torch
from pydantic import Field, field_validator

from zoo.plugin_api import AttentionSettings
from ._sparse import BlockSparseAttention


class BigBirdSettings(AttentionSettings):
    block_size: int = Field(64, ge=1)
    window_blocks: int = Field(3, ge=1)
    """Neighbouring blocks seen, the query's own included (odd)."""
    global_blocks: int = Field(2, ge=0)
    random_blocks: int = Field(3, ge=0)
    seed: int = 0

    @field_validator("window_blocks")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(f"window_blocks must be odd (the block and as many on each side), "
                             f"got {value}; use {value + 1}")
        return value


class BigBirdAttention(BlockSparseAttention):
    Settings = BigBirdSettings

    def __init__(self, settings: BigBirdSettings | None, **kwargs) -> None:
        settings = settings or BigBirdSettings()
        super().__init__(settings, **kwargs)
        self.block_size = settings.block_size
        self.radius = (settings.window_blocks - 1) // 2
        self.n_global, self.n_random, self.seed = (
            settings.global_blocks, settings.random_blocks, settings.seed)

    def _member(self, nb: int, causal: bool) -> torch.Tensor:
        i, j = torch.arange(nb)[:, None], torch.arange(nb)[None, :]
        member = (i - j).abs() <= self.radius
        member[:, : self.n_global] = True
        if causal:
            member &= j <= i
        if self.n_random:
            for row in range(self.n_global, nb):
                free = (~member[row]).nonzero().flatten()
                if causal:
                    free = free[free < row]
                if free.numel() == 0:
                    continue
                generator = torch.Generator().manual_seed(self.seed * 1_000_003 + row)
                pick = free[torch.randperm(free.numel(), generator=generator)[: self.n_random]]
                member[row, pick] = True
        return member

    def _global_queries(self, length: int) -> torch.Tensor:
        return torch.arange(min(self.n_global * self.block_size, length))
