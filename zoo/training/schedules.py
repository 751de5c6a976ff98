"""Learning-rate schedules as multipliers of the peak rate, step -> factor."""

from __future__ import annotations

import math
from typing import Callable


def inverse_sqrt(warmup: int) -> Callable[[int], float]:
    """The paper's schedule (sec. 5.3): lrate = d^-0.5 * min(step^-0.5, step * warmup^-1.5),
    written as a multiple of its peak d^-0.5 * warmup^-0.5 (reached at step = warmup):
    min(step / warmup, sqrt(warmup / step))."""

    def factor(step: int) -> float:
        step = max(step, 1)
        if warmup == 0:
            return 1.0 / math.sqrt(step)
        return min(step / warmup, math.sqrt(warmup / step))

    return factor


def constant(warmup: int) -> Callable[[int], float]:
    """Linear warmup, then flat (the sorting article's schedule)."""
    return lambda step: min(1.0, step / warmup) if warmup else 1.0


def _up_then_cosine(up: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """Linear from 0 to 1 over ``up`` steps, then half a cosine down to ``min_ratio``."""

    def factor(step: int) -> float:
        if step < up:
            return step / up
        progress = min(1.0, (step - up) / max(1, total - up))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


def cosine(warmup: int, total: int, min_ratio: float = 0.0) -> Callable[[int], float]:
    """Linear warmup, then half a cosine down to ``min_ratio`` at ``total``."""
    return _up_then_cosine(warmup, total, min_ratio)


def one_cycle(total: int, pct_start: float = 0.3, min_ratio: float = 0.0) -> Callable[[int], float]:
    """Smith & Topin's one-cycle: up linearly from 0 over pct_start, then cosine down."""
    return _up_then_cosine(max(1, int(total * pct_start)), total, min_ratio)


def make(spec, total: int) -> Callable[[int], float]:
    """The schedule a ``ScheduleSpec`` names, for a run of ``total`` steps."""
    if spec.name == "inverse-sqrt":
        return inverse_sqrt(spec.warmup_steps)
    if spec.name == "constant":
        return constant(spec.warmup_steps)
    if spec.name == "cosine":
        return cosine(spec.warmup_steps, total, spec.min_lr_ratio)
    return one_cycle(total, spec.pct_start, spec.min_lr_ratio)
