"""SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"):
FFN(x) = (SiLU(x W_g) * (x W_x)) W_2, as in PaLM and LLaMA."""

from __future__ import annotations

from torch import nn

from .glu import GatedFFN, GLUSettings


class SwiGLUFFN(GatedFFN):
    """Gated feed-forward network with a SiLU gate; ``d_ff`` is the hidden width."""

    Settings = GLUSettings

    def make_activation(self, settings: GLUSettings) -> nn.Module:
        return nn.SiLU()
