"""The two articles' experiments, one command each: ``zoo experiment NAME``.

Each experiment runs end to end on this machine at settings that finish in
minutes on 2 CPU cores (``--seeds`` and ``--steps`` raise them; the defaults are
said in the output), and writes ``NAME.md`` (a table and the findings, beside
the article's own figures), ``NAME.json`` (the same, as data) and ``NAME.png``.
Nothing resumes: an experiment is cheap to run again. The findings are computed
from the measurements, so where ours disagree with the article the output says
so in numbers; ``docs/experiments.md`` shows each result with its command.

    zoo experiment --list
    zoo experiment sqrt-dk --out experiments/
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ._text import did_you_mean, quoted
from .errors import RecipeError, TrainingError
from .files import atomic_write_text
from .hardware import detect
from .registry import registry
from .training.config import apply_train_overrides, get_train_recipe
from .training.loop import train
from .training.runs import RunFolder, build_task

REREAD = "“Attention Is All You Need 重读笔记”"
"""The first article this project grew from, by its title."""
IN_PRACTICE = "“PyTorch实现Transformer：从Self-Attention到实战调优”"
"""The second article, by its title."""


# -- what an experiment gives ---------------------------------------------------------------------
@dataclass
class Panel:
    """One panel of the experiment's figure: named series of (x, y) points."""

    title: str
    xlabel: str
    ylabel: str
    series: dict[str, list[tuple[float, float]]]
    xscale: str = "linear"
    yscale: str = "linear"


@dataclass
class Report:
    """An experiment's outcome: its table, the findings in words, the article's figures
    beside ours, the settings it ran with and the panels of its figure."""

    experiment: str
    title: str
    source: str
    claim: str
    columns: list[str]
    rows: list[dict[str, Any]]
    findings: list[str]
    settings: dict[str, Any]
    panels: list[Panel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def command(self) -> str:
        """The command that reproduces it."""
        s = self.settings
        return (f"zoo experiment {self.experiment} --seeds {s['seeds']} --steps {s['steps']}"
                + (f" --device {s['device']}" if s["device"] != "cpu" else "")
                + "".join(f" --set {k}={v}" for k, v in s.get("overrides", {}).items()))

    def markdown(self) -> str:
        """The report as a markdown section (the docs page is these, one after another)."""
        lines = [f"## `{self.experiment}`: {self.title}", "",
                 f"**The article** ({self.source}): {self.claim}", "",
                 f"**Command**: `{self.command()}` ({self.settings['minutes']:.1f} minutes on "
                 f"{self.settings['machine']})", "", _table(self.columns, self.rows), "",
                 "**What we found**:", ""]
        lines += [f"- {finding}" for finding in self.findings]
        if self.notes:
            lines += ["", "**Notes**:", ""] + [f"- {note}" for note in self.notes]
        return "\n".join(lines) + "\n"

    def write(self, out: str | Path) -> dict[str, Path]:
        """``NAME.md``, ``NAME.json`` and ``NAME.png`` in folder ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = {kind: out / f"{self.experiment}.{kind}" for kind in ("md", "json", "png")}
        atomic_write_text(paths["md"], self.markdown())
        atomic_write_text(paths["json"], json.dumps(asdict(self), indent=2, default=str) + "\n")
        _draw(self, paths["png"])
        return paths


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "–" if value is None else str(value)


def _table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _draw(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = report.panels or [Panel(report.title, "", "", {})]
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for label, points in panel.series.items():
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, "o-" if len(points) < 12 else "-", label=label, lw=1.5, ms=4)
        ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel,
               xscale=panel.xscale, yscale=panel.yscale)
        ax.grid(alpha=0.3)
        if panel.series:
            ax.legend(fontsize=8)
    fig.suptitle(f"zoo experiment {report.experiment}: {report.title}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# -- running one ----------------------------------------------------------------------------------
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
    and a line printer."""

    def __init__(self, seeds: int, steps: int, device: str, scratch: Path,
                 say: Callable[[str], None], overrides: dict[str, Any] | None = None) -> None:
        self.seeds, self.steps, self.device, self.scratch, self.say = (
            seeds, steps, device, scratch, say)
        self.overrides = dict(overrides or {})
        """Training overrides applied last to every run (``--set``)."""

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
                           run_dir=run_dir, device=self.device, progress=False)
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
            self.say(f"    {_summary(trained, metric)}")
        return trained


def _summary(run: Trained, metric: str) -> str:
    if run.diverged:
        return f"diverged: {run.diverged}"
    shown = ", ".join(f"{k} {v:.4g}" for k, v in run.metrics.items())
    return f"test {shown}; {run.seconds_per_step * 1000:.0f} ms/step"


def _finite(values: list[float]) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]


def _mean(values: list[float]) -> float:
    values = _finite(values)
    return statistics.fmean(values) if values else float("nan")


def _spread(values: list[float]) -> float:
    values = _finite(values)
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def _mean_curve(runs: list[Trained]) -> list[tuple[float, float]]:
    """The validation curves of several seeds, averaged step by step."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, value in run.curve:
            by_step.setdefault(step, []).append(value)
    return [(step, statistics.fmean(values)) for step, values in sorted(by_step.items())]


def _first_step(curve: list[tuple[float, float]], level: float) -> float:
    """The first evaluated step whose value reaches ``level`` (NaN: never)."""
    return next((float(step) for step, value in curve if value >= level), float("nan"))


def _metric(runs: list[Trained], name: str) -> list[float]:
    return [r.metrics.get(name, float("nan")) for r in runs]


# -- the experiments ------------------------------------------------------------------------------
def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def sqrt_dk(ctx: Context) -> Report:
    """The entropy of softmax(q·k) with and without 1/sqrt(d_k), then sort training."""
    generator = torch.Generator().manual_seed(0)
    article = {64: 0.847, 256: 0.234, 512: 0.089, 1024: 0.023}
    rows, unscaled, scaled = [], [], []
    for d in (16, 32, 64, 128, 256, 512, 1024):
        q = torch.randn(2000, 1, d, generator=generator, dtype=torch.float64)
        k = torch.randn(2000, 10, d, generator=generator, dtype=torch.float64)
        s = (q * k).sum(-1)  # 10 keys per query, as the article's simulation
        h, h_scaled = (float(_entropy(torch.softmax(x, -1)).mean()) for x in (s, s / math.sqrt(d)))
        unscaled.append((d, h))
        scaled.append((d, h_scaled))
        rows.append({"d_k": d, "entropy q·k": h, "entropy q·k/√d_k": h_scaled,
                     "article (q·k)": article.get(d, float("nan"))})
    ctx.say("  entropies measured; training sort with d_k = 64 (2 heads of 128)")
    runs = {name: [ctx.train("sort", name, seed, {**ctx.sort, "model.n_heads": 2, **extra})
                   for seed in range(ctx.seeds)]
            for name, extra in (("scaled", {}), ("unscaled", {"model.attention.scale": 1.0}))}
    for name, group in runs.items():
        curve = _mean_curve(group)
        rows.append({"d_k": f"sort, {name}", "entropy q·k": None,
                     "token accuracy": _mean(_metric(group, "token_accuracy")),
                     "sequence accuracy": _mean(_metric(group, "sequence_accuracy")),
                     "first step ≥ 99% (valid)": _first_step(curve, 0.99)})
    acc = {name: _mean(_metric(group, "token_accuracy")) for name, group in runs.items()}
    first = {name: _first_step(_mean_curve(group), 0.99) for name, group in runs.items()}
    findings = [
        f"Without the scale the entropy (nats, 10 keys; uniform is {math.log(10):.2f}) falls "
        f"from {unscaled[0][1]:.3f} at d_k = 16 to {unscaled[-1][1]:.3f} at d_k = 1024; with "
        f"it, it stays between {min(h for _, h in scaled):.3f} and "
        f"{max(h for _, h in scaled):.3f}. The article printed {article[64]} at d_k = 64 and "
        f"{article[1024]} at 1024; we measure {dict(unscaled)[64]:.3f} and "
        f"{dict(unscaled)[1024]:.3f}.",
        f"Sorting with d_k = 64: 99% validation token accuracy first at step "
        f"{_cell(first['scaled'])} scaled, {_cell(first['unscaled'])} unscaled; after "
        f"{ctx.steps} steps {acc['scaled']:.2%} scaled, {acc['unscaled']:.2%} unscaled "
        f"(mean of {ctx.seeds} seed{'s' * (ctx.seeds > 1)}). "
        + ("Without the scale it learns more slowly" if first["unscaled"] > first["scaled"]
           or math.isnan(first["unscaled"]) else "The scale makes no difference in speed here")
        + (" but catches up: the projections learn to shrink the scores."
           if acc["unscaled"] >= acc["scaled"] - 0.005 else " and ends lower."),
    ]
    return Report(
        "sqrt-dk", "why attention divides by √d_k", f"{REREAD}, 'why √d_k'",
        "without the 1/√d_k scale the dot products grow with d_k and the softmax collapses "
        "onto one key: its entropy falls from 0.847 (d_k = 64) to 0.023 (d_k = 1024)",
        ["d_k", "entropy q·k", "entropy q·k/√d_k", "article (q·k)", "token accuracy",
         "sequence accuracy", "first step ≥ 99% (valid)"], rows, findings, {},
        [Panel("softmax entropy, 10 random keys", "d_k", "entropy (nats)",
               {"q·k": unscaled, "q·k/√d_k": scaled, "article, q·k": sorted(article.items())},
               xscale="log"),
         Panel("sort, validation token accuracy", "step", "token accuracy",
               {name: _mean_curve(group) for name, group in runs.items()})])


def heads(ctx: Context) -> Report:
    """Sort with 1 to 16 heads at d_model 128."""
    runs = {h: [ctx.train("sort", f"heads-{h}", seed, {**ctx.sort, "model.n_heads": h})
                for seed in range(ctx.seeds)] for h in (1, 2, 4, 8, 16)}
    rows = []
    for h, group in runs.items():
        acc = _metric(group, "token_accuracy")
        width = group[0].model.settings.d_model if group[0].model is not None else 128
        rows.append({"heads": h, "head dim": width // h, "token accuracy": _mean(acc),
                     "± (seeds)": _spread(acc),
                     "sequence accuracy": _mean(_metric(group, "sequence_accuracy")),
                     "first step ≥ 99% (valid)": _first_step(_mean_curve(group), 0.99),
                     "ms/step": _mean([r.seconds_per_step * 1000 for r in group])})
    best = max(rows, key=lambda r: r["token accuracy"])
    one = rows[0]
    first = "first step ≥ 99% (valid)"
    reached = [r[first] for r in rows if not math.isnan(r[first])]
    slowest = math.isnan(one[first]) or one[first] >= max(reached)
    lowest = one is min(rows, key=lambda r: r["token accuracy"])
    findings = [
        f"1 head: token accuracy {one['token accuracy']:.2%}, 99% on validation first at step "
        f"{_cell(one[first])}; the best is {best['heads']} heads at "
        f"{best['token accuracy']:.2%}. One head "
        + ("is the slowest to learn" if slowest else "is not the slowest to learn")
        + (" and ends lowest" if lowest else " and does not end lowest")
        + (", as the article says." if slowest and lowest else
           " (the article: slower, and a little worse)."),
        "4 and 8 heads: " + ", ".join(f"{r['token accuracy']:.2%}" for r in rows[2:4])
        + f"; 16 heads: {rows[4]['token accuracy']:.2%} (the article: 4 ≈ 8, 16 slightly "
          "better). Differences smaller than the spread over seeds are not findings.",
    ]
    return Report(
        "heads", "how many heads", f"{REREAD}, 'why 8 heads'",
        "1 head converges slower and ends a little worse; 4 heads about equal 8; 16 slightly "
        "better but costlier",
        ["heads", "head dim", "token accuracy", "± (seeds)", "sequence accuracy",
         "first step ≥ 99% (valid)", "ms/step"], rows, findings, {},
        [Panel("sort, validation token accuracy", "step", "token accuracy",
               {f"{h} heads": _mean_curve(group) for h, group in runs.items()}),
         Panel("final test token accuracy", "heads", "token accuracy",
               {"zoo": [(r["heads"], r["token accuracy"]) for r in rows]}, xscale="log")])


def _time_layer(layers: dict[str, torch.nn.Module], width: int, rounds: int = 7) -> dict[str, float]:
    """Median forward+backward time (µs) of each layer on (4096, width), interleaved."""
    x = torch.randn(4096, width, requires_grad=True)
    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(rounds):
        for name, layer in layers.items():
            start = time.perf_counter()
            for _ in range(20):
                layer(x).sum().backward()
            times[name].append((time.perf_counter() - start) / 20 * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def norms(ctx: Context) -> Report:
    """LayerNorm against RMSNorm: the layer alone, and whole sort runs."""
    rows, ratios = [], {}
    for width in (128, 512, 2048):
        layers = {name: registry.get("norm", name).build(None, dim=width)
                  for name in ("layernorm", "rmsnorm")}
        t = _time_layer(layers, width)
        ratios[width] = t["rmsnorm"] / t["layernorm"]
        rows.append({"what": f"norm layer alone, width {width}", "LayerNorm": t["layernorm"],
                     "RMSNorm": t["rmsnorm"], "RMSNorm / LayerNorm": ratios[width],
                     "unit": "µs fwd+bwd, 4096 rows"})
    ctx.say("  norm layers timed; training sort with each (alternating)")
    runs: dict[str, list[Trained]] = {"layernorm": [], "rmsnorm": []}
    for seed in range(ctx.seeds):  # alternate the order, so drift in the machine cancels
        order = ("layernorm", "rmsnorm") if seed % 2 == 0 else ("rmsnorm", "layernorm")
        for name in order:
            runs[name].append(ctx.train("sort", name, seed, {**ctx.sort, "model.norm": name}))
    ms = {name: _mean([r.seconds_per_step * 1000 for r in group]) for name, group in runs.items()}
    acc = {name: _mean(_metric(group, "token_accuracy")) for name, group in runs.items()}
    rows.append({"what": "sort training step", "LayerNorm": ms["layernorm"],
                 "RMSNorm": ms["rmsnorm"], "RMSNorm / LayerNorm": ms["rmsnorm"] / ms["layernorm"],
                 "unit": "ms per step"})
    rows.append({"what": "sort test token accuracy", "LayerNorm": acc["layernorm"],
                 "RMSNorm": acc["rmsnorm"], "RMSNorm / LayerNorm": acc["rmsnorm"] / acc["layernorm"],
                 "unit": f"after {ctx.steps} steps"})
    findings = [
        "The norm layer alone: RMSNorm takes "
        + ", ".join(f"{r:.2f}×" for r in ratios.values())
        + f" LayerNorm's time at widths {', '.join(map(str, ratios))} (the article: about 0.85×, "
          "'~15% faster').",
        f"In a whole sort training step the norms are a small part: RMSNorm's step takes "
        f"{ms['rmsnorm'] / ms['layernorm']:.2f}× LayerNorm's. Test token accuracy "
        f"{acc['rmsnorm']:.2%} against {acc['layernorm']:.2%}: "
        + ("the same quality within a point, as the article says."
           if abs(acc["rmsnorm"] - acc["layernorm"]) < 0.01 else "they differ by more than a point."),
    ]
    return Report(
        "norms", "LayerNorm or RMSNorm", f"{REREAD}, 'LayerNorm vs RMSNorm'",
        "RMSNorm is about 15% faster than LayerNorm, with almost the same quality",
        ["what", "LayerNorm", "RMSNorm", "RMSNorm / LayerNorm", "unit"], rows, findings, {},
        [Panel("norm layer alone", "width", "µs (fwd+bwd, 4096 rows)",
               {name: [(w, r[name]) for w, r in zip(ratios, rows)]
                for name in ("LayerNorm", "RMSNorm")}, xscale="log"),
         Panel("sort, validation token accuracy", "step", "token accuracy",
               {name: _mean_curve(group) for name, group in runs.items()})])


PRE_POST_RATES = (1e-3, 3e-3)
"""Peak learning rates of the pre-post experiment: the sort recipe's, and three times it."""


def pre_post(ctx: Context) -> Report:
    """Pre-LN against Post-LN at 6 + 6 layers, with and without warmup, at two rates."""
    warmup = max(1, ctx.steps // 3)
    runs, settings = {}, {}
    for placement in ("post", "pre"):
        for lr in PRE_POST_RATES:
            for steps_up in (0, warmup):
                label = f"{placement}-LN, lr {lr:g}, warmup {steps_up}"
                settings[label] = (f"{placement}-LN", lr, steps_up)
                runs[label] = [ctx.train("sort", label, seed, {
                    **ctx.sort, "model.encoder_layers": 6, "model.decoder_layers": 6,
                    "model.norm_placement": placement, "schedule.warmup_steps": steps_up,
                    "optimizer.lr": lr})
                    for seed in range(ctx.seeds)]
    rows = []
    for label, group in runs.items():
        placement, lr, up = settings[label]
        rows.append({"norm": placement, "peak lr": lr, "warmup steps": up,
                     "token accuracy": _mean(_metric(group, "token_accuracy")),
                     "sequence accuracy": _mean(_metric(group, "sequence_accuracy")),
                     "first step ≥ 99% (valid)": _first_step(_mean_curve(group), 0.99),
                     "final train loss": _mean([r.losses[-1][1] if r.losses else float("nan")
                                                for r in group]),
                     "diverged": sum(r.diverged is not None for r in group)})
    acc = {(r["norm"], r["peak lr"], r["warmup steps"]): r["token accuracy"] for r in rows}
    cases = [(lr, up) for lr in PRE_POST_RATES for up in (0, warmup)]
    wins = [case for case in cases if acc[("pre-LN", *case)] > acc[("post-LN", *case)]]
    findings = [
        f"Test token accuracy after {ctx.steps} steps, 12 layers (Post-LN / Pre-LN): "
        + "; ".join(f"lr {lr:g}, warmup {up}: {acc[('post-LN', lr, up)]:.2%} / "
                    f"{acc[('pre-LN', lr, up)]:.2%}" for lr, up in cases) + ".",
        f"Pre-LN is ahead in {len(wins)} of the {len(cases)} settings"
        + (", the article's finding: it tolerates the higher rate and no warmup better."
           if len(wins) > len(cases) / 2 else
           ": on this small task Post-LN trains as well at these depths and rates; the "
           "instability the article warns of grows with depth and learning rate."),
    ]
    return Report(
        "pre-post", "Pre-LN or Post-LN", f"{REREAD}, 'Pre-LN vs Post-LN'",
        "Pre-LN trains more easily than Post-LN (the paper's); modern models use Pre-LN",
        ["norm", "peak lr", "warmup steps", "token accuracy", "sequence accuracy",
         "first step ≥ 99% (valid)", "final train loss", "diverged"], rows, findings, {},
        [Panel("sort (6+6 layers), validation token accuracy", "step", "token accuracy",
               {label: _mean_curve(group) for label, group in runs.items()}),
         Panel("training loss", "step", "loss",
               {label: group[0].losses for label, group in runs.items()}, yscale="log")])


POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "t5-bias", "shaw", "xl")
LENGTHS = (8, 16, 32, 64)


def _sort_test(length: int) -> Any:
    """The sort task with 300 test sequences of ``length`` digits (its own seed)."""
    recipe = apply_train_overrides(get_train_recipe("sort"), {
        "task.seq_len": length, "task.num_samples": 1, "task.valid_samples": 1,
        "task.test_samples": 300, "train.seed": 12345})
    task = build_task(recipe, None)
    task.prepare()
    return task


def _evaluate_at(trained: Trained, task: Any, device: str) -> dict[str, float]:
    """Test metrics on ``task`` (another sequence length); NaN where the model has no
    positions that far (learned positions stop at the max_len the task set: its training
    length)."""
    trained.model.eval()
    try:
        return task.evaluate(trained.model, "test", device=device)
    except ValueError as exc:
        if "positions up to" not in str(exc):
            raise
        return {"token_accuracy": float("nan"), "sequence_accuracy": float("nan")}


def positions(ctx: Context) -> Report:
    """Sort trained at length 8, tested at 8, 16, 32 and 64, for each position."""
    rows, series = [], {}
    tests = {length: _sort_test(length) for length in LENGTHS}
    for name in POSITIONS:
        runs = [ctx.train("sort", name, seed, {**ctx.sort, "model.positional": name})
                for seed in range(ctx.seeds)]
        row: dict[str, Any] = {"positions": name}
        for length in LENGTHS:
            scores = [_evaluate_at(r, tests[length], ctx.device) for r in runs
                      if r.model is not None]
            row[f"L={length}"] = _mean([s["token_accuracy"] for s in scores])
            row[f"exact L={length}"] = _mean([s["sequence_accuracy"] for s in scores])
        ctx.say("    " + ", ".join(f"L={n}: {row[f'L={n}']:.2%}" for n in LENGTHS))
        rows.append(row)
        series[name] = [(n, row[f"L={n}"]) for n in LENGTHS]
    longer = [r for r in rows if not math.isnan(r["L=32"])]
    best = max(longer, key=lambda r: r["L=32"])
    worst = min(longer, key=lambda r: r["L=32"])
    findings = [
        f"At the trained length (8) token accuracy ranges from "
        f"{min(r['L=8'] for r in rows):.1%} to {max(r['L=8'] for r in rows):.1%}; at 4× the "
        f"length the best is {best['positions']} ({best['L=32']:.1%}), the worst "
        f"{worst['positions']} ({worst['L=32']:.1%}).",
        "Learned positions cannot be asked past their table (the task sets max_len to the "
        "training length, 10 tokens): the '–' cells. Sinusoidal positions reach any length "
        "but their unseen vectors are out of distribution; the relative schemes (rope, alibi, "
        "t5-bias, shaw, xl) depend on offsets only. How far each carries is the table (the "
        "article states the point without numbers).",
    ]
    columns = ["positions", *[f"L={n}" for n in LENGTHS], *[f"exact L={n}" for n in LENGTHS]]
    return Report(
        "positions", "positions and length extrapolation", "articles 000 and 003, §3",
        "the choice of positional encoding decides how a model extrapolates to longer "
        "sequences than it was trained on",
        columns, rows, findings, {},
        [Panel("sort trained at length 8: test token accuracy", "test length",
               "token accuracy", series, xscale="log")],
        [f"Token accuracy is teacher-forced; 'exact' is greedy whole-sequence accuracy. Test "
         f"sets: 300 sequences per length."])


SCHEDULES = {
    "fixed": {"schedule.name": "constant", "schedule.warmup_steps": 0},
    "step decay": {"schedule.name": "step", "schedule.warmup_steps": 0},
    "cosine + warmup": {"schedule.name": "cosine"},
    "inverse sqrt (paper)": {"schedule.name": "inverse-sqrt"},
}
ARTICLE_BLEU = {"fixed": 28.3, "step decay": 30.1, "cosine + warmup": 32.7}


def schedules(ctx: Context) -> Report:
    """translate-de-en with four schedules, equal steps and peak rate."""
    warmup = max(1, ctx.steps // 10)
    rows, curves, rates = [], {}, {}
    for name, extra in SCHEDULES.items():
        overrides = {"task.beam_size": 1, "train.eval_limit": 200,
                     "schedule.warmup_steps": warmup, "schedule.step_size": max(1, ctx.steps // 3),
                     "schedule.gamma": 0.5, **extra}
        group = [ctx.train("translate-de-en", name, seed, overrides)
                 for seed in range(ctx.seeds)]
        rows.append({"schedule": name, "BLEU": _mean(_metric(group, "bleu")),
                     "chrF": _mean(_metric(group, "chrf")),
                     "test loss": _mean(_metric(group, "loss")),
                     "token accuracy": _mean(_metric(group, "token_accuracy")),
                     "article BLEU": ARTICLE_BLEU.get(name, float("nan"))})
        curves[name] = _mean_curve(group)
        rates[name] = group[0].rates
    order = sorted(rows, key=lambda r: r["test loss"])
    findings = [
        f"By test loss (lower is better) after {ctx.steps} steps: "
        + " < ".join(f"{r['schedule']} {r['test loss']:.3f}" for r in order) + ".",
        "BLEU: " + ", ".join(f"{r['schedule']} {r['BLEU']:.1f}" for r in rows)
        + " (the article, IWSLT after full training: fixed 28.3 < step 30.1 < cosine 32.7). "
          "At a budget of minutes on 2 cores BLEU is small and noisy; the loss ranks the "
          "schedules more reliably. `--steps` runs longer.",
    ]
    return Report(
        "schedules", "learning-rate schedules", f"{IN_PRACTICE}, §4.1",
        "on IWSLT German-English: fixed rate BLEU 28.3 < step decay 30.1 < cosine annealing "
        "32.7",
        ["schedule", "BLEU", "chrF", "test loss", "token accuracy", "article BLEU"], rows,
        findings, {},
        [Panel("learning rate", "step", "lr", rates),
         Panel("translate-de-en, validation BLEU (greedy)", "step", "BLEU", curves)],
        [f"translate-de-en's model and peak rate for all four; warmup {warmup} steps for "
         f"cosine and inverse sqrt; step decay halves the rate every {max(1, ctx.steps // 3)} "
         "steps; greedy decoding for speed; validation on 200 sentences."])


SIZES = {
    "small": {"model.d_model": 32, "model.n_heads": 2, "model.encoder_layers": 2,
              "model.decoder_layers": 2, "model.d_ff": 64},
    "medium": {"model.d_model": 64, "model.n_heads": 4, "model.encoder_layers": 2,
               "model.decoder_layers": 2, "model.d_ff": 128},
    "large (the article's)": {},
}


def scaling(ctx: Context) -> Report:
    """Sort at three model sizes."""
    rows, curves = [], {}
    for name, extra in SIZES.items():
        group = [ctx.train("sort", name, seed, {**ctx.sort, **extra})
                 for seed in range(ctx.seeds)]
        params = sum(p.numel() for p in group[0].model.parameters()) if group[0].model else 0
        acc = _metric(group, "token_accuracy")
        rows.append({"model": name, "parameters": params, "token accuracy": _mean(acc),
                     "± (seeds)": _spread(acc),
                     "sequence accuracy": _mean(_metric(group, "sequence_accuracy")),
                     "ms/step": _mean([r.seconds_per_step * 1000 for r in group])})
        curves[name] = _mean_curve(group)
    gains = [(b["token accuracy"] - a["token accuracy"], b["parameters"] / a["parameters"])
             for a, b in zip(rows, rows[1:])]
    findings = [
        "Token accuracy by size: " + ", ".join(
            f"{r['model']} ({r['parameters']:,} parameters) {r['token accuracy']:.2%}"
            for r in rows) + ".",
        "Each step up multiplies the parameters by "
        + " and ".join(f"{ratio:.1f}×" for _, ratio in gains) + " and adds "
        + " and ".join(f"{gain * 100:+.1f} points" for gain, _ in gains)
        + (": past the middle size more parameters buy nothing on this task, the article's "
           "point at its strongest." if gains[-1][0] <= 0 < gains[0][0] else
           ": the gains shrink, as the article says." if gains[-1][0] < gains[0][0] else
           ": the gains do not shrink here."),
    ]
    return Report(
        "scaling", "model size on a simple task", f"{REREAD}, 'performance by configuration'",
        "gains from more parameters diminish: for a simple task a small model is enough",
        ["model", "parameters", "token accuracy", "± (seeds)", "sequence accuracy", "ms/step"],
        rows, findings, {},
        [Panel("sort, validation token accuracy", "step", "token accuracy", curves),
         Panel("test token accuracy by size", "parameters", "token accuracy",
               {"zoo": [(r["parameters"], r["token accuracy"]) for r in rows]}, xscale="log")])


@dataclass(frozen=True)
class Experiment:
    """A named experiment: what it checks, its default seeds and steps, and its function."""

    name: str
    summary: str
    seeds: int
    steps: int
    minutes: float
    """About how long it takes at its defaults on 2 CPU cores."""
    run: Callable[[Context], Report]


EXPERIMENTS = {e.name: e for e in (
    Experiment("sqrt-dk", "softmax entropy with and without 1/√d_k; sort with and without it",
               2, 600, 2, sqrt_dk),
    Experiment("heads", "sort with 1, 2, 4, 8 and 16 heads at d_model 128", 2, 600, 5.5, heads),
    Experiment("norms", "LayerNorm and RMSNorm: the layer alone, and sort training", 2, 600, 3,
               norms),
    Experiment("pre-post", "Pre-LN and Post-LN at 12 layers, with and without warmup, at two "
               "peak rates", 1, 600, 9, pre_post),
    Experiment("positions", "sort trained at length 8, tested at 8 to 64, for 7 positions", 1,
               800, 6, positions),
    Experiment("schedules", "translate-de-en with fixed, step, cosine and inverse-sqrt rates", 1,
               250, 12, schedules),
    Experiment("scaling", "sort at three model sizes", 2, 600, 2, scaling),
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
                   say: Callable[[str], None] = print) -> Report:
    """Run experiment ``name`` and, when ``out`` is given, write its files there.
    ``overrides`` (training overrides, as ``zoo train --set``) apply to every run, after
    the experiment's own."""
    experiment = get_experiment(name)
    seeds = experiment.seeds if seeds is None else seeds
    steps = experiment.steps if steps is None else steps
    if seeds < 1 or steps < 1:
        raise RecipeError(f"--seeds and --steps are at least 1, got {seeds} and {steps}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = detect().cpu
    say(f"zoo experiment {name}: {experiment.summary}; {seeds} seed{'s' * (seeds > 1)}, "
        f"{steps} steps, {device} (defaults: {experiment.seeds} seeds, {experiment.steps} "
        f"steps, about {experiment.minutes:g} minutes on 2 CPU cores)")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"zoo-experiment-{name}-") as scratch:
        report = experiment.run(Context(seeds, steps, device, Path(scratch), say, overrides))
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
