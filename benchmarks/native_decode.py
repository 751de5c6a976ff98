"""zoo's decoding three ways, in one process, taking turns: through oneDNN's packed
product and the static decoder's Python step (ZOO_NATIVE=0's way); with zoo's native
product on packed weights (``torch.ops.zoo.packed_linear``) in that Python step; and with the
whole step in C++ as well (``torch.classes.zoo_decoder.Plan``, the default).

transformer-base (vocabulary 8000) decodes exactly ``--tokens`` new tokens by
``model.generate``: one ``--source``-token sentence at a time (greedy and beam 4,
milliseconds a sentence, as ``zoo translate`` sees it) and a batch of ``--batch``
sentences (greedy, tokens a second). Every way must give the same tokens; the
script stops if one does not.

    python benchmarks/native_decode.py [--rounds 3] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo import derived, native
from zoo.ops import Linear
from zoo.plugins.architectures.static_decoder import StaticDecoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--batch-length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if not native.available():
        raise SystemExit("zoo's native product is not available here (see the warning above)")
    torch.manual_seed(0)
    model = zoo.build("transformer-base", vocab_size=8000).eval()
    one = torch.randint(3, 7999, (1, args.source))
    batch = torch.randint(3, 7999, (args.batch, args.batch_length))
    def full(n: int) -> dict:  # no end token before the last: exactly n new tokens
        return dict(max_new_tokens=n, min_new_tokens=n)

    cases = {
        "one sentence, greedy (ms)": lambda: model.generate(one, **full(args.tokens)),
        "one sentence, beam 4 (ms)": lambda: model.generate(one, num_beams=4,
                                                            **full(args.tokens)),
        f"batch {args.batch}, greedy (tokens/s)": lambda: model.generate(
            batch, **full(args.batch_length)),
    }
    rows = Linear.native_rows  # None: zoo.native.default_rows()

    def unpack() -> None:
        """oneDNN packs each weight for the rows of its first call: each case packs anew
        (every packed weight, and the joined q|k|v and gate layers, made again)."""
        for module in model.modules():
            derived.forget(module, *derived.kept(module))

    def timed(case, way: int) -> tuple[float, torch.Tensor]:
        Linear.native_rows = rows if way else 0
        StaticDecoder.native_step = way == 2
        unpack()
        out = case()
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            case()
            times.append(time.perf_counter() - start)
        return statistics.median(times), out

    print(f"{torch.get_num_threads()} threads; CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}\n")
    print("| case | round | oneDNN, Python step | native product, Python step | native product, C++ step "
          "| first / last |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for name, case in cases.items():
            for r in range(args.rounds):
                (a, ta), (b, tb), (c, tc) = (timed(case, way) for way in range(3))
                if not (torch.equal(ta, tb) and torch.equal(ta, tc)):
                    raise SystemExit(f"{name}: the tokens changed")
                if "tokens/s" in name:
                    made = args.batch * args.batch_length
                    shown = " | ".join(f"{made / t:,.0f}" for t in (a, b, c))
                else:
                    shown = " | ".join(f"{t * 1e3:.1f}" for t in (a, b, c))
                print(f"| {name} | {r + 1} | {shown} | {a / c:.2f}x |", flush=True)
    Linear.native_rows = rows
    StaticDecoder.native_step = True

if __name__ == "__main__":
    main()
