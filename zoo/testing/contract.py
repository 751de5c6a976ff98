"""The conformance kit's contract: what a check is, the registry of checks, the width
and heads the kit builds components with, and how a check compares (a failed
comparison raises :class:`Failed`, which a case reports as a
:class:`ConformanceError` naming the component, the check and the difference)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import ZooError
from ..registry import Component

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


def check(family: str, claim: str | None = None):
    """Register the decorated function as a check of ``family`` (applying to members that
    claim ``claim``); its name, less a leading underscore, is the check's, its docstring
    the clause of the contract it holds a component to."""
    def add(fn: Callable[[Component, Any], None]) -> Callable[[Component, Any], None]:
        doc = (fn.__doc__ or "").strip()
        CHECKS.setdefault(family, []).append(Check(family, fn.__name__.removeprefix("_"), claim,
                                                   doc, fn))
        return fn
    return add


# -- what the checks compare ------------------------------------------------------------------
class Failed(AssertionError):
    """A comparison a check made that the component did not meet."""


def close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """``actual`` equals ``expected`` within :data:`TOLERANCE`, finite, of the same shape."""
    if actual.shape != expected.shape:
        raise Failed(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    diff = (actual.float() - expected.float()).abs()
    bound = TOLERANCE["atol"] + TOLERANCE["rtol"] * expected.float().abs()
    if not bool(torch.isfinite(actual).all()) or bool((diff > bound).any()):
        worst = int(diff.flatten().argmax())
        raise Failed(f"{what}: differs by up to {diff.max().item():.3g} (at flat index "
                      f"{worst}; allowed {TOLERANCE['atol']:g} + {TOLERANCE['rtol']:g}·|x|)")


def differs(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """``a`` and ``b`` differ (a change the component must not ignore)."""
    if torch.allclose(a.float(), b.float(), atol=1e-6, rtol=1e-5):
        raise Failed(f"{what}: nothing changed")


def shape(actual: torch.Tensor, expected: tuple[int, ...], what: str) -> None:
    """``actual`` has the ``expected`` shape and holds only finite values."""
    if tuple(actual.shape) != expected:
        raise Failed(f"{what}: shape {tuple(actual.shape)}, expected {expected}")
    if not bool(torch.isfinite(actual).all()):
        raise Failed(f"{what}: holds NaN or infinite values")


def gradients_reach(module: nn.Module, loss: torch.Tensor, what: str) -> None:
    """Back-propagating ``loss`` gives every trainable parameter a nonzero gradient."""
    loss.backward()
    dead = [n for n, p in module.named_parameters()
            if p.requires_grad and (p.grad is None or not bool(p.grad.abs().sum() > 0))]
    if dead:
        raise Failed(f"{what}: no gradient reaches {dead[:6]}")


class Seed(contextlib.ContextDecorator):
    """Run with torch's CPU generator seeded, and restore its state after."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self):
        self._fork = torch.random.fork_rng(devices=[])
        self._fork.__enter__()
        torch.manual_seed(self.seed)

    def __exit__(self, *exc):
        return self._fork.__exit__(*exc)
