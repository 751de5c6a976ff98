"""zoo's decoding with its native few-row kernel (``zoo.native``) against the same
decoding through oneDNN's packed product, in one process, the two taking turns.

transformer-base (vocabulary 8000) decodes exactly ``--tokens`` new tokens by
``model.generate``: one ``--source``-token sentence at a time (greedy and beam 4,
milliseconds a sentence, as ``zoo translate`` sees it) and a batch of ``--batch``
sentences (greedy, tokens a second). Both ways must give the same tokens; the
script stops if they do not.

    python benchmarks/native_decode.py [--rounds 3] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo import native
from zoo.ops import Linear


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
        raise SystemExit("zoo's native kernel is not available here (see the warning above)")
    torch.manual_seed(0)
    model = zoo.build("transformer-base", vocab_size=8000).eval()
    one = torch.randint(3, 7999, (1, args.source))
    batch = torch.randint(3, 7999, (args.batch, args.batch_length))
    kwargs = dict(bos_id=1, eos_id=-1)
    cases = {
        "one sentence, greedy (ms)": lambda: model.generate(
            one, strategy="greedy", max_new_tokens=args.tokens, **kwargs),
        "one sentence, beam 4 (ms)": lambda: model.generate(
            one, strategy="beam", beam_size=4, max_new_tokens=args.tokens, **kwargs),
        f"batch {args.batch}, greedy (tokens/s)": lambda: model.generate(
            batch, strategy="greedy", max_new_tokens=args.batch_length, **kwargs),
    }
    rows = Linear.skinny_rows  # None: zoo.native.default_rows()

    def unpack() -> None:
        """oneDNN packs each weight for the rows of its first call: each case packs anew."""
        from zoo.plugins.architectures.static_decoder import _FUSED

        for layer in [*model.modules(), *(fused for _, fused in _FUSED.values())]:
            layer.__dict__.pop("_packed_cache", None)

    def timed(case, kernel: bool) -> tuple[float, torch.Tensor]:
        Linear.skinny_rows = rows if kernel else 0
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
    print("| case | round | oneDNN | native kernel | oneDNN / native |")
    print("|---|---|---|---|---|")
    with torch.no_grad():
        for name, case in cases.items():
            for r in range(args.rounds):
                (off, a), (on, b) = timed(case, False), timed(case, True)
                if not torch.equal(a, b):
                    raise SystemExit(f"{name}: the kernel changed the tokens")
                if "tokens/s" in name:
                    made = args.batch * args.batch_length
                    shown = f"{made / off:,.0f} | {made / on:,.0f}"
                else:
                    shown = f"{off * 1e3:.1f} | {on * 1e3:.1f}"
                print(f"| {name} | {r + 1} | {shown} | {off / on:.2f}x |")
    Linear.skinny_rows = rows


if __name__ == "__main__":
    main()
