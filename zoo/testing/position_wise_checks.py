"""The conformance kit's checks of the norm and feed-forward families: each acts on
every position on its own."""

from __future__ import annotations


import torch
from torch import nn

from .contract import D, Failed, Seed, check, close, gradients_reach, shape


def _position_wise(module: nn.Module, what: str) -> None:
    with Seed(0):
        x = torch.randn(2, 6, D)
        y = x.clone()
        y[:, 2] *= 3.0
        y[:, 2] += 1.0
        a, b = module(x), module(y)
    keep = [0, 1, 3, 4, 5]
    shape(a, (2, 6, D), f"{what}(x)")
    close(a[:, keep], b[:, keep], f"{what} at other positions when one position changes")


@check("norm")
def _norm(component, settings):
    """Normalises each position on its own: shape and dtype (fp32, bf16) kept; gradients
    reach every parameter."""
    with Seed(0):
        norm = component.build(settings, dim=D)
        _position_wise(norm, "norm")
        low = norm.to(torch.bfloat16)(torch.randn(2, 3, D, dtype=torch.bfloat16))
        if low.dtype != torch.bfloat16 or tuple(low.shape) != (2, 3, D):
            raise Failed(f"norm of a bf16 (2, 3, {D}) input returns {low.dtype} "
                          f"{tuple(low.shape)}, expected torch.bfloat16 of the same shape")
        norm = component.build(settings, dim=D)
        gradients_reach(norm, norm(torch.randn(2, 3, D)).pow(3).sum(), "gradients")


@check("ffn")
def _ffn(component, settings):
    """Position-wise: (B, L, d) -> (B, L, d), each position on its own; gradients reach
    every parameter."""
    with Seed(0):
        ffn = component.build(settings, d_model=D, d_ff=2 * D, dropout=0.0).eval()
        _position_wise(ffn, "ffn")
        ffn = component.build(settings, d_model=D, d_ff=2 * D, dropout=0.0)
        gradients_reach(ffn, ffn(torch.randn(2, 3, D)).square().sum(), "gradients")
