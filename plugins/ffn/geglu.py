"""GEGLU (Shazeer 2020, "GLU Variants Improve Transformer"):
FFN(x) = (GELU(x W_g) * (x W_x)) W_2.

T5 v1.1 and Flan-T5 use it ("gated-gelu") with GELU's tanh approximation
(``approximate: tanh``, transformers' ``gelu_new``); Shazeer's paper uses the
exact GELU, the default here.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

from .glu import GatedFFN, GLUSettings


class GEGLUSettings(GLUSettings):
    approximate: Literal["none", "tanh"] = "none"
    """``none``: the exact GELU; ``tanh``: its tanh approximation (T5 v1.1, GPT-2)."""


class GEGLUFFN(GatedFFN):
    """Gated feed-forward network with a GELU gate; ``d_ff`` is the hidden width."""

    Settings = GEGLUSettings

    def make_activation(self, settings: GEGLUSettings) -> nn.Module:
        return nn.GELU(approximate=settings.approximate)
