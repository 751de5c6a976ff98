"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", sec. 3.4).

Each pair of a head's query/key features is rotated by an angle proportional to
the position, theta_i = base^(-2i/d), so the dot product of a query at m and a
key at n depends only on m - n. Two pairings are in use: ``half`` rotates
feature i with feature i + d/2 (GPT-NeoX, Llama in Hugging Face), ``interleaved``
rotates features 2i and 2i+1 (the paper, GPT-J, Mesh Transformer JAX).

``scaling`` stretches a model's positions past the length it was trained for, as the
Hub's configs ask (``rope_scaling``): ``linear`` divides every frequency by ``factor``
(position interpolation, Chen et al. 2023); ``llama3`` divides only the low
frequencies, those whose wavelength exceeds ``original_max_len / low_freq_factor``,
keeps those shorter than ``original_max_len / high_freq_factor`` and blends linearly
in between (Llama 3.1, Dubey et al. 2024).

``fraction`` rotates only the first share of each head's features, the rest passing
unrotated, with the frequencies of a head that narrow (partial rotary: transformers'
``partial_rotary_factor`` of Phi-3 and Phi-4, GPT-NeoX's ``rotary_pct``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from zoo.plugin_api import InsideAttention, RecipeError


def scaled(inv_freq: torch.Tensor, settings) -> torch.Tensor:
    """The frequencies under the settings' ``scaling`` (see the module)."""
    if settings.scaling == "linear":
        return inv_freq / settings.factor
    if settings.scaling != "llama3":
        return inv_freq
    wavelength = 2 * math.pi / inv_freq
    long = settings.original_max_len / settings.low_freq_factor
    short = settings.original_max_len / settings.high_freq_factor
    # 0 at the long edge of the band, 1 at its short edge
    blend = ((settings.original_max_len / wavelength - settings.low_freq_factor)
             / (settings.high_freq_factor - settings.low_freq_factor)).clamp(0.0, 1.0)
    mixed = (1 - blend) * inv_freq / settings.factor + blend * inv_freq
    return torch.where(wavelength > long, inv_freq / settings.factor,
                       torch.where(wavelength < short, inv_freq, mixed))


class RotaryPositions(InsideAttention):
    """Rotates queries and keys inside attention; adds nothing to the embeddings."""

    kind = "rotary"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        base: float = Field(10000.0, gt=1.0)
        """The base of the frequencies: pair i turns by position x base^(-2i / rotated)."""
        layout: Literal["half", "interleaved"] = "half"
        """Which features pair up: ``half``, feature i with i + rotated/2 (transformers'
        Llama, GPT-NeoX); ``interleaved``, 2i with 2i + 1 (the paper, GPT-J)."""
        scaling: Literal["none", "linear", "llama3"] = "none"
        """Longer contexts: ``linear`` divides positions by ``factor``; ``llama3`` scales
        the low frequencies only (Llama 3.1's rope_scaling)."""
        factor: float = Field(1.0, gt=0.0)
        """How many times longer than ``original_max_len`` positions may go (scaling)."""
        low_freq_factor: float = Field(1.0, gt=0.0)
        high_freq_factor: float = Field(4.0, gt=0.0)
        original_max_len: int = Field(8192, gt=0)
        """llama3: the length the model was first trained for."""
        fraction: float = Field(1.0, gt=0.0, le=1.0)
        """The share of each head's features rotated (partial rotary): the first
        int(head_dim x fraction) features, an even count, turn; the rest pass unchanged
        (GPT-NeoX's rotary_pct 0.25, Phi-3's partial_rotary_factor). ``layout`` pairs
        features within that share: ``interleaved`` turns (2i, 2i + 1) of the first
        features (GPT-J's rotary_dim with rotate_every_two), ``half`` i with
        i + rotated/2."""

        @model_validator(mode="after")
        def _bands(self):
            if self.scaling == "llama3" and self.high_freq_factor <= self.low_freq_factor:
                raise ValueError("llama3 scaling needs high_freq_factor above "
                                 f"low_freq_factor (got {self.high_freq_factor} and "
                                 f"{self.low_freq_factor})")
            return self

    def __init__(
        self, settings: Settings, *, d_model: int, n_heads: int, max_len: int = 0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        settings = settings or self.Settings()
        head_dim = d_model // n_heads
        rotated = int(head_dim * settings.fraction)
        if rotated % 2 or rotated == 0:
            raise RecipeError(
                f"rope rotates pairs of features, and the head size {head_dim} (d_model "
                f"{d_model} / n_heads {n_heads}) times fraction {settings.fraction} leaves "
                f"{rotated} features, which is odd or none; pick an even head size, or a "
                "fraction that leaves pairs."
            )
        self.layout, self.rotated = settings.layout, rotated
        inv_freq = settings.base ** (-torch.arange(0, rotated, 2, dtype=torch.float32) / rotated)
        self.register_buffer("inv_freq", scaled(inv_freq, settings), persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (B, H, L, D) at ``positions`` (L,) -> x rotated, same dtype (its first
        ``rotated`` features; the others as they are)."""
        if self.rotated < x.shape[-1]:
            kept = x[..., self.rotated:]
            return torch.cat([self.rotate(x[..., :self.rotated], positions), kept], dim=-1)
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
