"""zoo's lm-english beside a reference trainer on the same work: transformers'
``GPT2LMHeadModel`` of the same shape trained by transformers' own ``Trainer`` on the
same sentences, tokenizer, batch size, optimizer, schedule and number of steps as a
zoo run, then scored the same way (held-out perplexity per BPE token, the end token
counted).

    .venv/bin/zoo train lm-english --out runs/lm-english
    .venv/bin/python benchmarks/lm_reference.py --run runs/lm-english

It reads the run's tokenizer and step count, trains the reference for as many steps
(AdamW 0.9/0.98, weight decay 0.01, warmup then a cosine to zero, clipping at 1.0,
batches of similar length), and prints both perplexities and both wall times.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import torch


def _reference_model(settings: dict, vocab: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab, n_positions=settings["max_len"], n_embd=settings["d_model"],
        n_layer=settings["layers"], n_head=settings["n_heads"], n_inner=settings["d_ff"],
        activation_function="gelu_new", resid_pdrop=settings["dropout"],
        embd_pdrop=settings["dropout"], attn_pdrop=settings["attention_dropout"],
        layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=1, pad_token_id=0))


def _collate(items: list[dict]) -> dict:
    width = max(len(i["input_ids"]) for i in items)
    ids = torch.zeros(len(items), width, dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, :len(item["input_ids"])] = torch.tensor(item["input_ids"])
    real = ids != 0
    return {"input_ids": ids, "attention_mask": real.long(),
            "labels": ids.masked_fill(~real, -100)}


@torch.no_grad()
def _perplexity(model, sentences: list[list[int]], batch: int = 64) -> float:
    model.eval()
    nll = count = 0.0
    for start in range(0, len(sentences), batch):
        b = _collate([{"input_ids": s} for s in sentences[start:start + batch]])
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        target = b["labels"][:, 1:]
        nll += float(torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), target.flatten(), ignore_index=-100,
            reduction="sum"))
        count += int((target != -100).sum())
    return math.exp(nll / count)


def main() -> None:
    from transformers import Trainer, TrainingArguments

    from zoo.training.runs import load_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a finished zoo lm-english run")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    run = load_run(args.run)
    run.task.prepare()
    results = json.loads((Path(args.run) / "results.json").read_text())
    steps = int(results["step"])
    train = run.recipe
    settings = run.model.settings.model_dump()
    vocab = run.task.tokenizer.get_vocab_size()
    torch.manual_seed(train.seed)
    model = _reference_model(settings, vocab)
    data = [{"input_ids": ids} for ids in run.task.dataset("train")]
    with tempfile.TemporaryDirectory() as out:
        options = TrainingArguments(
            output_dir=out, per_device_train_batch_size=train.batch_size, max_steps=steps,
            learning_rate=train.optimizer.lr, adam_beta1=0.9, adam_beta2=0.98,
            adam_epsilon=1e-8, weight_decay=0.01, warmup_steps=train.schedule.warmup_steps,
            lr_scheduler_type="cosine", max_grad_norm=train.clip_norm or 1.0,
            logging_steps=200, save_strategy="no", report_to=[], train_sampling_strategy="group_by_length",
            length_column_name="length", dataloader_num_workers=0, seed=train.seed,
            use_cpu=True, disable_tqdm=True)
        for item in data:
            item["length"] = len(item["input_ids"])
        start = time.perf_counter()
        Trainer(model=model, args=options, train_dataset=data, data_collator=_collate).train()
        seconds = time.perf_counter() - start
    test = run.task.dataset("test")
    figures = {"steps": steps, "zoo_test_perplexity": results["test"]["perplexity"],
               "reference_test_perplexity": _perplexity(model, test),
               "reference_seconds": seconds,
               "zoo_seconds": results["seconds"]}
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
