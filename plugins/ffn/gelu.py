"""The GELU feed-forward network of BERT, GPT-2, ViT and CLIP (Hendrycks and Gimpel 2016,
"Gaussian Error Linear Units (GELUs)"): the exact GELU, its tanh approximation, or its
sigmoid approximation x * sigmoid(1.702 x) (their sec. 2; CLIP's ``quick_gelu``)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from .mlp import MLP, MLPSettings


class GELUSettings(MLPSettings):
    approximate: Literal["none", "tanh", "sigmoid"] = "none"
    """``none``: the exact GELU; ``tanh``: its tanh approximation (GPT-2); ``sigmoid``:
    x * sigmoid(1.702 x) (CLIP's quick_gelu)."""


class SigmoidGELU(nn.Module):
    """GELU's sigmoid approximation, x * sigmoid(1.702 x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class GELUFFN(MLP):
    """Two linear layers with a GELU between (exact, or an approximation)."""

    Settings = GELUSettings

    def make_activation(self, settings: GELUSettings) -> nn.Module:
        if settings.approximate == "sigmoid":
            return SigmoidGELU()
        return nn.GELU(approximate=settings.approximate)
