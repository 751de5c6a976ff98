"""``positions``: sort trained at length 8 and tested at 8 to 64 for seven position
encodings (sinusoidal, learned, RoPE, ALiBi, T5 bias, Shaw, Transformer-XL)."""

from __future__ import annotations

import math
from typing import Any

from ..training.config import apply_train_overrides, get_train_recipe
from ..training.runs import build_task
from .report import Panel, Report
from .context import Context, Trained, mean


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
            row[f"L={length}"] = mean([s["token_accuracy"] for s in scores])
            row[f"exact L={length}"] = mean([s["sequence_accuracy"] for s in scores])
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
        ["Token accuracy is teacher-forced; 'exact' is greedy whole-sequence accuracy. Test "
         "sets: 300 sequences per length."])
