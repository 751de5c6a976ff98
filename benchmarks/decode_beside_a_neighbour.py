"""How zoo's decoding and CTranslate2's fare beside a busy neighbour: `zoo bench decode`
(zoo and CTranslate2, fp32 and int8, greedy, batch 16 and one sentence) on the idle
machine, then beside one busy process (a Python loop that keeps one core busy, at the
same priority), with zoo choosing its threads from the cores free at each call (its
default), and with `ZOO_ADAPT_THREADS=0` (every call at torch's threads, as before).
All cases run in this one script, one after another; ratios are within it.

    python benchmarks/decode_beside_a_neighbour.py [--repeats 3] [--dtypes fp32,int8]
        [--model llama-110m-shape] [--json out.json]
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

CASES = [("idle", False, {}), ("one busy neighbour", True, {}),
         ("one busy neighbour, ZOO_ADAPT_THREADS=0", True, {"ZOO_ADAPT_THREADS": "0"})]
BUSY = "while True:\n    pass\n"


def bench(repeats: int, env: dict[str, str], dtypes: str, model: str | None) -> list[dict]:
    """`zoo bench decode`'s rows (one per implementation, dtype and mode)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        command = [sys.executable, "-m", "zoo", "bench", "decode", "--impls", "zoo,ct2",
                   "--dtypes", dtypes, "--modes", "greedy", "--repeats", str(repeats),
                   "--wait", "0", "--json", str(out), "-q"]
        if model:  # a language model: 8 prompts of 16 tokens, 32 new; one prompt likewise
            command += ["--model", model, "--batch", "8", "--length", "16", "--new-tokens",
                        "32", "--latency", "16,32"]
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True,
                              text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-2000:])
        return json.loads(out.read_text())


def main() -> int:
    """Each case's figures, side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="fp32,int8", help="zoo bench decode's --dtypes")
    parser.add_argument("--model", help="a language model (zoo bench decode --model)")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = {}
    for name, busy, env in CASES:
        neighbour = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
        try:
            time.sleep(1.0 if busy else 0.0)
            results[name] = bench(args.repeats, env, args.dtypes, args.model)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
        print(f"done: {name}", file=sys.stderr, flush=True)
    keys = [(r["impl"], r["dtype"], r["bench"], r["unit"]) for r in results["idle"]]
    print("| implementation | dtype | case | unit | " + " | ".join(results) + " |")
    print("|---|---|---|---|" + "---|" * len(results))
    for key in keys:
        row = []
        for rows in results.values():
            match = [r for r in rows if (r["impl"], r["dtype"], r["bench"], r["unit"]) == key]
            row.append(f"{match[0]['throughput']:.1f}" if match else "-")
        print("| " + " | ".join(str(k) for k in key) + " | " + " | ".join(row) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
