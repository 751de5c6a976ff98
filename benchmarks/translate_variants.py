"""Train translate-de-en variants under the same time budget, one after the other,
and print their test scores side by side (the table in docs/training.md).

    .venv/bin/python benchmarks/translate_variants.py --minutes 10 --out runs/variants

Each variant is the built-in recipe with overrides; every run gets the whole
machine for the same number of minutes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import zoo

VARIANTS = {
    "post-norm, sinusoidal (the paper)": {},
    "pre-norm, sinusoidal": {"model.norm_placement": "pre"},
    "post-norm, RoPE": {"model.positional": "rope"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--out", default="runs/variants")
    parser.add_argument("--only", help="run only the variants whose name contains this")
    args = parser.parse_args()
    rows = []
    for i, (name, overrides) in enumerate(VARIANTS.items()):
        if args.only and args.only not in name:
            continue
        run_dir = Path(args.out) / f"variant-{i}"
        if (run_dir / "results.json").exists():
            results = json.loads((run_dir / "results.json").read_text())
        else:
            zoo.train("translate-de-en", run_dir=run_dir, progress=False,
                      overrides={**overrides, "train.time_limit_minutes": args.minutes})
            results = json.loads((run_dir / "results.json").read_text())
        rows.append((name, results))
    print(f"| variant ({args.minutes:g} min, 2 CPU cores) | steps | epochs | test BLEU | test chrF |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['step']} | {r['epochs']} | {r['test']['bleu']:.1f} | "
              f"{r['test']['chrf']:.1f} |")


if __name__ == "__main__":
    main()
