"""Running one experiment: the context it is handed (seeds, steps, device, a scratch
folder, overrides), the trained runs it gets back, and the statistics over seeds."""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TrainingError
from ..training.loop import train
from ..training.runs import RunFolder


@dataclass
class Trained:
    """One training run of an experiment: test metrics, validation curve, time."""

    label: str
    seed: int
    metrics: dict[str, float]
    curve: list[tuple[int, float]]
    """(step, validation metric) at each evaluation."""
    losses: list[tuple[int, float]]
    """(step, training loss) at each logged step."""
    rates: list[tuple[int, float]]
    """(step, learning rate) at each logged step."""
    seconds_per_step: float
    model: Any = None
    task: Any = None
    diverged: str | None = None


class Context:
    """What an experiment is run with: seeds, steps, device, a scratch folder for its runs,
    a line printer, and whether each run shows its progress bar."""

    def __init__(self, seeds: int, steps: int, device: str, scratch: Path,
                 say: Callable[[str], None], overrides: dict[str, Any] | None = None,
                 *, progress: bool = False) -> None:
        self.seeds, self.steps, self.device, self.scratch, self.say = (
            seeds, steps, device, scratch, say)
        self.overrides = dict(overrides or {})
        """Training overrides applied last to every run (``--set``)."""
        self.progress = progress
        """Whether each run shows ``zoo train``'s progress bar (on standard error)."""

    @property
    def sort(self) -> dict[str, Any]:
        """The sort recipe cut for a quick experiment: smaller validation and test sets,
        and warmup over the first sixth of the run (the recipe's 400 steps would take
        most of a short one)."""
        return {"task.valid_samples": 500, "task.test_samples": 1000,
                "schedule.warmup_steps": max(1, self.steps // 6)}

    def train(self, recipe: str, label: str, seed: int, overrides: dict[str, Any]) -> Trained:
        """Train ``recipe`` for the context's steps with ``overrides`` and seed ``seed``, no
        early stop, twelve validations; a NaN loss is recorded, not raised."""
        steps = self.steps
        run_dir = self.scratch / f"{label}-seed{seed}".replace("/", "_")
        # fixed steps, no clock: a schedule over time becomes the same curve over the steps
        base = {"train.steps": steps, "train.target": None, "train.time_limit_minutes": None,
                "schedule.over": "steps",
                "train.eval_every": max(1, steps // 12), "train.checkpoint_every": steps,
                "train.log_every": max(1, steps // 100), "train.seed": seed}
        self.say(f"  {label}, seed {seed}: {steps} steps")
        start = time.perf_counter()
        diverged = None
        try:
            result = train(recipe, overrides={**base, **overrides, **self.overrides},
                           run_dir=run_dir, device=self.device, progress=self.progress)
            metrics, model, task = result.metrics, result.model, result.task
        except TrainingError as exc:
            diverged, metrics, model, task = str(exc).split(".")[0], {}, None, None
        rows = RunFolder(run_dir).metrics()
        metric = task.metric if task is not None else "token_accuracy"
        curve = [(r["step"], r[metric]) for r in rows if r.get("split") == "valid" and metric in r]
        logged = [r for r in rows if r.get("split") == "train"]
        done = logged[-1]["step"] if logged else 0
        seconds = (json.loads((run_dir / "results.json").read_text())["seconds"]
                   if (run_dir / "results.json").exists() else time.perf_counter() - start)
        trained = Trained(label, seed, metrics, curve, [(r["step"], r["loss"]) for r in logged],
                          [(r["step"], r["lr"]) for r in logged], seconds / max(done, 1),
                          model, task, diverged)
        if logged:
            self.say(f"    {run_summary(trained, metric)}")
        return trained


def run_summary(run: Trained, metric: str) -> str:
    """One run in a line: its test metrics and time per step, or why it diverged."""
    if run.diverged:
        return f"diverged: {run.diverged}"
    shown = ", ".join(f"{k} {v:.4g}" for k, v in run.metrics.items())
    return f"test {shown}; {run.seconds_per_step * 1000:.0f} ms/step"


def finite(values: list[float]) -> list[float]:
    """The values that are numbers (no None, no NaN from a diverged run)."""
    return [v for v in values if v is not None and not math.isnan(v)]


def mean(values: list[float]) -> float:
    """The mean of the finite values (NaN: none)."""
    values = finite(values)
    return statistics.fmean(values) if values else float("nan")


def spread(values: list[float]) -> float:
    """The sample standard deviation of the finite values (NaN: fewer than two)."""
    values = finite(values)
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def mean_curve(runs: list[Trained]) -> list[tuple[float, float]]:
    """The validation curves of several seeds, averaged step by step."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, value in run.curve:
            by_step.setdefault(step, []).append(value)
    return [(step, statistics.fmean(values)) for step, values in sorted(by_step.items())]


def first_step(curve: list[tuple[float, float]], level: float) -> float:
    """The first evaluated step whose value reaches ``level`` (NaN: never)."""
    return next((float(step) for step, value in curve if value >= level), float("nan"))


def metric_values(runs: list[Trained], name: str) -> list[float]:
    """One test metric of each run (NaN where a run has none)."""
    return [r.metrics.get(name, float("nan")) for r in runs]
