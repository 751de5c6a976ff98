"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", sec. 3.4).

Each pair of a head's query/key features is rotated by an angle proportional to
the position, theta_i = base^(-2i/d), so the dot product of a query at m and a
key at n depends only on m - n. Two pairings are in use: ``half`` rotates
feature i with feature i + d/2 (GPT-NeoX, Llama in Hugging Face), ``interleaved``
rotates features 2i and 2i+1 (the paper, GPT-J, Mesh Transformer JAX).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import InsideAttention, RecipeError


class RotaryPositions(InsideAttention):
    """Rotates queries and keys inside attention; adds nothing to the embeddings."""

    kind = "rotary"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        base: float = Field(10000.0, gt=1.0)
        layout: Literal["half", "interleaved"] = "half"

    def __init__(
        self, settings: Settings, *, d_model: int, n_heads: int, max_len: int = 0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        settings = settings or self.Settings()
        head_dim = d_model // n_heads
        if head_dim % 2:
            raise RecipeError(
                f"rope rotates pairs of features, and the head size {head_dim} "
                f"(d_model {d_model} / n_heads {n_heads}) is odd; pick an even head size."
            )
        self.layout = settings.layout
        inv_freq = settings.base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (B, H, L, D) at ``positions`` (L,) -> x rotated, same dtype."""
        angles = positions.to(torch.float32)[:, None] * self.inv_freq[None]  # (L, D/2)
        cos, sin = angles.cos(), angles.sin()
        xf = x.float()
        if self.layout == "half":
            x1, x2 = xf.chunk(2, dim=-1)
            out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        else:
            x1, x2 = xf[..., 0::2], xf[..., 1::2]
            out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
        return out.to(x.dtype)
