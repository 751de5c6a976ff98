"""``scaling``: sort at three model sizes."""

from __future__ import annotations

from .articles import REREAD
from .report import Panel, Report
from .context import Context, mean, mean_curve, metric_values, spread


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
        acc = metric_values(group, "token_accuracy")
        rows.append({"model": name, "parameters": params, "token accuracy": mean(acc),
                     "± (seeds)": spread(acc),
                     "sequence accuracy": mean(metric_values(group, "sequence_accuracy")),
                     "ms/step": mean([r.seconds_per_step * 1000 for r in group])})
        curves[name] = mean_curve(group)
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
