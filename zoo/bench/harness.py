"""Side-by-side measurement: zoo and its peers run the same work in one process,
alternating, so that a slow minute of a shared machine hits them all alike.

A :class:`Case` is one implementation doing one unit of work (a training step, a
batch decoded, a batch of images). :func:`alternate` warms each up, then runs them
in turn (the order rotating each round) and keeps every time; a :class:`Result`
holds the median, the spread (the noise that implementation saw), the peak memory
of one call, and the model FLOP utilisation against a matmul peak measured on this
machine in the same run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import ContextManager

import torch

from ..hardware import cpu_busy, others_running
from .memory import PeakMemory


@dataclass
class Case:
    """One implementation, dtype and mode to time: a call and what it handles."""

    bench: str
    impl: str
    dtype: str
    mode: str
    run: Callable[[], object]
    items: int
    """Tokens or images one call handles."""
    unit: str
    flops: float | None = None
    """Model FLOPs of one call (counted once, the same for every implementation)."""
    device: str = "cpu"
    in_process: bool = True
    """False when the work runs in another process (CTranslate2): its peak memory is not
    this process's to measure, and is reported as none."""
    extra: dict = field(default_factory=dict)
    """What the result carries beside the timings (a decoding step's bytes of weights)."""
    hold: Callable[[], ContextManager] | None = None
    """A block held open around all the case's calls (its model's weights fixed once,
    :func:`zoo.derived.fixed_weights`, as a server that embeds many times holds them)."""


@dataclass
class Result:
    """What one case measured, and its ratio to zoo's."""

    bench: str
    impl: str
    dtype: str
    mode: str
    throughput: float
    unit: str
    seconds: float
    """Median seconds per call."""
    noise: float
    """(max - min) / median of the timed calls."""
    repeats: int
    peak_mib: float | None = None
    gflops: float | None = None
    mfu: float | None = None
    """Achieved FLOP/s over the measured matmul peak of the dtype."""
    ratio: float | None = None
    """zoo's throughput over this implementation's (1.0 on zoo's own row)."""
    device: str = "cpu"
    extra: dict = field(default_factory=dict)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(dtype: torch.dtype = torch.float32, device: str = "cpu", n: int | None = None,
                repeats: int = 7) -> float:
    """FLOP/s of ``torch.matmul`` on two n x n matrices: the machine's practical peak
    (n = 2048 on the CPU, 8192 on a GPU)."""
    n = n or (8192 if torch.device(device).type == "cuda" else 2048)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    for _ in range(2):
        a @ b
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times)


def read_rate(device: str = "cpu", mib: int = 512, repeats: int = 5) -> float:
    """Bytes a second that ``torch.sum`` reads from memory over a float32 tensor of ``mib``
    MiB (larger than the caches), with torch's threads: the rate a product bound by reading
    its weights can reach at best."""
    x = torch.ones(mib * 2**18, device=device)
    x.sum()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        x.sum()
        _sync(device)
        times.append(time.perf_counter() - start)
    return x.numel() * 4 / statistics.median(times)


def without_int4(dtypes, bench: str, say) -> tuple:
    """``dtypes`` but int4, saying why where it was asked for: weight-only int4 is timed for
    a language model's decoding alone (one prompt, bound by reading the weights)."""
    if "int4" in dtypes and say:
        say(f"{bench} int4 skipped: int4 weights (zoo.quantize(model, 'int4')) are timed "
            "for a language model's decoding (zoo bench decode --model llama-110m-shape)")
    return tuple(d for d in dtypes if d != "int4")


def step_bytes(model) -> int:
    """Bytes of weights one greedy decoding step of one sentence or prompt reads at the
    least: every linear layer's weight (fp32, bf16, int8 or int4 with its scales) each once, the
    output layer's included (a tied one once), but a seq2seq model's encoder and its
    cross-attention's keys and values (projected once from the encoder's output).
    Embedding rows, norms, biases and the attention caches are left out (under 1% at
    transformer-base's and llama-110m-shape's sizes and 20 to 48 tokens)."""
    from ..quantization import Int4Linear, QuantizedLinear

    total, seen = 0, set()
    for name, module in model.named_modules():
        if name.startswith("encoder") or name.endswith("cross_attn.kv_proj"):
            continue
        if isinstance(module, QuantizedLinear):
            weight, extra = module.weight_int8, module.weight_scale.numel() * 4
        elif isinstance(module, Int4Linear):
            weight, extra = module.weight_q4, module.weight_scale.numel() * 2
        elif isinstance(module, torch.nn.Linear):
            weight, extra = module.weight, 0
        else:
            continue
        if weight.data_ptr() not in seen:
            seen.add(weight.data_ptr())
            total += weight.numel() * weight.element_size() + extra
    return total


def wait_for_quiet(max_wait: float = 60.0, busy_limit: float = 0.15, say=None) -> float:
    """Wait (up to ``max_wait`` s) until other processes keep the CPUs under
    ``busy_limit`` busy; returns the busy fraction last seen."""
    deadline = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy > busy_limit and time.monotonic() < deadline:
        if say:
            say(f"machine {busy:.0%} busy; waiting for it to quieten")
        time.sleep(2.0)
        busy = cpu_busy()
    return busy


def weights_held(model: torch.nn.Module) -> Callable[[], ContextManager]:
    """A :attr:`Case.hold` for a zoo model: one block that fixes its weights
    (:func:`zoo.derived.fixed_weights`), so that they are checked once for all the case's
    calls, as ``zoo translate`` checks them once for all its inputs and a server holds
    them, not at each call (for transformer-base in int8, 4 ms of a 42 ms sentence)."""
    from ..derived import fixed_weights

    return lambda: fixed_weights(model)


def count_flops(fn: Callable[[], object]) -> float:
    """FLOPs of one call, as torch's FlopCounterMode counts them (matmuls, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..ops import plain_linears

    with plain_linears(), FlopCounterMode(display=False) as counter:
        fn()  # the counter sees aten's matmuls, not oneDNN's
    return float(counter.get_total_flops())


def settle(calm: int, limit: float = 1.0) -> None:
    """Wait (up to ``limit`` s, untimed) until other processes run no more threads than
    ``calm``, the machine's calm level (:func:`calm_level`). A peer's thread pool spins
    on after its call (CTranslate2's OpenMP, about 200 ms), and zoo, which takes the cores
    left free at each call (:func:`zoo.hardware.threads_for_a_call`), would count it as a
    neighbour and run its own turn on one thread: measured on a 2-core Xeon, zoo's
    one-prompt decoding of a Qwen3 at 1,110 ms after CTranslate2's turn against 605 ms
    with the cores free."""
    deadline = time.monotonic() + limit
    while others_running() > calm and time.monotonic() < deadline:
        time.sleep(0.005)


def calm_level(span: float = 0.3) -> int:
    """The fewest threads other processes ran over ``span`` seconds (longer than a peer's
    pool spins after its call: CTranslate2's 200 ms): a real neighbour's, without the
    peers' spinning pools."""
    deadline, least = time.monotonic() + span, others_running()
    while least and time.monotonic() < deadline:
        time.sleep(0.005)
        least = min(least, others_running())
    return least


def _call(case: Case, calm: int | None = None) -> float:
    """One call of ``case``, its seconds, once the machine has settled to its ``calm``
    level (:func:`settle`, 0.3 s at most: a neighbour that comes and goes is not waited
    out): no turn starts while a peer's pool still spins. None: no peer runs in a process
    of its own, and nothing spins after a call."""
    if calm is not None:
        settle(calm, limit=0.3)
    start = time.perf_counter()
    case.run()
    _sync(case.device)
    return time.perf_counter() - start


def alternate(cases: list[Case], *, repeats: int = 5, warmup: int = 1,
              peaks: dict[str, float] | None = None, say=None) -> list[Result]:
    """Run every case ``warmup`` times, then ``repeats`` rounds of each in turn, then one
    more call of each for its peak memory (beyond what was held before the call).
    ``say`` hears which case warms up and how many rounds are left."""
    with contextlib.ExitStack() as held:
        for case in cases:
            if case.hold is not None:
                held.enter_context(case.hold())
        return _alternate(cases, repeats=repeats, warmup=warmup, peaks=peaks, say=say)


def _alternate(cases: list[Case], *, repeats: int, warmup: int, peaks: dict[str, float] | None,
               say) -> list[Result]:
    times: dict[int, list[float]] = {i: [] for i in range(len(cases))}
    calm = calm_level() if any(not case.in_process for case in cases) else None
    for n, case in enumerate(cases, 1):
        if say:
            say(f"warming up {case.bench} {case.mode} {case.dtype} {case.impl} "
                f"({n}/{len(cases)})")
        for _ in range(warmup):
            _call(case, calm)
    order = list(range(len(cases)))
    started = time.perf_counter()
    for round_ in range(repeats):
        if say:
            left = ""
            if round_:
                per_round = (time.perf_counter() - started) / round_
                left = f", about {per_round * (repeats - round_):.0f} s left"
            say(f"round {round_ + 1}/{repeats} of {len(cases)} cases{left}")
        for i in order[round_ % len(order):] + order[: round_ % len(order)]:
            times[i].append(_call(cases[i], calm))
    # peak memory last: measuring it sends large allocations to mmap, which slows what runs
    memory: dict[int, float | None] = {}
    for i, case in enumerate(cases):
        with PeakMemory(case.device, restore=True) as peak:
            _call(case, calm)
        memory[i] = None if peak.peak is None or not case.in_process else peak.peak / 2**20
    results = []
    for i, case in enumerate(cases):
        median = statistics.median(times[i])
        gflops = case.flops / median / 1e9 if case.flops else None
        peak = (peaks or {}).get(case.dtype)
        results.append(Result(
            bench=case.bench, impl=case.impl, dtype=case.dtype, mode=case.mode,
            throughput=case.items / median, unit=case.unit, seconds=median,
            noise=(max(times[i]) - min(times[i])) / median, repeats=len(times[i]),
            peak_mib=memory[i], gflops=gflops,
            mfu=gflops * 1e9 / peak if gflops and peak else None, device=case.device,
            extra=dict(case.extra),
        ))
    add_ratios(results)
    return results


def add_ratios(results: list[Result]) -> None:
    """Each row's ``ratio``: zoo's throughput over its own, in the same bench/mode/dtype."""
    zoo = {(r.bench, r.mode, r.dtype): r.throughput for r in results if r.impl == "zoo"}
    for r in results:
        z = zoo.get((r.bench, r.mode, r.dtype))
        r.ratio = z / r.throughput if z and r.throughput else None


def fastest(results: list[Result]) -> list[Result]:
    """Of the rows of one implementation, dtype and mode timed at several counts of threads
    (``extra["threads"]``), the fastest, each count's throughput kept in
    ``extra["by_threads"]``; ratios again, between the fastest rows."""
    best: dict[tuple, Result] = {}
    seen: dict[tuple, dict] = {}
    for r in results:
        key = (r.bench, r.impl, r.dtype, r.mode)
        seen.setdefault(key, {})[r.extra.get("threads")] = round(r.throughput, 3)
        if key not in best or r.throughput > best[key].throughput:
            best[key] = r
    for key, r in best.items():
        r.extra["by_threads"] = seen[key]
    out = list(best.values())
    add_ratios(out)
    return out


def table(results: list[Result]) -> str:
    """The results as a text table (with each row's threads where they were varied)."""
    threads = any("by_threads" in r.extra for r in results)
    header = ["bench", "mode", "dtype", "impl", *(["threads"] if threads else []),
              "throughput", "unit", "peak MiB", "GFLOP/s", "MFU", "zoo/impl", "noise"]
    rows = []
    for r in results:
        rows.append([
            r.bench, r.mode, r.dtype, r.impl,
            *([str(r.extra.get("threads", "-"))] if threads else []),
            format_number(r.throughput), r.unit,
            "-" if r.peak_mib is None else f"{r.peak_mib:.0f}",
            "-" if r.gflops is None else f"{r.gflops:.0f}",
            "-" if r.mfu is None else f"{r.mfu:.0%}",
            "-" if r.ratio is None else f"{r.ratio:.2f}x",
            f"{r.noise:.0%}",
        ])
    widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def format_number(x: float) -> str:
    """A throughput as the table prints it: ``1,423``, ``2.06``, ``0.512``."""
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if x >= 1 else f"{x:.3f}"


def records(results: list[Result], context: dict) -> list[dict]:
    """The results as JSON-ready rows, each with the run's context."""
    out = []
    for r in results:
        row = asdict(r)
        row.update(row.pop("extra"))
        row["context"] = context
        out.append(row)
    return out


def plot(results: list[Result], path: str | os.PathLike[str]) -> None:
    """Throughput of each implementation relative to zoo's, one group per bench/mode/dtype."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(dict.fromkeys((r.bench, r.mode, r.dtype) for r in results))
    impls = list(dict.fromkeys(r.impl for r in results))
    by = {(r.bench, r.mode, r.dtype, r.impl): r for r in results}
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(groups)), 4))
    width = 0.8 / max(1, len(impls))
    for j, impl in enumerate(impls):
        xs, ys = [], []
        for g, key in enumerate(groups):
            r = by.get((*key, impl))
            zoo = by.get((*key, "zoo"))
            if r and zoo and r.throughput:
                xs.append(g + j * width)
                ys.append(r.throughput / zoo.throughput)
        ax.bar(xs, ys, width, label=impl)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([g + width * (len(impls) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{b}\n{m} {d}" for b, m, d in groups], fontsize=8)
    ax.set_ylabel("throughput / zoo's")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

