"""``zoo bench attention``: time and peak memory of each attention mechanism as the
sequence grows, side by side in one run.

Each mechanism is one self-attention layer (projections included) at
d_model x n_heads, run forward (and backward with ``--backward``) on random
input. Lengths double from 256 to 16384; a mechanism stops at the first length
where its memory would pass the bound, predicted from its growth so far. The
summary fits memory ~ L^p over the three longest measured lengths (where the
attention, not the projections, dominates): p near 1 is linear, near 2 quadratic.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

import zoo

from .memory import PeakMemory

LENGTHS = (256, 512, 1024, 2048, 4096, 8192, 16384)
MECHANISMS = ("vanilla:eager", "vanilla:sdpa", "sliding-window", "bigbird", "performer", "linear",
              "lsh")


@dataclass
class Measurement:
    """One mechanism at one length: time, peak memory, or why it was skipped."""

    mechanism: str
    length: int
    time_ms: float | None = None
    peak_bytes: int | None = None
    skipped: str | None = None
    tokens_per_s: float | None = None
    extra: dict = field(default_factory=dict)


def parse_mechanism(spec: str) -> tuple[str, str]:
    """'vanilla:eager' -> ('vanilla', 'eager'); a bare name uses kernel 'sdpa'."""
    name, _, kernel = spec.partition(":")
    return name, kernel or "sdpa"


def build_layer(spec: str, *, d_model: int, n_heads: int, causal: bool, device, dtype):
    """One attention layer of ``spec`` (``name[:kernel]``), self-attention, on ``device``."""
    name, kernel = parse_mechanism(spec)
    module = zoo.get_component("attention", name).build(
        None, d_model=d_model, n_heads=n_heads,
        kernel=zoo.get_component("kernel", kernel).load(), causal=causal,
    )
    return module.to(device=device, dtype=dtype)


def growth_exponent(points: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of log(memory) against log(length)."""
    points = [(n, m) for n, m in points if m and m > 0]
    if len(points) < 2:
        return None
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(m) for _, m in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def measure(layer, length: int, *, batch: int, backward: bool, repeat: int, device, dtype):
    """Time and peak memory of one layer at one length (median of ``repeat`` calls)."""
    x = torch.randn(batch, length, layer.d_model, device=device, dtype=dtype,
                    requires_grad=backward)

    def step():
        if backward:
            layer(x).float().square().mean().backward()
            x.grad = None
            layer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                layer(x)

    with PeakMemory(device) as memory:
        step()  # the first call also warms up (layouts, kernels)
        _sync(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000, memory.peak


def run(
    mechanisms=MECHANISMS, lengths=LENGTHS, *, batch: int = 1, d_model: int = 512,
    n_heads: int = 8, causal: bool = False, backward: bool = False, repeat: int = 3,
    memory_bound: int = 8 * 2**30, device: str = "cpu", dtype: torch.dtype = torch.float32,
    progress=None,
) -> list[Measurement]:
    """Every mechanism at every length, skipping a mechanism past the memory bound."""
    results: list[Measurement] = []
    for spec in mechanisms:
        torch.manual_seed(0)
        layer = build_layer(spec, d_model=d_model, n_heads=n_heads, causal=causal,
                            device=device, dtype=dtype)
        layer.train(backward)
        seen: list[tuple[int, int]] = []
        stopped = None
        for length in lengths:
            if stopped:
                results.append(Measurement(spec, length, skipped=stopped))
                continue
            if len(seen) >= 2 and seen[-1][1] and seen[-2][1]:
                (n1, m1), (n2, m2) = seen[-2], seen[-1]
                predicted = m2 * (m2 / m1) ** (math.log(length / n2) / math.log(n2 / n1))
                if predicted > memory_bound:
                    stopped = f"would need ~{predicted / 2**30:.1f} GiB > bound"
                    results.append(Measurement(spec, length, skipped=stopped))
                    continue
            if progress:
                progress(f"{spec} L={length}")
            try:
                ms, peak = measure(layer, length, batch=batch, backward=backward,
                                   repeat=repeat, device=device, dtype=dtype)
            except (RuntimeError, MemoryError) as exc:  # out of memory, mostly
                stopped = f"failed: {str(exc).splitlines()[0][:60]}"
                results.append(Measurement(spec, length, skipped=stopped))
                continue
            results.append(Measurement(spec, length, ms, peak,
                                       tokens_per_s=batch * length / (ms / 1000)))
            seen.append((length, peak))
            if peak is not None and peak > memory_bound:
                stopped = "previous length passed the memory bound"
        del layer
    return results


def table(results: list[Measurement]) -> str:
    """The measurements as a text table, one row per mechanism."""
    lengths = sorted({r.length for r in results})
    mechanisms = list(dict.fromkeys(r.mechanism for r in results))
    cell = {(r.mechanism, r.length): r for r in results}
    width = max(len(m) for m in mechanisms) + 2

    def fmt_time(r):
        return "-" if r is None or r.time_ms is None else f"{r.time_ms:.1f}"

    def fmt_mem(r):
        if r is None or r.time_ms is None:
            return "-"
        return "?" if r.peak_bytes is None else f"{r.peak_bytes / 2**20:.0f}"

    lines = []
    for title, fmt in (("time per call (ms)", fmt_time), ("peak memory (MiB)", fmt_mem)):
        head = f"{title:<{width}}" + "".join(f"{n:>9}" for n in lengths)
        if fmt is fmt_mem:
            head += "   growth (last 3)"
        lines.append(head)
        for m in mechanisms:
            row = f"{m:<{width}}" + "".join(f"{fmt(cell.get((m, n))):>9}" for n in lengths)
            if fmt is fmt_mem:
                p = growth_exponent([(r.length, r.peak_bytes) for r in results
                                     if r.mechanism == m and r.time_ms is not None][-3:])
                row += f"   {'L^%.2f' % p if p is not None else '-'}"
            lines.append(row)
        lines.append("")
    notes = sorted({f"{r.mechanism}: stopped at L={r.length} ({r.skipped})" for r in results
                    if r.skipped and not any(o.mechanism == r.mechanism and o.skipped
                                             and o.length < r.length for o in results)})
    return "\n".join(lines + notes)


def records(results: list[Measurement], *, dtype, backward: bool, device: str) -> list[dict]:
    """The measurements as JSON-ready rows, in the model benches' row shape."""
    out = []
    for r in results:
        row = asdict(r)
        row.pop("extra")
        row.update(bench="attention", impl="zoo", dtype=str(dtype).replace("torch.", ""),
                   mode="train" if backward else "inference", device=device,
                   throughput=r.tokens_per_s, unit="tokens/s")
        out.append(row)
    return out


def plot(results: list[Measurement], path, *, title: str) -> None:
    """Time and peak memory against length, one line per mechanism, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for m in dict.fromkeys(r.mechanism for r in results):
        done = [r for r in results if r.mechanism == m and r.time_ms is not None]
        if not done:
            continue
        n = [r.length for r in done]
        ax_t.plot(n, [r.time_ms for r in done], marker="o", label=m)
        if all(r.peak_bytes is not None for r in done):
            ax_m.plot(n, [max(r.peak_bytes, 1) / 2**20 for r in done], marker="o", label=m)
    for ax, label in ((ax_t, "time per call (ms)"), (ax_m, "peak memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_m.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
