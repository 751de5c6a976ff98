"""The SiLU ("swish") feed-forward network: fc2(SiLU(fc1(x))).

SiLU(x) = x * sigmoid(x) (Elfwing et al. 2018; Ramachandran et al. 2017 call it
swish). Marian's transformer and the opus-mt models use it in place of the
paper's ReLU (``activation_function: swish`` in their transformers config).
"""

from __future__ import annotations

from torch import nn

from .mlp import MLP, MLPSettings


class SiLUFFN(MLP):
    """Two linear layers with a SiLU between."""

    Settings = MLPSettings

    def make_activation(self, settings: MLPSettings) -> nn.Module:
        return nn.SiLU()
