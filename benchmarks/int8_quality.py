"""int8 against fp32 on trained runs: what zoo.quantize keeps (the table in
docs/deploy.md).

    .venv/bin/python benchmarks/int8_quality.py --translate runs/translate-de-en \\
        --vit runs/fashion-mnist-vit

- translation: test BLEU and chrF of the fp32 and the int8 model (the task's own
  evaluation: sacreBLEU on detokenised text, the recipe's beam), and the share of
  greedy tokens that are the same (position by position, up to the longer of the two
  outputs, over the whole test split);
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


def greedy_agreement(task, fp32, int8, batch_size: int = 64) -> tuple[float, int]:
    """The share of greedy tokens equal in both models' outputs, and the tokens compared."""
    from zoo.plugin import greedy

    same = total = 0
    pairs = task.references("test")
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        src = task.collate([(task.parse_input(de), []) for de, _ in chunk])["src"]
        limit = task.decode_limit(src)
        a = greedy(fp32, src, max_new_tokens=limit, bos_id=task.bos_id, eos_id=task.eos_id)
        b = greedy(int8, src, max_new_tokens=limit, bos_id=task.bos_id, eos_id=task.eos_id)
        for x, y in zip(a.tolist(), b.tolist()):
            x = x[: x.index(task.eos_id) + 1] if task.eos_id in x else x
            y = y[: y.index(task.eos_id) + 1] if task.eos_id in y else y
            n = max(len(x), len(y))
            same += sum(1 for i in range(min(len(x), len(y))) if x[i] == y[i])
            total += n
    return same / max(total, 1), total


def translation(run_dir: str) -> list[str]:
    run = load_run(run_dir)
    fp32 = run.model.eval()
    int8 = zoo.quantize(copy.deepcopy(fp32))
    rows = []
    for name, model in (("fp32", fp32), ("int8", int8)):
        start = time.perf_counter()
        metrics = run.task.evaluate(model, "test")
        rows.append((name, metrics["bleu"], metrics["chrf"], time.perf_counter() - start))
    agree, tokens = greedy_agreement(run.task, fp32, int8)
    out = ["| translate-de-en test split | BLEU | chrF | seconds (whole split, beam "
           f"{run.task.default_beam}) |", "|---|---|---|---|"]
    out += [f"| {n} | {b:.2f} | {c:.2f} | {s:.1f} |" for n, b, c, s in rows]
    out.append(f"\nBLEU int8 − fp32: {rows[1][1] - rows[0][1]:+.2f}; greedy tokens identical: "
               f"{agree:.2%} of {tokens}")
    return out


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
