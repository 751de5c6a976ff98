"""``zoo bench train|decode|vit|startup|all``: build the cases, wait for a quiet
machine, measure the matmul peaks, alternate, print the table, write JSON and a plot.
The commands' arguments are in :mod:`zoo.bench.cli`."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

BENCHES = ("train", "decode", "vit", "startup")
DTYPES = ("fp32", "bf16", "int8", "int4")
"""What ``--dtypes`` takes; int8 (a quantized copy, zoo.quantize) is timed for
inference only: decoding and ViT inference; int4 (weights alone in 4-bit groups,
``zoo.quantize(model, "int4")``) for a language model's decoding."""


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _list(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip()) if text else default


def default_dtypes(device: str) -> tuple[tuple[str, ...], str]:
    """The dtypes timed when ``--dtypes`` is not given: fp32, and bf16 where the device
    has bf16 units; with the one-line reason when bf16 is left out."""
    from .. import hardware

    why = hardware.detect().why_no_bf16(device)
    if why:
        return ("fp32",), f"bf16 left out: {why}. Ask for it with --dtypes fp32,bf16."
    return ("fp32", "bf16"), ""


def dtypes_for(args) -> tuple[str, ...]:
    """The dtypes to time: those asked for (with a warning on stderr for emulated bf16),
    else the defaults for the device (saying on stdout why bf16 is left out)."""
    from .. import hardware

    if not args.dtypes:
        dtypes, note = default_dtypes(args.device)
        if note:
            print(note, flush=True)
        return dtypes
    dtypes = _list(args.dtypes, ())
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown:
        raise SystemExit(f"zoo bench: unknown dtype {', '.join(unknown)}; --dtypes takes "
                         f"{','.join(DTYPES)}")
    why = hardware.detect().why_no_bf16(args.device)
    if "bf16" in dtypes and why:
        print(f"zoo bench: warning: bf16 asked for with {why}; expect its rows to take "
              "minutes.", file=sys.stderr, flush=True)
    return dtypes


def cases_for(bench: str, args, say) -> list:
    """The cases of one bench, from the command's arguments."""
    from . import models

    impls = _list(args.impls, ())
    if bench == "train":
        return models.train_cases(
            batch=args.batch or 16, src_len=args.length or 64, tgt_len=args.length or 64,
            vocab=args.vocab, dtypes=dtypes_for(args),
            impls=impls or ("zoo", "torch", "marian"), device=args.device, kernel=args.kernel,
            compile=args.compile, say=say)
    if bench == "decode":
        return models.decode_cases(
            batch=args.batch or 16, src_len=args.length or 64, new_tokens=args.new_tokens,
            vocab=args.vocab, modes=_list(args.modes, None),
            dtypes=dtypes_for(args) if args.dtypes else ("fp32",),
            impls=impls or ("zoo", "marian", "torch", "ct2"), device=args.device,
            kernel=args.kernel, model=args.model, say=say,
            latency=None if args.no_latency else _latency(args.latency))
    if bench == "embed":
        from .embeddings import MODES, embed_cases

        return embed_cases(model=args.model, modes=_list(args.modes, MODES),
                           dtypes=dtypes_for(args) if args.dtypes else ("fp32",),
                           impls=impls or ("zoo", "sentence-transformers", "ct2", "openvino"),
                           say=say)
    if bench == "vit":
        return models.vit_cases(
            recipe=args.vit_recipe, batch=args.batch or 8,
            modes=_list(args.modes, ("inference", "train")),
            dtypes=dtypes_for(args), impls=impls or ("zoo", "timm"),
            device=args.device, kernel=args.kernel, compile=args.compile, say=say)
    raise ValueError(bench)


def _latency(values: list[int]) -> tuple[int, int]:
    if len(values) != 2 or min(values) < 1:
        raise SystemExit(f"zoo bench: --latency takes SRC,NEW (two positive numbers, e.g. "
                         f"20,20), got {','.join(map(str, values))}")
    return values[0], values[1]


def latency_lines(results: list) -> list[str]:
    """One sentence at a time: milliseconds per sentence (median, and the spread of the
    timed calls) of each implementation, and zoo's time over each peer's."""
    rows = [r for r in results if r.bench == "latency"]
    zoo = {(r.mode, r.dtype): r.seconds for r in rows if r.impl == "zoo"}
    out = []
    for r in rows:
        mine = zoo.get((r.mode, r.dtype))
        versus = "" if r.impl == "zoo" or mine is None else \
            f"; zoo's time / its: {mine / r.seconds:.2f}x"
        out.append(f"latency {r.mode} {r.dtype} {r.impl}: {r.seconds * 1e3:.1f} ms a sentence "
                   f"(spread {r.noise:.0%}){versus}")
    return out


def limit_lines(results: list, rate: float | None) -> list[str]:
    """One sentence greedy against the memory's limit: a step reads the decoder's and the
    output layer's weights at least once (:func:`zoo.bench.harness.step_bytes`), so at
    ``rate`` bytes a second a sentence of N steps takes N x those bytes / ``rate`` at
    best; zoo's share of that limit (the encoder's pass is not counted in the limit)."""
    out = []
    for r in results:
        if not rate or "step_bytes" not in r.extra:
            continue
        limit = r.extra["steps"] * r.extra["step_bytes"] / rate
        out.append(f"limit latency greedy {r.dtype}: {limit * 1e3:.1f} ms a sentence "
                   f"({r.extra['steps']} steps x {r.extra['step_bytes'] / 1e6:.1f} MB of "
                   f"weights at {rate / 1e9:.1f} GB/s); zoo at {limit / r.seconds:.0%} of it")
    return out


def best_lines(results: list) -> list[str]:
    """The best against the best: in each bench and mode, zoo's fastest dtype against each
    peer's fastest (on a CPU without VNNI, CTranslate2's float32 may beat its int8)."""
    from .harness import format_number

    out = []
    for bench, mode in dict.fromkeys((r.bench, r.mode) for r in results
                                     if r.bench in ("decode", "latency", "vit")):
        rows = [r for r in results if (r.bench, r.mode) == (bench, mode)]
        best = {}
        for r in rows:
            if r.impl not in best or r.throughput > best[r.impl].throughput:
                best[r.impl] = r
        zoo = best.get("zoo")
        if zoo is None:
            continue
        for impl, r in best.items():
            if impl != "zoo" and len({x.dtype for x in rows if x.impl in ("zoo", impl)}) > 1:
                out.append(f"best vs best, {bench} {mode}: zoo {zoo.dtype} "
                           f"{format_number(zoo.throughput)} {zoo.unit} vs {impl} {r.dtype} "
                           f"{format_number(r.throughput)} {r.unit}: "
                           f"{zoo.throughput / r.throughput:.2f}x")
    return out


def isa_line() -> str:
    """What the libraries dispatch to here (and the ISA forced, if one was)."""
    import os

    import torch

    forced = os.environ.get("ZOO_BENCH_ISA")
    return (f"ISA: torch dispatches {torch.backends.cpu.get_cpu_capability()}"
            + (f" (forced: --isa {forced})" if forced else " (native)"))


def peak_line(peaks: dict[str, float], no_bf16: str) -> str:
    """``fp32 99 GFLOP/s, bf16 ...``: the bf16 figure, or why there is none to measure."""
    fp32 = f"fp32 {peaks['fp32'] / 1e9:.0f} GFLOP/s"
    if not no_bf16:
        return f"{fp32}, bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s"
    emulated = f" (emulated: {peaks['bf16'] / 1e9:.2g} GFLOP/s)" if "bf16" in peaks else ""
    return f"{fp32}, bf16: {no_bf16.split(',')[0].split(' (')[0]}{emulated}"


def int8_lines(results: list) -> list[str]:
    """``zoo int8 / zoo fp32``: what quantizing bought, for each bench and mode that has
    both rows."""
    zoo = {(r.bench, r.mode, r.dtype): r.throughput for r in results if r.impl == "zoo"}
    return [f"zoo int8 / zoo fp32, {bench} {mode}: {zoo[(bench, mode, 'int8')] / fp32:.2f}x"
            for (bench, mode, dtype), fp32 in zoo.items()
            if dtype == "fp32" and (bench, mode, "int8") in zoo]


def main(args) -> int:
    """Run the benches ``args`` asks for and print (and write) the results."""
    import torch

    from .. import hardware
    from . import harness

    say = (lambda message: None) if args.quiet else _say
    counts = list(args.threads or [torch.get_num_threads()])
    torch.set_num_threads(max(counts))
    benches = BENCHES if args.bench == "all" else (args.bench,)
    busy = harness.wait_for_quiet(args.wait, say=say)
    no_bf16 = hardware.detect().why_no_bf16(args.device)
    peaks = {"fp32": harness.matmul_peak(torch.float32, args.device)}
    if not no_bf16:
        peaks["bf16"] = harness.matmul_peak(torch.bfloat16, args.device)
    elif "bf16" in _list(args.dtypes, ()):  # emulated: a small product, or it takes minutes
        peaks["bf16"] = harness.matmul_peak(torch.bfloat16, args.device, n=256)
    measured = dict(peaks)
    if args.peak_tflops:  # a datasheet figure (e.g. an H200's dense bf16) instead
        peaks["bf16"] = args.peak_tflops * 1e12
    context = {
        "torch": torch.__version__, "threads": counts if len(counts) > 1 else counts[0],
        "machine": platform.processor() or platform.machine(), "device": args.device,
        "matmul_peak_gflops": {k: round(v / 1e9, 1) for k, v in measured.items()},
        "mfu_peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()},
        "kernel": args.kernel, "compile": args.compile,
        "busy_before": round(busy, 3), "isa": isa_line(),
    }
    print(f"matmul peak on this machine: {peak_line(peaks, no_bf16)} "
          f"({torch.get_num_threads()} threads; machine {busy:.0%} busy before the run)")
    print(isa_line())
    results: list = []
    for bench in benches:
        if bench == "startup":
            from . import startup

            results += startup.run(repeats=args.repeats)
            continue
        timed = []
        for count in counts:  # each implementation at each count of threads
            torch.set_num_threads(count)
            cases = cases_for(bench, args, say)
            timed += harness.alternate(cases, repeats=args.repeats, warmup=args.warmup,
                                       peaks=peaks, say=say)
            for r in timed[-len(cases):]:
                r.extra["threads"] = count
            del cases
        results += harness.fastest(timed) if len(counts) > 1 else timed
    torch.set_num_threads(max(counts))
    if len(counts) > 1:
        print(f"each implementation timed at {', '.join(map(str, counts))} threads; each row is "
              "its fastest (its threads in the table), zoo's fastest set against it")
    print(harness.table(results))
    noisy = [r for r in results if r.noise > 0.15]
    worst = max((r.noise for r in results), default=0.0)
    print(f"noise: the widest spread of one implementation's calls was {worst:.0%}"
          + (f" ({len(noisy)} rows over 15%: treat their ratios with care)" if noisy else ""))
    rate = None
    if any("step_bytes" in r.extra for r in results):
        rate = harness.read_rate(args.device)
        print(f"memory read rate: {rate / 1e9:.1f} GB/s (torch.sum over 512 MiB, "
              f"{torch.get_num_threads()} threads)")
        context["read_rate_gbs"] = round(rate / 1e9, 1)
    for line in (int8_lines(results) + latency_lines(results) + limit_lines(results, rate)
                 + best_lines(results)):
        print(line)
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
