"""ALiBi, attention with linear biases (Press et al. 2022, "Train Short, Test Long").

No position is added to the embeddings; each head adds -m * |i - j| to the
score of query i and key j, with a fixed per-head slope m. For n heads a power
of two the slopes are the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8);
otherwise the paper (and its code) takes the 2^floor(log2 n) slopes of the
nearest power of two and adds every other slope of twice that, in order.
In a causal decoder |i - j| = i - j; an encoder (bidirectional) uses the
symmetric distance.
"""

from __future__ import annotations

import math

import torch

from zoo.plugin_api import InsideAttention


def alibi_slopes(n_heads: int) -> list[float]:
    """The per-head slopes of the paper for any number of heads."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return power_of_two(n_heads)
    closest = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(closest) + power_of_two(2 * closest)[0::2][: n_heads - closest]


class ALiBi(InsideAttention):
    """bias(rel) = -slope[h] * |rel| per head."""

    kind = "bias"

    def __init__(
        self, settings: None = None, *, d_model: int, n_heads: int, max_len: int = 0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads)), persistent=False)

    def bias(self, rel: torch.Tensor) -> torch.Tensor:
        """rel (key - query positions, any shape) -> (H, *rel.shape) float."""
        distance = rel.abs().to(torch.float32)
        return -self.slopes.view(-1, *([1] * rel.dim())) * distance
