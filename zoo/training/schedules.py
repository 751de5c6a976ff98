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


def cosine_over_time(warmup: int, spent: Callable[[], float],
                     min_ratio: float = 0.0, total: int | None = None) -> Callable[[int], float]:
    """Half a cosine from 1 down to ``min_ratio`` over a time budget, capped by a linear
    warmup over the first ``warmup`` steps: ``min(step / warmup, cosine(progress))``, where
    ``progress`` is the share of the budget used so far (0 to 1): of the time, ``spent()``,
    or of the ``total`` steps (after the warmup), whichever is further on. A run ends at
    the bottom of the curve whichever budget stops it: its clock on a slow machine (budgeted
    training: Li et al. 2020), its steps on a fast one."""

    def factor(step: int) -> float:
        progress = spent()
        if total is not None:
            progress = max(progress, (step - warmup) / max(1, total - warmup))
        progress = min(1.0, max(0.0, progress))
        down = min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
        return min(step / warmup, down) if warmup else down

    return factor


def one_cycle(total: int, pct_start: float = 0.3, min_ratio: float = 0.0) -> Callable[[int], float]:
    """Smith & Topin's one-cycle: up linearly from 0 over pct_start, then cosine down."""
    return _up_then_cosine(max(1, int(total * pct_start)), total, min_ratio)


def step_decay(warmup: int, step_size: int, gamma: float) -> Callable[[int], float]:
    """Linear warmup, then the rate times ``gamma`` every ``step_size`` steps (step decay,
    “PyTorch实现Transformer：从Self-Attention到实战调优” sec. 4.1; without warmup the rates of ``torch.optim.lr_scheduler.StepLR``:
    updates 1 .. step_size at the peak, the next step_size at gamma times it, ...)."""

    def factor(step: int) -> float:
        if step <= warmup:
            return step / warmup
        return gamma ** ((step - 1 - warmup) // step_size)

    return factor


def make(spec, total: int, spent: Callable[[], float] | None = None) -> Callable[[int], float]:
    """The schedule a ``ScheduleSpec`` names, for a run of ``total`` steps; ``factor(n)``
    multiplies the peak rate at the n-th optimizer update (counted from 1, as the paper).
    A schedule ``over: time`` reads ``spent()``, the share of the time limit used, and ends
    at ``total`` steps too where the steps run out first."""
    if getattr(spec, "over", "steps") == "time":
        if spent is None:
            raise ValueError("a schedule over time needs the share of the time limit spent")
        return cosine_over_time(spec.warmup_steps, spent, spec.min_lr_ratio, total)
    if spec.name == "step":
        return step_decay(spec.warmup_steps, spec.step_size, spec.gamma)
    if spec.name == "inverse-sqrt":
        return inverse_sqrt(spec.warmup_steps)
    if spec.name == "constant":
        return constant(spec.warmup_steps)
    if spec.name == "cosine":
        return cosine(spec.warmup_steps, total, spec.min_lr_ratio)
    return one_cycle(total, spec.pct_start, spec.min_lr_ratio)


def lambda_lr(optimizer, spec, total: int,
              spent: Callable[[], float] | None = None) -> "torch.optim.lr_scheduler.LambdaLR":
    """A scheduler stepping ``optimizer`` through the schedule: the first update runs at
    ``factor(1)`` (the paper counts from 1), and each ``scheduler.step()`` moves one on."""
    import torch

    factor = make(spec, total, spent)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: factor(i + 1))
