"""zoo's translate-de-en beside a reference trainer on the same work: Hugging Face
``MarianMTModel`` trained by ``transformers``' own ``Seq2SeqTrainer``.

    .venv/bin/python benchmarks/translate_reference.py                 # 30 minutes each
    .venv/bin/python benchmarks/translate_reference.py --minutes 1 --test-limit 50

Both sides get, one after the other, the whole machine for the same wall-clock
budget of training (``--minutes``), and the same:

- data: the task's fixed train/valid/test split of Debian's trans-de-en sentences,
  and the pairs zoo trains on (longer ones left out alike);
- tokenizer: the BPE vocabulary zoo's run trains on the training split (the reference
  reads zoo's ``tokenizer.json``, so token ids are the same);
- model: a ``MarianConfig`` equal to the recipe's model (``zoo.bench.peers.marian``:
  sizes, ReLU, sinusoidal positions, shared and tied embeddings, post-norm, dropout,
  attention and activation dropout);
- optimisation: the recipe's (AdamW with its betas, eps and weight decay; its
  schedule with its warmup, a cosine over time becoming transformers' cosine over
  the steps zoo's run made; label smoothing; gradient clipping; batch size; batches
  of similar length as ``train_sampling_strategy="group_by_length"``), as
  ``Seq2SeqTrainingArguments``. What ``Seq2SeqTrainer`` has no setting for (word
  dropout, averaged or best-validation checkpoints) zoo's side keeps and the
  reference does without;
- evaluation: test-split BLEU and chrF by sacreBLEU on detokenised text, beam 4,
  at most ``2 * source length + 10`` new tokens.

zoo's budget is its run's ``time_limit_minutes`` (its validations count in it); the
reference's is a ``TrainerCallback`` that stops training at the budget (it validates
nothing). The last lines print both rows side by side; ``--json`` writes them. The
reference's test translations (source, reference, output) and its logged training
loss are kept in ``OUT/reference`` (``test-translations.tsv``, ``log_history.json``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import zoo
from zoo.training.runs import load_run


def zoo_side(minutes: float, out: Path, test_limit: int | None, overrides: dict) -> dict:
    """Train the recipe for ``minutes``; its run folder's test metrics."""
    start = time.perf_counter()
    sets = {"train.time_limit_minutes": minutes, **overrides}
    if test_limit:
        sets["train.eval_limit"] = min(test_limit, 300)
    result = zoo.train("translate-de-en", overrides=sets, run_dir=out, progress=False)
    metrics = dict(result.metrics)
    if test_limit:  # the smoke run scores the same sentences as the reference
        metrics = result.task.evaluate(result.model.eval(), "test", limit=test_limit)
    return {"impl": "zoo", "steps": result.step, "seconds": time.perf_counter() - start,
            "bleu": metrics["bleu"], "chrf": metrics["chrf"]}


SCHEDULES = {"inverse-sqrt": "inverse_sqrt", "cosine": "cosine",
             "constant": "constant_with_warmup"}
"""zoo's schedule names and transformers' for the same curve."""


def _schedule(name: str) -> str:
    if name not in SCHEDULES:
        raise SystemExit(f"translate_reference: the reference has no schedule like zoo's "
                         f"{name!r}; use one of {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def _scheduler(spec) -> dict:
    """``Seq2SeqTrainingArguments``' scheduler settings for zoo's schedule."""
    if spec.name == "cosine" and spec.min_lr_ratio:
        return {"lr_scheduler_type": "cosine_with_min_lr",
                "lr_scheduler_kwargs": {"min_lr_rate": spec.min_lr_ratio}}
    return {"lr_scheduler_type": _schedule(spec.name)}


def _new_tokens(task, src: torch.Tensor) -> int:
    """The new tokens zoo's side allows these sources (the task's length limit)."""
    settings = zoo.GenerationSettings(**task.generation())
    return settings.length_limit(1, src.shape[1]) - 1


def reference_side(run_dir: Path, minutes: float, out: Path, test_limit: int | None,
                   zoo_steps: int) -> dict:
    """MarianMTModel with Seq2SeqTrainer for ``minutes``, on zoo's run's data and
    tokenizer; test BLEU with beam 4. A zoo schedule over time (a cosine that ends with
    the clock) is, for the reference, transformers' cosine over the steps zoo made."""
    import sacrebleu
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    from zoo.bench.peers import marian

    run = load_run(run_dir)
    recipe, task = run.recipe, run.task
    torch.manual_seed(recipe.seed)
    peer = marian(run.model).model  # a fresh MarianMTModel of the run's model's sizes
    pad, bos, eos = task.pad_id, task.bos_id, task.eos_id

    def collate(items: list[dict]) -> dict:
        # the task's own batches: the decoder reads BOS + target and predicts target + EOS.
        # The decoder's inputs are given, as DataCollatorForSeq2Seq does: with label
        # smoothing the Trainer takes the labels away before calling the model
        batch = task.collate([(item["input_ids"], item["target"]) for item in items])
        return {"input_ids": batch["src"], "attention_mask": batch["src"].ne(pad).long(),
                "decoder_input_ids": batch["tgt_in"],
                "labels": batch["tgt_out"].masked_fill(batch["tgt_out"].eq(pad), -100)}

    budget = minutes * 60

    class Budget(TrainerCallback):
        started = 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            Budget.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if time.perf_counter() - Budget.started >= budget:
                control.should_training_stop = True

    opt = recipe.optimizer
    smoothing = (recipe.loss.settings or {}).get("label_smoothing", 0.0) \
        if recipe.loss.name == "cross-entropy" else 0.0
    args = Seq2SeqTrainingArguments(
        output_dir=str(out), per_device_train_batch_size=recipe.batch_size,
        learning_rate=opt.lr, adam_beta1=opt.betas[0], adam_beta2=opt.betas[1],
        adam_epsilon=opt.eps, weight_decay=opt.weight_decay, optim="adamw_torch",
        warmup_steps=recipe.schedule.warmup_steps or 0, **_scheduler(recipe.schedule),
        label_smoothing_factor=smoothing, max_grad_norm=recipe.clip_norm or 0.0,
        num_train_epochs=recipe.epochs or 1,
        max_steps=zoo_steps if recipe.schedule.over == "time" else recipe.steps or -1,
        train_sampling_strategy="group_by_length" if recipe.batch_by_length else "random",
        save_strategy="no", eval_strategy="no",
        logging_steps=50, report_to=[], use_cpu=True, seed=recipe.seed,
        dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True)
    # items as dicts: group_by_length reads each source's length from "input_ids"
    train = [{"input_ids": src, "target": tgt} for src, tgt in task.dataset("train")]
    trainer = Seq2SeqTrainer(model=peer, args=args, train_dataset=train,
                             data_collator=collate, callbacks=[Budget()])
    start = time.perf_counter()
    state = trainer.train()
    trained = time.perf_counter() - start

    peer.eval()
    pairs = task.references("test")[:test_limit]
    hyps = []
    with torch.no_grad():
        for i in range(0, len(pairs), 64):
            chunk = pairs[i:i + 64]
            src = task.collate([(task.parse_input(de), []) for de, _ in chunk])["src"]
            ids = peer.generate(input_ids=src, attention_mask=src.ne(pad), num_beams=4,
                                max_new_tokens=_new_tokens(task, src), decoder_start_token_id=bos,
                                eos_token_id=eos, pad_token_id=pad, early_stopping=True)
            hyps += [task.render_output(row) for row in ids]
    refs = [en for _, en in pairs]
    # kept to look at: the test translations, and the training loss as the Trainer logged it
    out.mkdir(parents=True, exist_ok=True)
    (out / "test-translations.tsv").write_text(
        "".join(f"{de}\t{en}\t{hyp}\n" for (de, en), hyp in zip(pairs, hyps)))
    (out / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    return {"impl": "Marian + Seq2SeqTrainer", "steps": state.global_step, "seconds": trained,
            "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score}


def table(rows: list[dict], minutes: float) -> str:
    lines = [f"translate-de-en, {minutes:g} minutes of training each, test split, beam 4:",
             "| trainer | steps | seconds | BLEU | chrF |", "|---|---|---|---|---|"]
    lines += [f"| {r['impl']} | {r['steps']} | {r['seconds']:.0f} | {r['bleu']:.2f} | "
              f"{r['chrf']:.2f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="training budget of each side (default 30)")
    parser.add_argument("--out", default="runs/reference", help="folder of both runs")
    parser.add_argument("--test-limit", type=int, help="score only this many test sentences "
                        "(smoke runs)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of zoo's recipe (the reference follows it)")
    parser.add_argument("--json", metavar="OUT", help="write both rows as JSON")
    parser.add_argument("--zoo-run", metavar="RUN", help="a finished translate-de-en run "
                        "(same budget, same machine) to compare with, instead of training zoo "
                        "again; its results.json gives zoo's row")
    args = parser.parse_args(argv)
    from zoo.cli_decode import parse_sets

    out = Path(args.out)
    if args.zoo_run:
        zoo_dir = Path(args.zoo_run)
        results = json.loads((zoo_dir / "results.json").read_text())
        rows = [{"impl": "zoo", "steps": results["step"], "seconds": results["seconds"],
                 "bleu": results["test"]["bleu"], "chrf": results["test"]["chrf"]}]
    else:
        zoo_dir = out / "zoo"
        rows = [zoo_side(args.minutes, zoo_dir, args.test_limit, parse_sets(args.set))]
    print(table(rows, args.minutes), flush=True)
    rows.append(reference_side(zoo_dir, args.minutes, out / "reference", args.test_limit,
                               zoo_steps=rows[0]["steps"]))
    print(table(rows, args.minutes))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
