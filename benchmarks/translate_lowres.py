"""The low-resource ablation of translate-de-en (the table in docs/training.md):
Sennrich & Zhang's practices added one at a time, each row the row above plus one
change, every row trained for the same minutes on the whole machine, one after the
other, and scored on the test split (sacreBLEU, beam 4).

    .venv/bin/python benchmarks/translate_lowres.py --minutes 10 --out runs/lowres

A row whose run folder already has results.json is read, not trained again;
``--only N`` trains and prints rows up to N. ``--trial NAME`` instead trains today's
recipe with one change of ``TRIALS`` (for 30-minute budgets):

    .venv/bin/python benchmarks/translate_lowres.py --minutes 30 --trial regularise
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import zoo

# Each row: (what changed, the overrides that change adds to the row above).
ROWS: list[tuple[str, dict]] = [
    ("the recipe before issue 15 (dropout 0.3, BPE 4000, lr 1e-3)",
     {"model.dropout": 0.3, "task.vocab_size": 4000, "optimizer.lr": 1e-3,
      "schedule.name": "inverse-sqrt", "schedule.over": "steps", "schedule.warmup_steps": 400,
      "train.batch_by_length": False}),
    ("dropout 0.3 -> 0.1", {"model.dropout": 0.1}),
    ("batches of sentences of similar length (train.batch_by_length)",
     {"train.batch_by_length": True}),
    ("cosine over the time limit (schedule.over: time), not inverse square root",
     {"schedule.name": "cosine", "schedule.over": "time"}),
    ("lr 1e-3 -> 2e-3", {"optimizer.lr": 2e-3}),
]


TRIALS: dict[str, tuple[str, dict]] = {
    "recipe": ("today's recipe (rows 1-4)", {}),
    "regularise": ("dropout 0.1 -> 0.3, and word dropout 0.1 (task.word_dropout)",
                   {"model.dropout": 0.3, "task.word_dropout": 0.1}),
    "lexicon": ("50,000 of the dictionary's word and phrase pairs added (task.lexicon)",
                {"task.lexicon": 50000}),
    "bpe-2000": ("BPE vocabulary 4000 -> 2000 (task.vocab_size)", {"task.vocab_size": 2000}),
}
"""Changes tried one at a time on top of today's recipe (``--trial NAME``), for budgets
(30 minutes) where the 10-minute rows cannot rank them."""


def cumulative(upto: int) -> list[tuple[str, dict]]:
    """Each row's label and its whole set of overrides (its own and every row's above)."""
    rows, overrides = [], {}
    for label, change in ROWS[: upto + 1]:
        overrides = {**overrides, **change}
        rows.append((label, dict(overrides)))
    return rows


def averaged(run_dir: Path, last: int) -> dict:
    """The test scores of a row's run with its final model replaced by the mean of its last
    ``last`` checkpoints (what ``train.average_checkpoints`` makes), without training again."""
    from zoo.training.checkpoint import average_checkpoints, checkpoints
    from zoo.training.runs import load_run

    run = load_run(run_dir)
    paths = checkpoints(run_dir)[-last:]
    if len(paths) < last:
        raise SystemExit(f"{run_dir} keeps {len(paths)} checkpoints; the row needs {last}")
    average_checkpoints(run.model, paths)
    return run.task.evaluate(run.model.eval(), "test")


def train_row(run_dir: Path, overrides: dict, minutes: float) -> dict:
    """The results of translate-de-en with ``overrides`` for ``minutes``, trained unless
    ``run_dir`` already holds them."""
    if not (run_dir / "results.json").exists():
        zoo.train("translate-de-en", run_dir=run_dir, progress=False,
                  overrides={**overrides, "train.time_limit_minutes": minutes})
    return json.loads((run_dir / "results.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--out", default="runs/lowres")
    parser.add_argument("--only", type=int, default=len(ROWS) - 1,
                        help="train and print rows 0..N")
    parser.add_argument("--average", type=int, metavar="K",
                        help="then score row N's run with the mean of its last K checkpoints")
    parser.add_argument("--average-run", metavar="RUN",
                        help="with --average: another run folder (e.g. a 30-minute run)")
    parser.add_argument("--trial", choices=list(TRIALS), action="append", default=[],
                        help="instead of the rows: today's recipe with this one change "
                        "(OUT/trial-NAME); repeatable")
    args = parser.parse_args()
    if args.trial:
        print(f"| trial ({args.minutes:g} min each, on top of today's recipe) | steps | "
              "seconds | test BLEU | test chrF |")
        print("|---|---|---|---|---|")
        for name in args.trial:
            label, change = TRIALS[name]
            r = train_row(Path(args.out) / f"trial-{name}", change, args.minutes)
            print(f"| {label} | {r['step']:,} | {r['seconds']:,.0f} | "
                  f"{r['test']['bleu']:.2f} | {r['test']['chrf']:.2f} |", flush=True)
        return
    print(f"| row | change ({args.minutes:g} min each, on top of the row above) | steps | "
          "seconds | test BLEU | test chrF |")
    print("|---|---|---|---|---|---|")
    run_dir = None  # the last row's, which --average reads unless --average-run names one
    for i, (label, overrides) in enumerate(cumulative(args.only)):
        run_dir = Path(args.out) / f"row-{i}"
        r = train_row(run_dir, overrides, args.minutes)
        print(f"| {i} | {label} | {r['step']:,} | {r['seconds']:,.0f} | "
              f"{r['test']['bleu']:.2f} | {r['test']['chrf']:.2f} |", flush=True)
    if args.average:
        if args.average_run is None and run_dir is None:
            raise SystemExit("--average needs --average-run, or rows trained in this run")
        run_dir = Path(args.average_run or run_dir)
        r = json.loads((run_dir / "results.json").read_text())
        test = averaged(run_dir, args.average)
        print(f"| | {run_dir}: its final model the mean of its last {args.average} "
              f"checkpoints | {r['step']:,} | {r['seconds']:,.0f} | {test['bleu']:.2f} | "
              f"{test['chrf']:.2f} |")


if __name__ == "__main__":
    main()
