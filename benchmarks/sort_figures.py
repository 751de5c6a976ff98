"""The figures the README and docs/training.md quote for `zoo train sort`, measured:
the wall time of the whole command (start-up included), the steps and epochs it ran,
and its test metrics. Run it before a release, on a quiet machine, and copy its line.

    python benchmarks/sort_figures.py [--runs 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure() -> dict:
    """One fresh `zoo train sort` in a temporary folder."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "sort"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zoo", "train", "sort", "--out", str(run),
                        "--no-progress"], check=True, capture_output=True, text=True)
        wall = time.perf_counter() - start
        results = json.loads((run / "results.json").read_text())
    return {"wall_s": round(wall, 1), "train_s": results["seconds"], "steps": results["step"],
            "epochs": results["epochs"], "stopped_early": results["stopped_early"],
            "test": results["test"]}


def main() -> int:
    """Measure, print one markdown line per run (and JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    import torch

    from zoo import hardware

    cpu = hardware.detect().cpu
    machine = f"{cpu.name}, {cpu.cores} cores, {cpu.capability}, torch {torch.__version__}"
    rows = []
    for _ in range(args.runs):
        row = measure()
        rows.append(row)
        acc = row["test"].get("token_accuracy", float("nan"))
        print(f"zoo train sort: {row['wall_s'] / 60:.1f} min wall ({row['train_s']:.0f} s "
              f"training), {row['steps']:,} steps, {row['epochs']} epochs, test token "
              f"accuracy {acc:.2%} ({machine}; {platform.platform()})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "runs": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
