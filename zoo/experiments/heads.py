"""``heads``: sort with 1, 2, 4, 8 and 16 heads at d_model 128 (multi-head attention,
"Attention Is All You Need", section 3.2.2)."""

from __future__ import annotations

import math

from .articles import REREAD
from .report import Panel, Report, cell
from .context import Context, first_step, mean, mean_curve, metric_values, spread


def heads(ctx: Context) -> Report:
    """Sort with 1 to 16 heads at d_model 128."""
    runs = {h: [ctx.train("sort", f"heads-{h}", seed, {**ctx.sort, "model.n_heads": h})
                for seed in range(ctx.seeds)] for h in (1, 2, 4, 8, 16)}
    rows = []
    for h, group in runs.items():
        acc = metric_values(group, "token_accuracy")
        width = group[0].model.settings.d_model if group[0].model is not None else 128
        rows.append({"heads": h, "head dim": width // h, "token accuracy": mean(acc),
                     "± (seeds)": spread(acc),
                     "sequence accuracy": mean(metric_values(group, "sequence_accuracy")),
                     "first step ≥ 99% (valid)": first_step(mean_curve(group), 0.99),
                     "ms/step": mean([r.seconds_per_step * 1000 for r in group])})
    best = max(rows, key=lambda r: r["token accuracy"])
    one = rows[0]
    first = "first step ≥ 99% (valid)"
    reached = [r[first] for r in rows if not math.isnan(r[first])]
    slowest = math.isnan(one[first]) or one[first] >= max(reached)
    lowest = one is min(rows, key=lambda r: r["token accuracy"])
    findings = [
        f"1 head: token accuracy {one['token accuracy']:.2%}, 99% on validation first at step "
        f"{cell(one[first])}; the best is {best['heads']} heads at "
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
               {f"{h} heads": mean_curve(group) for h, group in runs.items()}),
         Panel("final test token accuracy", "heads", "token accuracy",
               {"zoo": [(r["heads"], r["token accuracy"]) for r in rows]}, xscale="log")])
