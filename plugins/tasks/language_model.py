"""Causal language modelling of English sentences: the English side of Debian's
``trans-de-en`` example sentences (the TU Chemnitz dictionary "Ding", GPL; read from the
installed package at run time, never copied into this project), each sentence once.

A seeded shuffle splits off ``valid_size`` and ``test_size`` sentences. A byte-level
BPE tokenizer (Hugging Face ``tokenizers``, as GPT-2's: any text can be written, no
unknown token) is trained on the training split only and saved in the run folder.
Each sentence is read as ``<|endoftext|> sentence <|endoftext|>`` and the model
predicts every token after the first (the next-token loss of Radford et al. 2018);
the metric is the held-out perplexity, exp of the mean loss per predicted token (the
end token counted), lower being better. A trained run writes text through its
tokenizer: ``zoo generate runs/lm-english "The weather"``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from ._seq2seq import batches_of, pad_batch
from .translate import DATA, sentence_pairs

PAD, END = 0, 1
SPECIALS = ["<pad>", "<|endoftext|>"]  # ids 0 and 1: padding, and a text's start and end


class LanguageModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vocab_size: int = Field(4000, ge=300)
    """Byte-level BPE vocabulary (256 bytes, the merges, and the two special tokens)."""
    valid_size: int = Field(1000, ge=1)
    test_size: int = Field(1000, ge=1)
    max_tokens: int = Field(64, ge=4)
    """Training sentences longer than this (in BPE tokens) are left out."""
    max_train: int | None = Field(None, ge=1)
    """Use only this many training sentences (quick tests)."""
    split_seed: int = 1234
    """The train/valid/test split's seed: fixed, so runs are comparable."""


def english_sentences(path: Path = DATA) -> list[str]:
    """The English sentences of the dictionary's clean sentence pairs, each once, in file
    order."""
    return list(dict.fromkeys(en for _, en in sentence_pairs(path)))


class EnglishLanguageModel:
    """The ``lm-english`` task (see the module)."""

    Settings = LanguageModelSettings
    unit = "tokens"
    metric = "perplexity"
    lower_is_better = True
    pad_id, bos_id, eos_id = PAD, END, END

    def __init__(self, settings: LanguageModelSettings | None = None, *, seed: int = 0,
                 workdir: Path | None = None, data: Path = DATA) -> None:
        self.settings = settings or LanguageModelSettings()
        self.workdir = Path(workdir) if workdir is not None else None
        self.data_path = data
        self.tokenizer = None
        self._splits: dict[str, list[str]] = {}
        self._encoded: dict[str, list[list[int]]] = {}

    # -- data -------------------------------------------------------------------------------------
    def prepare(self) -> None:
        if self._splits:
            return
        sentences = english_sentences(self.data_path)
        random.Random(self.settings.split_seed).shuffle(sentences)
        v, t = self.settings.valid_size, self.settings.test_size
        self._splits = {"test": sentences[:t], "valid": sentences[t:t + v],
                        "train": sentences[t + v:][: self.settings.max_train]}
        self.tokenizer = self._tokenizer()
        for split, texts in self._splits.items():
            encoded = [self.encode(text) for text in texts]
            if split == "train":
                encoded = [ids for ids in encoded if len(ids) <= self.settings.max_tokens + 2]
            self._encoded[split] = encoded

    def _saved(self) -> Path | None:
        return self.workdir / "tokenizer.json" if self.workdir is not None else None

    def _tokenizer(self):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        saved = self._saved()
        if saved is not None and saved.exists():
            return Tokenizer.from_file(str(saved))
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=self.settings.vocab_size, special_tokens=SPECIALS, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(self._splits["train"], trainer)
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            tok.save(str(saved))
        return tok

    def _ensure_tokenizer(self):
        if self.tokenizer is None:
            saved = self._saved()
            if saved is None or not saved.exists():
                raise RuntimeError("lm-english has no tokenizer yet: call prepare()")
            self.tokenizer = self._tokenizer()
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """``<|endoftext|>`` + the text's tokens + ``<|endoftext|>``."""
        return [END, *self._ensure_tokenizer().encode(text).ids, END]

    def text_tokenizer(self):
        """The run's tokenizer as transformers' ``PreTrainedTokenizerFast`` (what
        ``zoo.complete``, ``zoo.stream_text`` and ``zoo generate`` read prompts with): a
        prompt is not given the start token, as GPT-2's tokenizer gives none."""
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast(tokenizer_object=self._ensure_tokenizer(),
                                       bos_token=SPECIALS[END], eos_token=SPECIALS[END],
                                       pad_token=SPECIALS[PAD], padding_side="left")

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self._ensure_tokenizer().get_vocab_size(), "bos_id": END,
                "eos_id": END}

    def generation(self) -> dict[str, Any]:
        """How a model trained here decodes: from its prompt, to the end token."""
        return {"start_id": END, "eos_ids": (END,), "pad_id": PAD, "num_beams": 1}

    def dataset(self, split: str) -> list[list[int]]:
        self.prepare()
        return self._encoded[split]

    def lengths(self, split: str) -> list[int]:
        """Each sentence's length in tokens (``batch_by_length``)."""
        return [len(ids) for ids in self.dataset(split)]

    def collate(self, items: list[list[int]]) -> dict:
        ids = pad_batch(items, PAD)
        return {"tokens": ids[:, :-1], "target": ids[:, 1:]}

    def loss(self, model, batch: dict, criterion):
        # right padding: the causal mask already hides it from every real token
        logits = model(batch["tokens"])
        target = batch["target"]
        loss = criterion(logits.flatten(0, 1), target.flatten(), ignore_index=PAD)
        return loss, int(target.ne(PAD).sum())

    def batches(self, split: str, batch_size: int, device=None, limit: int | None = None):
        return batches_of(self.dataset(split), self.collate, batch_size, device, limit)

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int = 64, limit: int | None = None,
                 device=None) -> dict[str, float]:
        """Perplexity and next-token accuracy on ``split`` (its first ``limit``
        sentences)."""
        nll, correct, total = 0.0, 0, 0
        for batch in self.batches(split, batch_size, device, limit):
            logits = model(batch["tokens"]).float()
            target = batch["target"]
            keep = target.ne(PAD)
            nll += float(F.cross_entropy(logits.flatten(0, 1), target.flatten(),
                                         ignore_index=PAD, reduction="sum"))
            correct += int((logits.argmax(-1).eq(target) & keep).sum())
            total += int(keep.sum())
        loss = nll / max(total, 1)
        return {"perplexity": math.exp(min(loss, 50.0)), "loss": loss,
                "token_accuracy": correct / max(total, 1)}

    def samples(self, model, n: int = 5, device=None) -> list[dict[str, str]]:
        """The first words of ``n`` test sentences and the model's greedy continuation of
        each, for a person to judge."""
        from zoo.plugin_api import complete

        prompts = [" ".join(text.split()[:2]) for text in self._splits["test"][:n]]
        outputs = complete(model, prompts, tokenizer=self.text_tokenizer(), max_new_tokens=24)
        return [{"prompt": p, "output": p + out} for p, out in zip(prompts, outputs)]
