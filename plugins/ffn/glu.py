"""The gated feed-forward network that SwiGLU and GEGLU share (Shazeer 2020, "GLU
Variants Improve Transformer"): FFN(x) = (act(x W_g) * x W_x) W_2.

``d_ff`` is the hidden width as given: W_g and W_x are both d_model x d_ff, so the
unit has 3 * d_model * d_ff weights (Shazeer shrinks d_ff by 2/3 to keep the
paper's count; a recipe that wants that writes the smaller d_ff itself). Biases
are off by default, as in the paper and in T5 v1.1; dropout acts on the gated
product, before W_2 (as T5's ``DenseGatedActDense``).
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from zoo.plugin_api import Dropout, Linear


class GLUSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bias: bool = False


class GatedFFN(nn.Module):
    """fc2(dropout(act(fc1_g(x)) * fc1_x(x))); subclasses give the activation."""

    Settings = GLUSettings

    plain_glu = True
    """Says that ``forward`` is exactly fc2(dropout(act(fc1_g(x)) * fc1_x(x))): with an
    ``nn.GELU`` or ``nn.SiLU`` (or ``nn.ReLU``) as ``act`` and :class:`zoo.plugin_api.Linear`
    layers, the static decoder may run this network in zoo's native decoding step, fc1_g
    and fc1_x joined into one product. A subclass that rewrites ``forward`` loses it
    unless it says it again."""

    def __init__(self, settings: GLUSettings, *, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        settings = settings or self.Settings()
        self.fc1_g = Linear(d_model, d_ff, bias=settings.bias)
        self.fc1_x = Linear(d_model, d_ff, bias=settings.bias)
        self.act = self.make_activation(settings)
        self.drop = Dropout(dropout)
        self.fc2 = Linear(d_ff, d_model, bias=settings.bias)

    def make_activation(self, settings: GLUSettings) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.fc1_g(x)) * self.fc1_x(x)))
