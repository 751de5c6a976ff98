"""``norms``: LayerNorm (Ba et al. 2016) against RMSNorm (Zhang and Sennrich 2019): the
layer alone, timed, and whole sort runs."""

from __future__ import annotations

import statistics
import time

import torch

from ..registry import registry
from .articles import REREAD
from .report import Panel, Report
from .context import Context, Trained, mean, mean_curve, metric_values


def _time_layer(layers: dict[str, torch.nn.Module], width: int, rounds: int = 7) -> dict[str, float]:
    """Median forward+backward time (µs) of each layer on (4096, width), interleaved:
    rounds of about the same work at each width (20 calls at 128, 2 at 2048)."""
    x = torch.randn(4096, width, requires_grad=True)
    calls = max(2, 20 * 128 // width)
    times: dict[str, list[float]] = {name: [] for name in layers}
    for _ in range(rounds):
        for name, layer in layers.items():
            start = time.perf_counter()
            for _ in range(calls):
                layer(x).sum().backward()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
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
    ms = {name: mean([r.seconds_per_step * 1000 for r in group]) for name, group in runs.items()}
    acc = {name: mean(metric_values(group, "token_accuracy")) for name, group in runs.items()}
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
               {name: mean_curve(group) for name, group in runs.items()})])
