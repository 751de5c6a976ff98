"""The paper's feed-forward network: FFN(x) = max(0, x W1 + b1) W2 + b2."""

from __future__ import annotations

from torch import nn

from .mlp import MLP, MLPSettings


class ReLUFFN(MLP):
    """Two linear layers with a ReLU between."""

    Settings = MLPSettings

    def make_activation(self, settings: MLPSettings) -> nn.Module:
        return nn.ReLU()
