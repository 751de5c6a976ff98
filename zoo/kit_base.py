"""The conformance kit's foundations: what a check is, the registry of checks, how
checks compare, and the kit's own reference parts (a kernel from the formula,
positions of each kind, a reference attention, norm and feed-forward network).
The checks are in :mod:`zoo.kit_checks`; the public face is :mod:`zoo.testing`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .attention import InsideAttention, MultiHeadAttention, boolean_mask
from .errors import ZooError
from .registry import Component

D, H = 16, 2
"""The width and heads the kit builds components with."""
TOLERANCE = {"atol": 1e-5, "rtol": 1e-4}


class ConformanceError(ZooError, AssertionError):
    """A component that breaks its family's contract; the message names the check, the
    capability it holds the component to, and what differed."""


class Skip(Exception):
    """A check that does not apply here (a CUDA-only kernel on a CPU, a missing package)."""


@dataclass(frozen=True)
class Check:
    """One clause of a family's contract."""

    family: str
    name: str
    claim: str | None
    """The capability that makes the check apply (None: every member)."""
    doc: str
    run: Callable[[Component, Any], None]

    def applies(self, component: Component) -> bool:
        """True when the component claims what the check needs (or it needs nothing)."""
        return self.claim is None or bool(getattr(component.capabilities, self.claim, False))


CHECKS: dict[str, list[Check]] = {}
"""The checks of each family, in the order they run."""


def _check(family: str, claim: str | None = None):
    def add(fn: Callable[[Component, Any], None]) -> Callable[[Component, Any], None]:
        doc = (fn.__doc__ or "").strip()
        CHECKS.setdefault(family, []).append(Check(family, fn.__name__.removeprefix("_"), claim,
                                                   doc, fn))
        return fn
    return add


# -- what the checks compare ------------------------------------------------------------------
class _Failed(AssertionError):
    pass


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if actual.shape != expected.shape:
        raise _Failed(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    diff = (actual.float() - expected.float()).abs()
    bound = TOLERANCE["atol"] + TOLERANCE["rtol"] * expected.float().abs()
    if not bool(torch.isfinite(actual).all()) or bool((diff > bound).any()):
        worst = int(diff.flatten().argmax())
        raise _Failed(f"{what}: differs by up to {diff.max().item():.3g} (at flat index "
                      f"{worst}; allowed {TOLERANCE['atol']:g} + {TOLERANCE['rtol']:g}·|x|)")


def _differs(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if torch.allclose(a.float(), b.float(), atol=1e-6, rtol=1e-5):
        raise _Failed(f"{what}: nothing changed")


def _shape(actual: torch.Tensor, expected: tuple[int, ...], what: str) -> None:
    if tuple(actual.shape) != expected:
        raise _Failed(f"{what}: shape {tuple(actual.shape)}, expected {expected}")
    if not bool(torch.isfinite(actual).all()):
        raise _Failed(f"{what}: holds NaN or infinite values")


def _gradients_reach(module: nn.Module, loss: torch.Tensor, what: str) -> None:
    loss.backward()
    dead = [n for n, p in module.named_parameters()
            if p.requires_grad and (p.grad is None or not bool(p.grad.abs().sum() > 0))]
    if dead:
        raise _Failed(f"{what}: no gradient reaches {dead[:6]}")


# -- the kit's own reference parts ------------------------------------------------------------
def reference_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                     attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                     dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) v, eq. 1 of Vaswani et al. (2017), over (B, H, L, D);
    ``attn_mask`` boolean (True: may attend) or float (added); no dropout."""
    scores = (q @ k.transpose(-2, -1)).float() * (q.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        lq, lk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(lq, lk, dtype=torch.bool,
                                                device=q.device).tril(), float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask.float())
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


class _Rotary(InsideAttention):
    kind = "rotary"

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        angle = positions.float()[:, None] * 10000.0 ** (-torch.arange(half) / half)
        x1, x2 = x.float()[..., :half], x.float()[..., half:]
        cos, sin = angle.cos(), angle.sin()
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).to(x.dtype)


class _Bias(InsideAttention):
    kind = "bias"

    def bias(self, rel: torch.Tensor) -> torch.Tensor:
        slopes = torch.tensor([0.5 ** (h + 1) for h in range(H)], device=rel.device)
        return -slopes.view(H, *[1] * rel.dim()) * rel.abs().float()[None]


class _Relative(InsideAttention):
    kind = "relative"

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.table_k = torch.randn(9, D // H, generator=generator) * 0.3
        self.table_v = torch.randn(9, D // H, generator=generator) * 0.3

    def _rows(self, table: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return table[rel.clamp(-4, 4) + 4]  # (Lq, Lk, Dh)

    def scores(self, q: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bhqd,qkd->bhqk", q, self._rows(self.table_k, rel).to(q.dtype))

    def values_term(self, weights: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bhqk,qkd->bhqd", weights,
                            self._rows(self.table_v, rel).to(weights.dtype))


REFERENCE_POSITIONS = {"rotary": _Rotary, "bias": _Bias, "relative": _Relative}


class _ReferenceAttention(MultiHeadAttention):
    """Dense softmax attention through the kit's reference kernel (for blocks)."""

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=self.causal and not self.cross,
                            key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                            device=q.device)
        return self._dense(q, k, v, mask, offset=offset)


def _reference_norm() -> nn.Module:
    return nn.LayerNorm(D)


def _reference_ffn() -> nn.Module:
    return nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))


class _Seed(contextlib.ContextDecorator):
    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=[])
        self._fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)
