"""The two-layer MLP that the ReLU and GELU feed-forward networks share."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from zoo.plugin_api import Dropout, Linear


class MLPSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bias: bool = True


class MLP(nn.Module):
    """fc2(dropout(act(fc1(x)))); subclasses set ``act``."""

    plain_mlp = True
    """Says that ``forward`` is exactly fc2(dropout(act(fc1(x)))): with an ``nn.ReLU`` or
    ``nn.GELU`` or an ``nn.SiLU`` as ``act`` and :class:`zoo.plugin_api.Linear` layers, the static decoder may
    run this network in zoo's native decoding step. A subclass that rewrites
    ``forward`` loses it unless it says it again."""

    def __init__(self, settings: MLPSettings, *, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.fc1 = Linear(d_model, d_ff, bias=settings.bias)
        self.act = self.make_activation(settings)
        self.drop = Dropout(dropout)
        self.fc2 = Linear(d_ff, d_model, bias=settings.bias)

    def make_activation(self, settings: MLPSettings) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1(x))))
