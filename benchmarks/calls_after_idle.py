"""One text's embedding after the machine sat idle: `zoo bench embed`'s cases (the real
all-MiniLM-L6-v2, one sentence a call; zoo, CTranslate2 and OpenVINO), each engine timed on
its own, its calls one after another (gap 0) and after 10, 50 and 200 ms of sleep, as a
server answering requests now and then calls it. zoo's calls run inside one block that
fixes its weights, as the bench's do. Medians of --calls calls, in ms; ratios within one
run only.

    python benchmarks/calls_after_idle.py [--impls zoo,ct2,openvino] [--dtype int8]
        [--threads 2] [--calls 30] [--json out.json]

On a virtual machine, a core left idle is handed to other work by the host, and a thread
woken on it waits until the host gives it back: libgomp's threads (torch's, zoo's) sleep
after spinning a few milliseconds, where CTranslate2's OpenMP spins 200 ms after its work
(KMP_BLOCKTIME) and OpenVINO's TBB keeps its workers a while. Set GOMP_SPINCOUNT before
running to see libgomp spin longer (it is read when torch is imported).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

GAPS = (0.0, 0.01, 0.05, 0.2)
"""Seconds of sleep before each timed call."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", default="zoo,ct2,openvino")
    parser.add_argument("--dtype", default="int8", choices=("fp32", "bf16", "int8"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()

    import torch

    from zoo.bench.embeddings import embed_cases

    torch.set_num_threads(args.threads)
    cases = embed_cases(model=None, modes=["batch1"], dtypes=[args.dtype],
                        impls=args.impls.split(","), say=lambda line: None)
    rows = []
    with contextlib.ExitStack() as held:
        for case in cases:
            if case.hold is not None:
                held.enter_context(case.hold())
        for case in cases:
            for _ in range(5):  # warm
                case.run()
            row = {"impl": case.impl, "dtype": args.dtype, "threads": args.threads}
            for gap in GAPS:
                times = []
                for _ in range(args.calls):
                    time.sleep(gap)
                    start = time.perf_counter()
                    case.run()
                    times.append(time.perf_counter() - start)
                row[f"gap {gap * 1000:.0f} ms"] = round(statistics.median(times) * 1000, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
