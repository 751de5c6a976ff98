"""Algorithmic sequence tasks: sort, copy, reverse.

The sorting task of the article this project grew from, “Attention Is All You
Need 重读笔记”: random sequences of ``seq_len`` numbers drawn from 1 to
``num_values`` (both included) map to the same numbers in order. A trained model
takes exactly that input (:meth:`SequenceTask.takes`) and refuses any other. The
decoder reads BOS and the target; it predicts the target and EOS. ``copy`` and
``reverse`` change only the target. Every split is drawn from its own seeded
generator, so the data is the same on every machine and run; held-out sequences are
drawn apart from training.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from ._seq2seq import Seq2SeqTask

OFFSET = 3  # ids 0, 1, 2 are PAD, BOS, EOS; value v is token v + 2 (so 1 -> 3)
EXAMPLE = (3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3)
"""The digits of pi, the example input's numbers (cycled to the task's length)."""


def _short(text: str, limit: int = 60) -> str:
    """``text`` quoted, cut to ``limit`` characters (a pasted file does not fill the
    screen)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


class SequenceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    num_samples: int = Field(10000, ge=1)
    """Training sequences (the article: 10,000)."""
    valid_samples: int = Field(1000, ge=1)
    test_samples: int = Field(1000, ge=1)
    seq_len: int = Field(8, ge=1)
    num_values: int = Field(10, ge=2)
    """Numbers are drawn from 1 to num_values (both included)."""


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

    def takes(self) -> str:
        """The input the task takes, in words: ``8 numbers from 1 to 10``, the length and
        values it is trained on (and nothing else: a model trained on 8 numbers does not
        sort 3 or 12). Its refusal says it, and so does the sort recipe's description."""
        s = self.settings
        return f"{s.seq_len} numbers from 1 to {s.num_values}"

    def example(self) -> str:
        """An input the task takes: ``3 1 4 1 5 9 2 6`` (pi's digits, as many as it takes,
        each brought into 1 .. ``num_values``)."""
        s = self.settings
        return " ".join(str((EXAMPLE[i % len(EXAMPLE)] - 1) % s.num_values + 1)
                        for i in range(s.seq_len))

    def parse_input(self, text: str) -> list[int]:
        """``text``'s numbers (spaces or commas between them) as source ids; anything but
        :meth:`takes` is one RecipeError saying what is wrong with it."""
        try:
            values = [int(v) for v in text.replace(",", " ").split()]
        except ValueError:
            values = None
        wrong = self._wrong(values)
        if wrong:
            from zoo.plugin_api import RecipeError

            raise RecipeError(f"{self.transform} takes {self.takes()}, separated by spaces "
                              f"(e.g. '{self.example()}'): the length and values it was "
                              f"trained on; {_short(text)} {wrong}")
        return [v + OFFSET - 1 for v in values]

    def _wrong(self, values: list[int] | None) -> str:
        """What is wrong with the numbers given (``''``: nothing)."""
        s = self.settings
        if values is None:
            return "is not whole numbers"
        wrong = []
        if len(values) != s.seq_len:
            wrong.append(f"has {len(values)} number{'s' * (len(values) != 1)}")
        outside = sorted({v for v in values if not 1 <= v <= s.num_values})
        if outside:
            wrong.append(f"holds {', '.join(map(str, outside[:5]))}"
                         f"{', ...' if len(outside) > 5 else ''}, outside 1 to {s.num_values}")
        return " and ".join(wrong)

    def render_output(self, ids) -> str:
        """The numbers generated before the end token: at most ``seq_len`` (the sort of n
        numbers is n numbers, whatever else the model would go on to say)."""
        ids = ids.tolist() if torch.is_tensor(ids) else list(ids)
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        values = [str(i - OFFSET + 1) for i in ids if i >= OFFSET]
        return " ".join(values[: self.settings.seq_len])

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
