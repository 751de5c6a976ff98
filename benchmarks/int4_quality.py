"""int4 (``zoo.quantize(model, "int4")``, llama.cpp's q4_0 groups) and int8
against fp32 on a trained language model: test perplexity of each (the task's own
evaluation) and the share of greedy tokens equal to fp32's, continuing the first 4 tokens
of each of the first 200 test sentences by 16 tokens (the agreement docs/bench.md states).

    zoo train lm-english --out runs/lm-english      # six minutes on 2 cores
    .venv/bin/python benchmarks/int4_quality.py runs/lm-english

The int4 groups are llama.cpp's q4_0 reference quantizer's and the rounded activations its
q8_0's (tests/test_int4.py holds both to them), so llama.cpp's q4_0 of the same weights
computes the same numbers but where a value falls half-way between two steps.
"""

from __future__ import annotations

import argparse
import copy

import torch

import zoo
from zoo.training.runs import load_run

PROMPT, NEW, SENTENCES = 4, 16, 200


def _continuations(model, prompts: list[torch.Tensor]) -> list[list[int]]:
    return [zoo.generate(model, p[None], max_new_tokens=NEW, min_new_tokens=NEW,
                         do_sample=False)[0, -NEW:].tolist() for p in prompts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a trained language model's run folder (lm-english)")
    args = parser.parse_args()
    run = load_run(args.run)
    fp32 = run.model.eval()
    models = {"fp32": fp32, "int8": zoo.quantize(copy.deepcopy(fp32)),
              "int4": zoo.quantize(copy.deepcopy(fp32), "int4")}
    prompts = [batch["tokens"][i, :PROMPT]
               for batch in run.task.batches("test", 64, limit=SENTENCES)
               for i in range(batch["tokens"].shape[0])
               if int(batch["tokens"][i].ne(0).sum()) >= PROMPT][:SENTENCES]
    reference = _continuations(fp32, prompts)
    print("| weights | test perplexity | next-token accuracy | greedy tokens equal to fp32's |")
    print("|---|---|---|---|")
    for name, model in models.items():
        metrics = run.task.evaluate(model, "test")
        ours = reference if name == "fp32" else _continuations(model, prompts)
        same = sum(a == b for x, y in zip(reference, ours) for a, b in zip(x, y))
        print(f"| {name} | {metrics['perplexity']:.2f} | {metrics['token_accuracy']:.2%} | "
              f"{same / (len(prompts) * NEW):.1%} |")


if __name__ == "__main__":
    main()
