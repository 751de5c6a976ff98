"""Algorithmic sequence tasks: sort, copy, reverse.

The sorting task of the article this project grew from, “Attention Is All You
Need 重读笔记”: random sequences of ``seq_len`` digits drawn from
1..``num_values`` map to the same digits in order. The decoder reads BOS and the
target; it predicts the target and EOS. ``copy`` and ``reverse`` change only the
target. Every split is drawn from its own seeded generator, so the data is the
same on every machine and run; held-out sequences are drawn apart from training.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from ._seq2seq import Seq2SeqTask

OFFSET = 3  # ids 0, 1, 2 are PAD, BOS, EOS; value v is token v + 2 (so 1 -> 3)


class SequenceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_samples: int = Field(10000, ge=1)
    """Training sequences (the article: 10,000)."""
    valid_samples: int = Field(1000, ge=1)
    test_samples: int = Field(1000, ge=1)
    seq_len: int = Field(8, ge=1)
    num_values: int = Field(10, ge=2)
    """Digits are drawn from 1 .. num_values."""


class SequenceTask(Seq2SeqTask):
    Settings = SequenceSettings
    metric = "token_accuracy"
    transform: str

    def __init__(self, settings: SequenceSettings | None = None, *, seed: int = 0,
                 workdir: Path | None = None) -> None:
        self.settings = settings or SequenceSettings()
        self.seed = seed
        self._data: dict[str, list] = {}

    def prepare(self) -> None:
        s = self.settings
        sizes = {"train": s.num_samples, "valid": s.valid_samples, "test": s.test_samples}
        for index, (split, n) in enumerate(sizes.items()):
            g = torch.Generator().manual_seed(self.seed * 1000 + 17 + index)
            values = torch.randint(1, s.num_values + 1, (n, s.seq_len), generator=g)
            self._data[split] = [self._pair(row) for row in values.tolist()]

    def data_bytes(self) -> int:
        """About the memory ``prepare`` holds: for each example the drawn int64 row, then
        two Python lists of ints (56 bytes a list, 8 a pointer, 28 an int past Python's
        cached small ones) and their tuple."""
        s = self.settings
        examples = s.num_samples + s.valid_samples + s.test_samples
        per_int = 8 + (28 if s.num_values + OFFSET > 256 else 0)
        return examples * (8 * s.seq_len + 2 * (56 + per_int * s.seq_len) + 56)

    def _pair(self, row: list[int]) -> tuple[list[int], list[int]]:
        if self.transform == "sort":
            target = sorted(row)
        elif self.transform == "reverse":
            target = row[::-1]
        else:
            target = list(row)
        return [v + OFFSET - 1 for v in row], [v + OFFSET - 1 for v in target]

    def generation(self) -> dict:
        """The task's ids and beam; at most the sequence's length + its end token new."""
        return {**super().generation(), "max_new_tokens": self.settings.seq_len + 1}

    @property
    def vocab_size(self) -> int:
        return self.settings.num_values + OFFSET

    def model_overrides(self) -> dict:
        return {"vocab_size": self.vocab_size, "pad_id": self.pad_id,
                "max_len": self.settings.seq_len + 2}

    def dataset(self, split: str) -> list:
        if not self._data:
            self.prepare()
        return self._data[split]

    def parse_input(self, text: str) -> list[int]:
        try:
            values = [int(v) for v in text.replace(",", " ").split()]
        except ValueError:
            values = []
        if not values or not all(1 <= v <= self.settings.num_values for v in values):
            from zoo.plugin_api import RecipeError

            raise RecipeError(f"{self.transform} takes numbers from 1 to "
                              f"{self.settings.num_values} separated by spaces, e.g. '3 1 4 1 5'; "
                              f"got {text!r}")
        return [v + OFFSET - 1 for v in values]

    def render_output(self, ids) -> str:
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return " ".join(str(i - OFFSET + 1) for i in ids if i >= OFFSET)

    def token_strings(self, ids) -> list[str]:
        names = {self.pad_id: "<pad>", self.bos_id: "<s>", self.eos_id: "</s>"}
        return [names.get(i, str(i - OFFSET + 1)) for i in ids]

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int = 256, limit: int | None = None,
                 device=None) -> dict[str, float]:
        from zoo.plugin_api import generate

        metrics = self.token_accuracy(model, self.batches(split, batch_size, device, limit))
        right = total = 0
        for batch in self.batches(split, batch_size, device, limit):
            out = generate(model, batch["src"], **{**self.generation(), "num_beams": 1})
            want = batch["tgt_out"]
            width = min(out.shape[1], want.shape[1])
            same = (out[:, :width] == want[:, :width]).all(1) & (out.shape[1] >= want.shape[1])
            right += int(same.sum())
            total += len(want)
        metrics["sequence_accuracy"] = right / max(total, 1)
        return metrics


class SortTask(SequenceTask):
    transform = "sort"


class CopyTask(SequenceTask):
    transform = "copy"


class ReverseTask(SequenceTask):
    transform = "reverse"
