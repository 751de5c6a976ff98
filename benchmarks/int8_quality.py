"""int8 against fp32 on trained runs: what zoo.quantize keeps (the table in
docs/deploy.md).

    .venv/bin/python benchmarks/int8_quality.py --translate runs/translate-de-en \\
        --vit runs/fashion-mnist-vit

- translation: test BLEU and chrF of the fp32 and the int8 model (the task's own
  evaluation: sacreBLEU on detokenised text, the recipe's beam), the int8 model also
  with zoo's native int8 product at every row count, and the share of greedy tokens
  that are the same (position by position, up to the longer of the two outputs, over
  the whole test split), also with each int8 product alone (FBGEMM's, zoo's native);
- ViT: test top-1 accuracy of both, and the share of test images where they predict
  the same class.

The int8 model is the fp32 one after ``zoo.quantize``; both decode the same inputs.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

import zoo
from zoo.training.runs import load_run


def _greedy_ids(task, model, batch_size: int = 64) -> list[list[int]]:
    """Greedy outputs of the whole test split, each up to (without) its end token."""
    out = []
    pairs = task.references("test")
    for start in range(0, len(pairs), batch_size):
        src = task.collate([(task.parse_input(de), []) for de, _ in
                            pairs[start:start + batch_size]])["src"]
        ids = zoo.generate(model, src, **{**task.generation(), "num_beams": 1})
        out += [row[: row.index(task.eos_id)] if task.eos_id in row else row
                for row in ids.tolist()]
    return out


def _agreement(a: list[list[int]], b: list[list[int]], eos: int) -> float:
    same = total = 0
    for x, y in zip(a, b):
        x, y = [*x, eos], [*y, eos]
        same += sum(1 for i, j in zip(x, y) if i == j)
        total += max(len(x), len(y))
    return same / max(total, 1)


def _with_native_rows(model, limit: int | None = None):
    """``model`` with every int8 layer's ``native_rows`` set to ``limit``: None for no
    limit (zoo's native product takes every row count), 0 for FBGEMM's alone. By default
    they split by rows, and the batches here (64 sentences, beams) go mostly to FBGEMM on
    AVX-512."""
    from zoo import quantization

    for layer in model.modules():
        if isinstance(layer, quantization.QuantizedLinear):
            layer.native_rows = 1 << 30 if limit is None else limit
    return model


def references_for_int8(run) -> list[str]:
    """What bounds int8's agreement on this model: each int8 product alone (FBGEMM's, one
    scale for each call's activations; zoo's native one, a scale for each row), the
    weights' rounding alone (int8 weights, fp32 activations and products), and
    CTranslate2's own int8 and fp32 on the same weights (``zoo export --format
    ctranslate2``), each against zoo's fp32."""
    import tempfile

    import ctranslate2

    from zoo import quantization
    from zoo.export import to_ctranslate2

    task, fp32 = run.task, run.model.eval()
    ours = _greedy_ids(task, fp32)  # decoded once more here: the script's cost is seconds
    rows = []
    for name, limit in (("zoo int8, every product through FBGEMM", 0),
                        ("zoo int8, every product through zoo's native int8 product", None)):
        int8 = _with_native_rows(zoo.quantize(copy.deepcopy(fp32)), limit)
        rows.append((name, _agreement(ours, _greedy_ids(task, int8), task.eos_id)))
    weight_only = zoo.quantize(copy.deepcopy(fp32))
    for layer in weight_only.modules():
        if isinstance(layer, quantization.QuantizedLinear):
            layer.forward = (lambda x, layer=layer: torch.nn.functional.linear(
                x, layer.dequantized_weight(), layer.bias))
    rows.append(("zoo, int8 weights only (fp32 activations)",
                 _agreement(ours, _greedy_ids(task, weight_only), task.eos_id)))
    vocab = task.token_strings(range(fp32.settings.vocab_size))
    sources = [[vocab[i] for i in task.parse_input(de)] for de, _ in task.references("test")]
    with tempfile.TemporaryDirectory() as folder:
        for quant in (None, "int8"):
            path = f"{folder}/{quant}"
            to_ctranslate2(fp32, path, vocabulary=vocab, quantization=quant)
            translator = ctranslate2.Translator(path, intra_threads=torch.get_num_threads())
            results = translator.translate_batch(sources, beam_size=1, max_batch_size=64,
                                                 max_decoding_length=3 * 64)
            theirs = [[task.tokenizer.token_to_id(t) for t in r.hypotheses[0]] for r in results]
            rows.append((f"CTranslate2 {quant or 'fp32'} (zoo export)",
                         _agreement(ours, theirs, task.eos_id)))
    return ["| greedy tokens identical to zoo fp32 | share |", "|---|---|",
            *(f"| {name} | {share:.2%} |" for name, share in rows)]


def translation(run_dir: str) -> list[str]:
    run = load_run(run_dir)
    fp32 = run.model.eval()
    int8 = zoo.quantize(copy.deepcopy(fp32))
    native_int8 = _with_native_rows(zoo.quantize(copy.deepcopy(fp32)))
    rows = []
    for name, model in (("fp32", fp32), ("int8", int8),
                        ("int8, zoo's native product at every row count", native_int8)):
        start = time.perf_counter()
        metrics = run.task.evaluate(model, "test")
        rows.append((name, metrics["bleu"], metrics["chrf"], time.perf_counter() - start))
    ours = _greedy_ids(run.task, fp32)
    agree = _agreement(ours, _greedy_ids(run.task, int8), run.task.eos_id)
    tokens = sum(len(ids) + 1 for ids in ours)
    out = ["| translate-de-en test split | BLEU | chrF | seconds (whole split, beam "
           f"{run.task.default_beam}) |", "|---|---|---|---|"]
    out += [f"| {n} | {b:.2f} | {c:.2f} | {s:.1f} |" for n, b, c, s in rows]
    out.append(f"\nBLEU int8 − fp32: {rows[1][1] - rows[0][1]:+.2f} (native at every row count "
               f"{rows[2][1] - rows[0][1]:+.2f}); greedy tokens identical: "
               f"{agree:.2%} (fp32 made {tokens} tokens, end tokens included)\n")
    return out + references_for_int8(run)


def vit(run_dir: str) -> list[str]:
    run = load_run(run_dir)
    fp32 = run.model.eval()
    int8 = zoo.quantize(copy.deepcopy(fp32))
    run.task.prepare()
    x, y = run.task._splits["test"]
    preds = {}
    seconds = {}
    with torch.no_grad():
        for name, model in (("fp32", fp32), ("int8", int8)):
            start = time.perf_counter()
            preds[name] = torch.cat([model(x[i:i + 500]).argmax(-1) for i in range(0, len(x), 500)])
            seconds[name] = time.perf_counter() - start
    out = ["| Fashion-MNIST test split | top-1 | seconds |", "|---|---|---|"]
    out += [f"| {n} | {(p == y).float().mean().item():.2%} | {seconds[n]:.1f} |"
            for n, p in preds.items()]
    out.append(f"\nsame prediction: {(preds['fp32'] == preds['int8']).float().mean().item():.2%}"
               f" of {len(y)} images")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--translate", metavar="RUN", help="a translate-de-en run folder")
    parser.add_argument("--vit", metavar="RUN", help="a fashion-mnist-vit run folder")
    args = parser.parse_args()
    if args.translate:
        print("\n".join(translation(args.translate)) + "\n")
    if args.vit:
        print("\n".join(vit(args.vit)))


if __name__ == "__main__":
    main()
