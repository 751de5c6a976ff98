"""The GELU feed-forward network of BERT, GPT-2 and ViT."""

from __future__ import annotations

from typing import Literal

from torch import nn

from .mlp import MLP, MLPSettings


class GELUSettings(MLPSettings):
    approximate: Literal["none", "tanh"] = "none"


class GELUFFN(MLP):
    """Two linear layers with a GELU between (exact, or the tanh approximation)."""

    Settings = GELUSettings

    def make_activation(self, settings: GELUSettings) -> nn.Module:
        return nn.GELU(approximate=settings.approximate)
