"""Shared by the sequence-to-sequence tasks: padding, teacher forcing, token and
sequence accuracy."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2


def pad_batch(seqs: list[list[int]], pad: int = PAD) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out


class TaskTokenizer:
    """A sequence-to-sequence task's text (its ``parse_input`` and ``render_output``) read
    and written as transformers' tokenizers are (``tokenizer(texts, padding=True,
    return_tensors="pt")``, ``batch_decode``, ``decode``), so that ``zoo.translate``
    serves a trained run as it serves an imported model."""

    padding_side = "right"

    def __init__(self, task: "Seq2SeqTask") -> None:
        self.task = task
        self.name_or_path = f"task {type(task).__name__}"

    def __call__(self, texts: list[str], **_: Any) -> dict[str, torch.Tensor]:
        src = pad_batch([self.task.parse_input(t) for t in texts], self.task.pad_id)
        return {"input_ids": src, "attention_mask": src.ne(self.task.pad_id).long()}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.task.render_output(ids)

    def batch_decode(self, rows, skip_special_tokens: bool = True) -> list[str]:
        return [self.task.render_output(row) for row in rows]


class Seq2SeqTask:
    """src/tgt token-id pairs; the decoder reads BOS + tgt and predicts tgt + EOS."""

    unit = "tokens"
    pad_id, bos_id, eos_id = PAD, BOS, EOS

    def parse_input(self, text: str) -> list[int]:
        """A user's input (command line) as source token ids."""
        raise NotImplementedError

    def render_output(self, ids) -> str:
        """Generated ids as text."""
        raise NotImplementedError

    def token_strings(self, ids) -> list[str]:
        """One label per token id (attention maps)."""
        return [str(i) for i in ids]

    default_beam = 1
    """Beam size when ``translate`` is not told one."""

    def generation(self) -> dict[str, Any]:
        """How a model trained on this task decodes, as generation settings by name
        (``zoo.generate``): the task's start, end and pad ids, its beam and its length
        limit. A run's model carries them (``model.generation``)."""
        return {"start_id": self.bos_id, "eos_ids": (self.eos_id,), "pad_id": self.pad_id,
                "num_beams": self.default_beam, "max_new_tokens": 128}

    def text_tokenizer(self) -> "TaskTokenizer":
        """The task's text as a tokenizer of transformers' kind (what ``zoo.translate``
        reads sources and writes translations with): a run's model carries it as
        ``model.tokenizer``."""
        return TaskTokenizer(self)

    @torch.no_grad()
    def translate(self, model, texts: list[str], *, beam_size: int | None = None,
                  batch_size: int = 64, device=None, max_new_tokens: int | None = None
                  ) -> list[str]:
        """``texts`` decoded by ``zoo.translate`` with the task's tokenizer and settings
        (``generation``); greedy for beam 1. ``device`` is the model's own (kept for
        callers that name it)."""
        from zoo.plugin_api import translate

        changes = self.generation()
        if beam_size is not None:
            changes["num_beams"] = beam_size
        if max_new_tokens is not None:
            changes["max_new_tokens"] = max_new_tokens
        return translate(model, texts, tokenizer=self.text_tokenizer(), batch_size=batch_size,
                         **changes)

    def lengths(self, split: str) -> list[int]:
        """Each example's length in tokens, source and target (``batch_by_length``)."""
        return [len(src) + len(tgt) for src, tgt in self.dataset(split)]

    def collate(self, items: list[tuple[list[int], list[int]]]) -> dict:
        src = pad_batch([s for s, _ in items], self.pad_id)
        tgt_in = pad_batch([[self.bos_id, *t] for _, t in items], self.pad_id)
        tgt_out = pad_batch([[*t, self.eos_id] for _, t in items], self.pad_id)
        return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}

    def loss(self, model, batch: dict, criterion):
        logits = model(batch["src"], batch["tgt_in"])
        target = batch["tgt_out"]
        loss = criterion(logits.flatten(0, 1), target.flatten(), ignore_index=self.pad_id)
        return loss, int(target.ne(self.pad_id).sum())

    @torch.no_grad()
    def token_accuracy(self, model, batches) -> dict[str, float]:
        """Teacher-forced: the share of target tokens (EOS included) predicted right,
        and the mean cross-entropy per token."""
        correct = total = 0
        nll = 0.0
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"])
            target = batch["tgt_out"]
            keep = target.ne(self.pad_id)
            correct += int((logits.argmax(-1).eq(target) & keep).sum())
            total += int(keep.sum())
            nll += float(F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(),
                                         ignore_index=self.pad_id, reduction="sum"))
        return {"token_accuracy": correct / max(total, 1), "loss": nll / max(total, 1)}

    def batches(self, split: str, batch_size: int, device=None, limit: int | None = None):
        return batches_of(self.dataset(split), self.collate, batch_size, device, limit)


def batches_of(data, collate, batch_size: int, device=None, limit: int | None = None):
    """The first ``limit`` items of ``data`` (all: None), ``batch_size`` at a time, collated
    and moved to ``device``."""
    n = len(data) if limit is None else min(limit, len(data))
    for start in range(0, n, batch_size):
        batch = collate([data[i] for i in range(start, min(start + batch_size, n))])
        yield {k: v.to(device) if device is not None else v for k, v in batch.items()}
