"""The products of one decoding step at a few to a few hundred rows: zoo's native
product on packed weights (``torch.ops.zoo.packed_linear``, what ``zoo.ops.Linear``
calls), its native product on unpacked weights (``skinny_linear``, what it calls inside
``torch.compile``), and oneDNN's packed product (``Linear`` without zoo's, its
weights packed for these rows), with a plain sum over each weight as the rate of
reading memory.

The weights are transformer-base's decoder's (six layers of q|k|v joined, the
self-attention's output, cross-attention's query and output, the feed-forward pair,
then an 8000-word output layer: 105 MB), each its own tensor and read in turn, so
that they come from memory as in decoding. Results are checked against ``F.linear``.
With ``--int8`` the same products with int8 weights (``zoo.quantization.QuantizedLinear``):
zoo's native int8 product against FBGEMM's dynamic one, checked against the dequantized
weight's ``F.linear``.

    python benchmarks/few_row_products.py [--rows 1,4,16,64,128,320] [--rounds 2] [--int8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from zoo import native
from zoo.ops import Linear
from zoo.quantization import QuantizedLinear

SHAPES = [(1536, 512), (512, 512), (512, 512), (512, 512), (2048, 512), (512, 2048)] * 6 \
    + [(8000, 512)]


def median_s(fn, n: int = 20) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,4,16,64,128,320")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--int8", action="store_true",
                        help="int8 weights: zoo's native int8 product against FBGEMM's")
    args = parser.parse_args()
    if not native.available():
        raise SystemExit("zoo's native product is not available here (see the warning above)")
    torch.manual_seed(0)
    if args.int8:
        int8_products(args)
        return
    layers = []
    for n_out, n_in in SHAPES:
        layer = Linear(n_in, n_out).eval()
        layer.native_rows = 0  # oneDNN's packed product
        layers.append(layer)
    packed = [layer.native_weight() for layer in layers]
    weights = sum(layer.weight.numel() * 4 for layer in layers)
    flops = 2 * sum(layer.weight.numel() for layer in layers)
    print(f"{torch.get_num_threads()} threads; CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; {len(layers)} products reading "
          f"{weights / 1e6:.0f} MB\n")
    print("| rows | round | packed product, ms (GFLOP/s) | unpacked product, ms | oneDNN, ms "
          "| oneDNN / packed | plain sum, ms (GB/s) |")
    print("|---|---|---|---|---|---|---|")
    with torch.no_grad():
        for rows in (int(r) for r in args.rows.split(",")):
            xs = [torch.randn(rows, 1, layer.in_features) for layer in layers]
            for layer, w, x in zip(layers, packed, xs):
                layer.__dict__.pop("_packed_cache", None)  # oneDNN's, packed for these rows
                expected = F.linear(x, layer.weight, layer.bias)
                for got in (torch.ops.zoo.packed_linear(x, w, layer.bias, layer.out_features),
                            torch.ops.zoo.skinny_linear(x, layer.weight, layer.bias), layer(x)):
                    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)

            def kernel():
                for layer, w, x in zip(layers, packed, xs):
                    torch.ops.zoo.packed_linear(x, w, layer.bias, layer.out_features)

            def unpacked():
                for layer, x in zip(layers, xs):
                    torch.ops.zoo.skinny_linear(x, layer.weight, layer.bias)

            def onednn():
                for layer, x in zip(layers, xs):
                    layer(x)

            def plain_sum():
                for layer in layers:
                    layer.weight.sum()

            for r in range(args.rounds):
                k, u, o, s = (median_s(kernel), median_s(unpacked), median_s(onednn),
                              median_s(plain_sum))
                print(f"| {rows} | {r + 1} | {k * 1e3:.2f} ({rows * flops / k / 1e9:.0f}) | "
                      f"{u * 1e3:.2f} | {o * 1e3:.2f} | {o / k:.2f}x | "
                      f"{s * 1e3:.2f} ({weights / s / 1e9:.1f}) |")


def int8_products(args) -> None:
    """The table of ``--int8``: the same products with int8 weights, per-row scales."""
    layers = [QuantizedLinear.from_linear(Linear(n_in, n_out)).eval() for n_out, n_in in SHAPES]
    weights = sum(layer.weight_int8.numel() for layer in layers)
    flops = 2 * weights
    print(f"{torch.get_num_threads()} threads; CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}; {len(layers)} int8 products reading "
          f"{weights / 1e6:.0f} MB\n")
    print("| rows | round | zoo's int8 product, ms (GOP/s) | FBGEMM, ms | FBGEMM / zoo |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for rows in (int(r) for r in args.rows.split(",")):
            xs = [torch.randn(rows, 1, layer.in_features) for layer in layers]
            for layer, x in zip(layers, xs):
                expected = F.linear(x, layer.dequantized_weight(), layer.bias)
                for limit in (rows, 0):  # zoo's product, then FBGEMM's
                    layer.native_rows = limit
                    torch.testing.assert_close(layer(x), expected, rtol=0.05, atol=0.05)

            def run(limit):
                def products():
                    for layer, x in zip(layers, xs):
                        layer(x)
                for layer in layers:
                    layer.native_rows = limit
                return median_s(products)

            for r in range(args.rounds):
                k, f = run(rows), run(0)
                print(f"| {rows} | {r + 1} | {k * 1e3:.2f} ({rows * flops / k / 1e9:.0f}) | "
                      f"{f * 1e3:.2f} | {f / k:.2f}x |")


if __name__ == "__main__":
    main()
