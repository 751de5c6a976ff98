"""``zoo bench startup``: how long a fresh process takes for ``zoo --help``,
``import zoo`` and ``zoo.build("transformer-base")``, and whether ``--help`` stays
free of torch (it should: the command line imports torch only to run a command)."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from .harness import Result

STEPS = {
    ("zoo", "help"): [sys.executable, "-m", "zoo", "--help"],
    ("zoo", "import"): [sys.executable, "-c", "import zoo"],
    ("torch", "import"): [sys.executable, "-c", "import torch"],
    ("zoo", "build"): [sys.executable, "-c", "import zoo; zoo.build('transformer-base')"],
}
"""What each fresh process runs; ``import torch`` alone is the floor under ``build``."""
TARGETS = {"help": 0.3, "build": 2.0}
"""Seconds each should stay under (the issue's targets)."""


def torch_imported_by_help() -> bool:
    """True when ``zoo --help`` imports torch in a fresh process (it should not)."""
    code = ("import sys, runpy; sys.argv = ['zoo', '--help']\n"
            "try:\n    runpy.run_module('zoo', run_name='__main__')\nexcept SystemExit:\n"
            "    pass\nprint('torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.stderr.strip().splitlines()[-1] == "True"


def run(repeats: int = 5) -> list[Result]:
    """Each startup step timed in fresh processes (median of ``repeats``)."""
    results = []
    for (impl, mode), command in STEPS.items():
        subprocess.run(command, capture_output=True, check=True)  # warm the file cache
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=True)
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        extra = {"target_s": TARGETS.get(mode) if impl == "zoo" else None}
        if mode == "help":
            extra["imports_torch"] = torch_imported_by_help()
        results.append(Result(
            bench="startup", impl=impl, dtype="-", mode=mode, throughput=1 / median,
            unit="runs/s", seconds=median, noise=(max(times) - min(times)) / median,
            repeats=repeats, extra=extra,
        ))
    return results
