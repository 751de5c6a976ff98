"""The conformance kit's checks of the kernel family: each kernel equals softmax(q kᵀ/√d) v
(eq. 1 of Vaswani et al., 2017) as the kit writes it, with the masks, bias and dropout
it claims."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..registry import Component
from .contract import H, Seed, Skip, check, close, differs
from .references import reference_kernel


def _kernel(component: Component) -> Callable[..., torch.Tensor]:
    caps = component.capabilities
    if caps.needs_cuda and not torch.cuda.is_available():
        raise Skip("needs a CUDA device")
    if caps.requires_package:
        import importlib.util

        if importlib.util.find_spec(caps.requires_package) is None:
            raise Skip(f"needs the package {caps.requires_package!r}")
    return component.load()


def _qkv(lq: int = 6, lk: int = 9, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(2, H, n, 8, device=device) for n in (lq, lk, lk))


def _device(component: Component) -> str:
    return "cuda" if component.capabilities.needs_cuda else "cpu"


def _agrees(component: Component, what: str, *, lq: int = 6, lk: int = 9,
            extra: Callable[[torch.Tensor], dict] = lambda q: {}) -> None:
    """``fn(q, k, v, **extra(q))`` equals the reference kernel's, on random q, k, v."""
    fn = _kernel(component)
    with Seed(0):
        q, k, v = _qkv(lq, lk, _device(component))
        kwargs = extra(q)
        close(fn(q, k, v, **kwargs), reference_kernel(q, k, v, **kwargs), what)


def _allowed(q: torch.Tensor) -> dict:
    allowed = torch.rand(2, 1, 6, 9, device=q.device) > 0.3
    allowed[..., 0] = True  # every query may attend somewhere
    return {"attn_mask": allowed}


@check("kernel")
def _formula(component, settings):
    """fn(q, k, v) and fn(q, k, v, scale=s) equal softmax(q kᵀ·scale) v."""
    _agrees(component, "fn(q, k, v)")
    _agrees(component, "scale=0.1", extra=lambda q: {"scale": 0.1})


@check("kernel", "causal")
def _kernel_causal(component, settings):
    """is_causal=True hides later keys (square scores)."""
    _agrees(component, "is_causal=True", lq=6, lk=6, extra=lambda q: {"is_causal": True})


@check("kernel", "arbitrary_mask")
def _kernel_mask(component, settings):
    """A boolean attn_mask (True: may attend), broadcast over heads, is honoured."""
    _agrees(component, "boolean attn_mask", extra=_allowed)


@check("kernel", "bias")
def _kernel_bias(component, settings):
    """A float attn_mask is added to the scores (ALiBi, T5 bias)."""
    _agrees(component, "float attn_mask",
            extra=lambda q: {"attn_mask": torch.randn(1, H, 6, 9, device=q.device)})


@check("kernel", "dropout")
def _kernel_dropout(component, settings):
    """dropout_p > 0 drops attention weights (the output changes); 0 is exact."""
    fn = _kernel(component)
    with Seed(0):
        q, k, v = _qkv(device=_device(component))
        close(fn(q, k, v, dropout_p=0.0), reference_kernel(q, k, v), "dropout_p=0.0")
        differs(fn(q, k, v, dropout_p=0.5), reference_kernel(q, k, v), "dropout_p=0.5")
