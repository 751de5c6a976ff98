"""How `zoo train` fares when another training shares the machine: seconds per step of
`zoo train sort` alone, and of two such runs at once, with torch's threads and
OpenMP's wait policy varied. All cases run in this one script, one after another.

    python benchmarks/train_under_load.py [--steps 60] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORES = os.cpu_count() or 1
SPIN = {"GOMP_SPINCOUNT": "300000"}  # libgomp's own default, which the zoo command replaces
CASES = [
    # (name, runs, --threads (None: zoo's choice), environment, start the second only once
    # the first is training)
    ("alone: a thread per core, libgomp's spinning", 1, CORES, SPIN, False),
    ("alone: 1 thread", 1, 1, {}, False),
    ("alone: zoo's defaults", 1, None, {}, False),
    ("two at once: a thread per core each, libgomp's spinning", 2, CORES, SPIN, False),
    ("two at once: a thread per core each, OMP_WAIT_POLICY=PASSIVE", 2, CORES,
     {"OMP_WAIT_POLICY": "PASSIVE"}, False),
    ("two at once: 1 thread each", 2, 1, {}, False),
    ("two at once: zoo's defaults", 2, None, {}, False),
    ("the second started while the first trains: zoo's defaults", 2, None, {}, True),
]


def run_case(processes: int, threads: int | None, env: dict[str, str], steps: int,
             stagger: bool = False) -> dict:
    """``processes`` runs of `zoo train sort` (with ``stagger``, each started once the one
    before logs its first step): the wall time, and each run's seconds per step (its own
    training time over its steps)."""
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        start = time.perf_counter()
        for i in range(processes):
            while i and stagger and not (Path(tmp) / f"run{i - 1}" / "metrics.jsonl").exists():
                time.sleep(0.1)
            command = [sys.executable, "-m", "zoo", "train", "sort", "--out",
                       str(Path(tmp) / f"run{i}"), "--no-progress", "--set",
                       f"train.steps={steps}", "--set", "train.target=null"]
            if threads is not None:
                command += ["--threads", str(threads)]
            procs.append(subprocess.Popen(command, env={**os.environ, **env},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        errors = [p.communicate()[1] for p in procs]
        wall = time.perf_counter() - start
        if any(p.returncode for p in procs):
            raise RuntimeError("a run failed: " + " | ".join(e[-500:] for e in errors))
        per_step = [json.loads((Path(tmp) / f"run{i}" / "results.json").read_text())["seconds"]
                    / steps for i in range(processes)]
        notes = [line for e in errors for line in e.splitlines() if "threads" in line]
    return {"wall_s": round(wall, 1), "s_per_step": [round(x, 3) for x in per_step],
            "notes": notes}


def main() -> int:
    """Run every case and print a table (and JSON when asked)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    print(f"`zoo train sort`, {args.steps} steps per run, {CORES} cores; seconds per step "
          "of each run (its own training time)")
    for name, processes, threads, env, stagger in CASES:
        result = run_case(processes, threads, env, args.steps, stagger)
        rows.append({"case": name, **result})
        per_step = ", ".join(f"{x:.3f}" for x in result["s_per_step"])
        print(f"| {name} | {per_step} | {result['wall_s']:.1f} s |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
