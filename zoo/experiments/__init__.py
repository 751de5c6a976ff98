"""The two articles' experiments, one command each: ``zoo experiment NAME``.

Each experiment runs end to end on this machine at settings that finish in
minutes to tens of minutes on 2 CPU cores (``--seeds`` and ``--steps`` raise them;
the defaults are said in the output), each training run with ``zoo train``'s
progress bar, and writes ``NAME.md`` (a table and the findings, beside
the article's own figures), ``NAME.json`` (the same, as data) and ``NAME.png``.
Nothing resumes: an experiment is cheap to run again. The findings are computed
from the measurements, so where ours disagree with the article the output says
so in numbers; ``docs/experiments.md`` shows each result with its command.

    zoo experiment --list
    zoo experiment sqrt-dk --out experiments/
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._text import did_you_mean, quoted
from ..errors import RecipeError
from ..hardware import detect
from .context import Context
from .report import Panel, Report
from . import heads, norms, positions, pre_post, scaling, schedules, sqrt_dk

__all__ = ["Experiment", "EXPERIMENTS", "MEASURED_ON", "Panel", "Report", "get_experiment",
           "run_experiment"]


@dataclass(frozen=True)
class Experiment:
    """A named experiment: what it checks, its default seeds and steps, and its function."""

    name: str
    summary: str
    seeds: int
    steps: int
    minutes: float
    """Roughly how long it takes at its defaults on :data:`MEASURED_ON` (the reports of
    ``docs/experiments.md``); a CPU without AVX-512, or one shared with other work,
    takes several times longer (sqrt-dk about 8 minutes a run, four runs, on a 2-core
    AMD EPYC with AVX2 only)."""
    run: Callable[[Context], Report]


MEASURED_ON = "a 2-core AMD EPYC with AVX-512"
"""The machine :attr:`Experiment.minutes` were measured on."""

EXPERIMENTS = {e.name: e for e in (
    Experiment("sqrt-dk", "softmax entropy with and without 1/√d_k; sort with and without it",
               2, 600, 2, sqrt_dk.sqrt_dk),
    Experiment("heads", "sort with 1, 2, 4, 8 and 16 heads at d_model 128", 2, 600, 5.5,
               heads.heads),
    Experiment("norms", "LayerNorm and RMSNorm: the layer alone, and sort training", 2, 600, 3,
               norms.norms),
    Experiment("pre-post", "Pre-LN and Post-LN at 12 layers, with and without warmup, at two "
               "peak rates", 1, 600, 9, pre_post.pre_post),
    Experiment("positions", "sort trained at length 8, tested at 8 to 64, for 7 positions", 1,
               800, 6, positions.positions),
    Experiment("schedules", "translate-de-en with fixed, step, cosine and inverse-sqrt rates", 1,
               250, 12, schedules.schedules),
    Experiment("scaling", "sort at three model sizes", 2, 600, 2, scaling.scaling),
)}
"""Every experiment, by the name ``zoo experiment`` takes."""


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name lists the known ones."""
    if name not in EXPERIMENTS:
        raise RecipeError(f"No experiment {name!r}.{did_you_mean(name, EXPERIMENTS)} "
                          f"Experiments: {quoted(list(EXPERIMENTS))}.")
    return EXPERIMENTS[name]


def run_experiment(name: str, *, seeds: int | None = None, steps: int | None = None,
                   device: str | None = None, out: str | Path | None = None,
                   overrides: dict[str, Any] | None = None,
                   say: Callable[[str], None] = print, progress: bool = False) -> Report:
    """Run experiment ``name`` and, when ``out`` is given, write its files there.
    ``overrides`` (training overrides, as ``zoo train --set``) apply to every run, after
    the experiment's own. ``progress`` shows each training run's progress bar (``zoo
    train``'s, on standard error)."""
    experiment = get_experiment(name)
    seeds = experiment.seeds if seeds is None else seeds
    steps = experiment.steps if steps is None else steps
    if seeds < 1 or steps < 1:
        raise RecipeError(f"--seeds and --steps are at least 1, got {seeds} and {steps}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = detect().cpu
    say(f"zoo experiment {name}: {experiment.summary}; {seeds} seed{'s' * (seeds > 1)}, "
        f"{steps} steps, {device} (defaults: {experiment.seeds} seeds, {experiment.steps} "
        f"steps, roughly {experiment.minutes:g} minutes on {MEASURED_ON})")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"zoo-experiment-{name}-") as scratch:
        report = experiment.run(Context(seeds, steps, device, Path(scratch), say, overrides,
                                        progress=progress))
    report.settings = {"seeds": seeds, "steps": steps, "device": device,
                       "minutes": (time.perf_counter() - start) / 60,
                       "machine": f"{cpu.name}, {cpu.cores} cores" if device == "cpu"
                       else torch.cuda.get_device_name(device),
                       "torch": torch.__version__}
    if (seeds, steps) != (experiment.seeds, experiment.steps):
        report.notes.append(f"Run with {seeds} seed(s) and {steps} steps (defaults: "
                            f"{experiment.seeds} and {experiment.steps}).")
    if overrides:
        report.settings["overrides"] = dict(overrides)
        report.notes.append("Every run with " + ", ".join(f"{k}={v}" for k, v in
                                                          overrides.items()) + ".")
    if out is not None:
        report.write(out)
    return report
