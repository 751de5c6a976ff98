"""``zoo bench train|decode|vit|startup|all``: build the cases, wait for a quiet
machine, measure the matmul peaks, alternate, print the table, write JSON and a plot.
The commands' arguments are in :mod:`zoo.bench.cli`."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

BENCHES = ("train", "decode", "vit", "startup")


def _say(verbose: bool):
    return (lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True)) if verbose else None


def _list(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else default


def cases_for(bench: str, args, say) -> list:
    """The cases of one bench, from the command's arguments."""
    from . import models

    impls = _list(args.impls, ())
    if bench == "train":
        return models.train_cases(
            batch=args.batch or 16, src_len=args.length or 64, tgt_len=args.length or 64,
            vocab=args.vocab, dtypes=_list(args.dtypes, ("fp32", "bf16")),
            impls=impls or ("zoo", "torch", "marian"), device=args.device, kernel=args.kernel,
            compile=args.compile, say=say)
    if bench == "decode":
        return models.decode_cases(
            batch=args.batch or 16, src_len=args.length or 64, new_tokens=args.new_tokens,
            vocab=args.vocab, modes=_list(args.modes, ("greedy", "beam4")),
            impls=impls or ("zoo", "marian", "torch"), device=args.device, kernel=args.kernel,
            say=say)
    if bench == "vit":
        return models.vit_cases(
            recipe=args.vit_recipe, batch=args.batch or 8,
            modes=_list(args.modes, ("inference", "train")),
            dtypes=_list(args.dtypes, ("fp32", "bf16")), impls=impls or ("zoo", "timm"),
            device=args.device, kernel=args.kernel, compile=args.compile, say=say)
    raise ValueError(bench)


def main(args) -> int:
    """Run the benches ``args`` asks for and print (and write) the results."""
    import torch

    from . import harness

    say = _say(args.verbose)
    if args.threads:
        torch.set_num_threads(args.threads)
    benches = BENCHES if args.bench == "all" else (args.bench,)
    busy = harness.wait_for_quiet(args.wait, say=say)
    peaks = {"fp32": harness.matmul_peak(torch.float32, args.device),
             "bf16": harness.matmul_peak(torch.bfloat16, args.device)}
    measured = dict(peaks)
    if args.peak_tflops:  # a datasheet figure (e.g. an H200's dense bf16) instead
        peaks["bf16"] = args.peak_tflops * 1e12
    context = {
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(), "device": args.device,
        "matmul_peak_gflops": {k: round(v / 1e9, 1) for k, v in measured.items()},
        "mfu_peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()},
        "kernel": args.kernel, "compile": args.compile,
        "busy_before": round(busy, 3),
    }
    print(f"matmul peak on this machine: fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s ({torch.get_num_threads()} threads; "
          f"machine {busy:.0%} busy before the run)")
    results: list = []
    for bench in benches:
        if bench == "startup":
            from . import startup

            results += startup.run(repeats=args.repeats)
            continue
        cases = cases_for(bench, args, say)
        results += harness.alternate(cases, repeats=args.repeats, warmup=args.warmup,
                                     peaks=peaks, say=say)
        del cases
    print(harness.table(results))
    noisy = [r for r in results if r.noise > 0.15]
    worst = max((r.noise for r in results), default=0.0)
    print(f"noise: the widest spread of one implementation's calls was {worst:.0%}"
          + (f" ({len(noisy)} rows over 15%: treat their ratios with care)" if noisy else ""))
    for r in results:
        if r.bench == "startup":
            target = r.extra.get("target_s")
            verdict = "" if target is None else (
                f" (target < {target} s: {'met' if r.seconds < target else 'MISSED'})")
            torch_note = (f"; imports torch: {r.extra['imports_torch']}"
                          if "imports_torch" in r.extra else "")
            print(f"startup {r.impl} {r.mode}: {r.seconds:.2f} s{verdict}{torch_note}")
    if args.json:
        Path(args.json).write_text(json.dumps(harness.records(results, context), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plot:
        harness.plot([r for r in results if r.bench != "startup"], args.plot)
        print(f"wrote {args.plot}")
    return 0
