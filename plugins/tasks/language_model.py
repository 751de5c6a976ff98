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

Fine-tuning an imported language model (``--set model=hf-hub:openai-community/gpt2``)
reads the same sentences with that model's own tokenizer and start and end tokens
instead (``<|endoftext|> sentence <|endoftext|>`` for GPT-2, ``<s> sentence </s>`` for
Llama), saved in the run folder with the model's generation settings, so the run
decodes without the model it started from. The perplexity is then per token of that
tokenizer: compare runs of one tokenizer only.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Kind, kind_of

from ._pretrained import FOLDER, PretrainedTokenizer
from ._seq2seq import batches_of, pad_batch
from .translate import DATA, sentence_pairs

PAD, END = 0, 1
SPECIALS = ["<pad>", "<|endoftext|>"]  # ids 0 and 1: padding, and a text's start and end
IGNORE = -100
"""The target of a padded place, which the loss and the metrics leave out (a pad id
would not do: GPT-2 pads with its end token, which is a target)."""


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
        self.pretrained: PretrainedTokenizer | None = None
        """A fine-tuned imported model's tokenizer and ids (None: the task's own BPE)."""
        self.context: int | None = None
        """The positions a fine-tuned model reads: longer sentences are cut to them."""
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
            if self.context is not None:  # a fine-tuned model reads this many at most
                encoded = [ids[: self.context + 1] for ids in encoded]
            self._encoded[split] = encoded

    def _saved(self) -> Path | None:
        return self.workdir / "tokenizer.json" if self.workdir is not None else None

    def _saved_pretrained(self) -> PretrainedTokenizer | None:
        """The fine-tuned model's tokenizer this run saved, adopted, or None."""
        folder = self.workdir / FOLDER if self.workdir is not None else None
        if self.pretrained is None and folder is not None and (folder / "zoo-ids.json").is_file():
            self._adopt(PretrainedTokenizer.load(folder))
        return self.pretrained

    # -- a pretrained model's tokenizer ------------------------------------------------------
    def use_pretrained(self, model) -> None:
        """Fine-tune ``model`` (a language model imported from a transformers folder): its
        own tokenizer and start, end and pad ids replace the task's BPE, and are saved in
        the run folder with its generation settings."""
        if kind_of(model) is not Kind.LANGUAGE_MODEL:
            raise ValueError("lm-english fine-tunes a language model (a decoder: GPT-2, "
                             f"Llama, ...); {getattr(model.recipe, 'name', 'this model')} "
                             "is not one")
        pretrained = PretrainedTokenizer.of(model, "lm-english")
        if self.workdir is not None:
            pretrained.save(self.workdir / FOLDER)
        self._adopt(pretrained)

    def _adopt(self, pretrained: PretrainedTokenizer) -> None:
        self.pretrained = self.tokenizer = pretrained
        self.context = pretrained.context
        self.pad_id, self.bos_id, self.eos_id = pretrained.pad, pretrained.start, pretrained.eos

    def tokenizer_files(self) -> Path | None:
        """The folder of transformers' files of the run's tokenizer (``zoo export --format
        transformers`` copies them beside the model): a fine-tuned model's own, or the
        task's BPE written there in transformers' form."""
        if self.workdir is None:
            return None
        folder = self.workdir / FOLDER
        if self._saved_pretrained() is None and not (folder / "tokenizer.json").is_file():
            self.text_tokenizer().save_pretrained(str(folder))
        return folder

    def token_strings(self, ids) -> list[str]:
        """The names of ``ids`` (what ``zoo export --format ctranslate2`` calls them)."""
        tokenizer = self._ensure_tokenizer()
        return [tokenizer.id_to_token(int(i)) for i in ids]

    def _tokenizer(self):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if self._saved_pretrained() is not None:
            return self.pretrained
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
        if self.tokenizer is None and self._saved_pretrained() is None:
            saved = self._saved()
            if saved is None or not saved.exists():
                raise RuntimeError("lm-english has no tokenizer yet: call prepare()")
            self.tokenizer = self._tokenizer()
        return self.tokenizer

    def encode(self, text: str) -> list[int]:
        """``<|endoftext|>`` + the text's tokens + ``<|endoftext|>`` (a fine-tuned model's
        own start and end tokens around its tokenizer's ids)."""
        tokenizer = self._ensure_tokenizer()
        if self.pretrained is not None:
            return [self.bos_id, *self.pretrained.text_ids(text), self.eos_id]
        return [END, *tokenizer.encode(text).ids, END]

    def text_tokenizer(self):
        """The run's tokenizer as transformers' ``PreTrainedTokenizerFast`` (what
        ``zoo.complete``, ``zoo.stream_text`` and ``zoo generate`` read prompts with): a
        prompt is not given the start token, as GPT-2's tokenizer gives none."""
        from transformers import PreTrainedTokenizerFast

        if self._saved_pretrained() is not None:
            tokenizer = self.pretrained.tokenizer
            tokenizer.padding_side = "left"
            if tokenizer.pad_token is None:  # GPT-2 and Llama name none: pad with the end
                tokenizer.pad_token_id = self.pad_id
            return tokenizer
        return PreTrainedTokenizerFast(tokenizer_object=self._ensure_tokenizer(),
                                       bos_token=SPECIALS[END], eos_token=SPECIALS[END],
                                       pad_token=SPECIALS[PAD], padding_side="left")

    def model_overrides(self) -> dict[str, Any]:
        return {"vocab_size": self._ensure_tokenizer().get_vocab_size(), "bos_id": END,
                "eos_id": END}

    def generation(self) -> dict[str, Any]:
        """How a model trained here decodes: from its prompt, to the end token (a
        fine-tuned model: by its own generation settings, greedy)."""
        if self._saved_pretrained() is not None and self.pretrained.generation is not None:
            return {**self.pretrained.generation, "num_beams": 1, "do_sample": False}
        return {"start_id": self.bos_id, "eos_ids": (self.eos_id,), "pad_id": self.pad_id,
                "num_beams": 1}

    def dataset(self, split: str) -> list[list[int]]:
        self.prepare()
        return self._encoded[split]

    def lengths(self, split: str) -> list[int]:
        """Each sentence's length in tokens (``batch_by_length``)."""
        return [len(ids) for ids in self.dataset(split)]

    def collate(self, items: list[list[int]]) -> dict:
        ids = pad_batch(items, self.pad_id)
        target = pad_batch(items, IGNORE)[:, 1:]
        return {"tokens": ids[:, :-1], "target": target}

    def loss(self, model, batch: dict, criterion):
        # right padding: the causal mask already hides it from every real token
        logits = model(batch["tokens"])
        target = batch["target"]
        loss = criterion(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE)
        return loss, int(target.ne(IGNORE).sum())

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
            keep = target.ne(IGNORE)
            nll += float(F.cross_entropy(logits.flatten(0, 1), target.flatten(),
                                         ignore_index=IGNORE, reduction="sum"))
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
