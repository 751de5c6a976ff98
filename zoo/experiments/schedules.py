"""``schedules``: translate-de-en with a fixed, a step-decay, a cosine-with-warmup and
the paper's inverse-square-root learning rate."""

from __future__ import annotations

from .articles import IN_PRACTICE
from .report import Panel, Report
from .context import Context, mean, mean_curve, metric_values


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
        rows.append({"schedule": name, "BLEU": mean(metric_values(group, "bleu")),
                     "chrF": mean(metric_values(group, "chrf")),
                     "test loss": mean(metric_values(group, "loss")),
                     "token accuracy": mean(metric_values(group, "token_accuracy")),
                     "article BLEU": ARTICLE_BLEU.get(name, float("nan"))})
        curves[name] = mean_curve(group)
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
