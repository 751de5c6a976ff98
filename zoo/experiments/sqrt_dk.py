"""``sqrt-dk``: softmax entropy with and without 1/sqrt(d_k), then sort with and without
it (scaled dot-product attention, "Attention Is All You Need", section 3.2.1)."""

from __future__ import annotations

import math

import torch

from .articles import REREAD
from .report import Panel, Report, cell
from .context import Context, first_step, mean, mean_curve, metric_values


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
        curve = mean_curve(group)
        rows.append({"d_k": f"sort, {name}", "entropy q·k": None,
                     "token accuracy": mean(metric_values(group, "token_accuracy")),
                     "sequence accuracy": mean(metric_values(group, "sequence_accuracy")),
                     "first step ≥ 99% (valid)": first_step(curve, 0.99)})
    acc = {name: mean(metric_values(group, "token_accuracy")) for name, group in runs.items()}
    first = {name: first_step(mean_curve(group), 0.99) for name, group in runs.items()}
    findings = [
        f"Without the scale the entropy (nats, 10 keys; uniform is {math.log(10):.2f}) falls "
        f"from {unscaled[0][1]:.3f} at d_k = 16 to {unscaled[-1][1]:.3f} at d_k = 1024; with "
        f"it, it stays between {min(h for _, h in scaled):.3f} and "
        f"{max(h for _, h in scaled):.3f}. The article printed {article[64]} at d_k = 64 and "
        f"{article[1024]} at 1024; we measure {dict(unscaled)[64]:.3f} and "
        f"{dict(unscaled)[1024]:.3f}.",
        f"Sorting with d_k = 64: 99% validation token accuracy first at step "
        f"{cell(first['scaled'])} scaled, {cell(first['unscaled'])} unscaled; after "
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
               {name: mean_curve(group) for name, group in runs.items()})])
