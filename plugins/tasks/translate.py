"""German to English translation on the example sentences of Debian's
``trans-de-en`` package (the TU Chemnitz dictionary "Ding", GPL; read from the
installed package at run time, never copied into this project).

Each dictionary line is ``German :: English``, with ``|`` separating parallel
sub-entries and ``;`` alternatives. A sub-entry pair is kept when both sides
are sentences: a capital first letter, a final ``.``, ``!`` or ``?``, at least
three words, and none of the dictionary's markup (``{m}``, ``[Am.]``,
``jdm.``, ``sb.``, ``/abbr/``). Where both sides list the same number of
alternatives they pair up in order. Duplicates are dropped; a seeded shuffle
then splits off ``valid_size`` and ``test_size`` pairs. A byte-pair-encoding
tokenizer (Hugging Face ``tokenizers``; one vocabulary for both languages) is
trained on the training split only and saved in the run folder; a pretrained model
being fine-tuned (``--set model=hf-hub:Helsinki-NLP/opus-mt-de-en``) brings its own
tokenizer and token ids instead (``use_pretrained``), saved in the run folder's
``tokenizer/``. The ``lexicon``
setting adds the dictionary's own word and phrase pairs to the training split (never
those of a line that holds a test or validation sentence). Translation
quality is measured on detokenised text with sacreBLEU's BLEU and chrF.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import missing_debian_package

from ._pretrained import FOLDER as PRETRAINED_TOKENIZER
from ._pretrained import PretrainedTokenizer
from ._seq2seq import PAD, Seq2SeqTask

DATA = Path("/usr/share/trans/de-en")
"""The run folder's copy of a fine-tuned model's own tokenizer (transformers' files)."""
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0, 1, 2, 3 = PAD, BOS, EOS, UNK
_SENTENCE = re.compile(r"^[A-ZÄÖÜ\"'„»‚].*[.!?]$")
_MARKUP = re.compile(r"[{}\[\]<>/~]|\bjd[mnrs]?\.|\betw\.|\bsb\.|\bsth\.")


def _is_sentence(text: str) -> bool:
    return bool(_SENTENCE.match(text)) and not _MARKUP.search(text) and len(text.split()) >= 3


def _aligned_lines(path: Path):
    """Each dictionary line's aligned (German, English) alternatives, in file order: the
    ``|`` sub-entries pair up where both sides have as many, and within a sub-entry the
    ``;`` alternatives where both sides have as many."""
    if not path.exists():
        raise missing_debian_package("trans-de-en", path, "The translate-de-en task's data")
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("#") or " :: " not in line:
                continue
            german, english = line.rstrip("\n").split(" :: ", 1)
            de_parts, en_parts = german.split(" | "), english.split(" | ")
            if len(de_parts) != len(en_parts):
                continue
            aligned = []
            for de, en in zip(de_parts, en_parts):
                de_alts = [a.strip() for a in de.split(";")]
                en_alts = [a.strip() for a in en.split(";")]
                if len(de_alts) == len(en_alts):
                    aligned += zip(de_alts, en_alts)
            yield aligned


def sentence_pairs(path: Path = DATA) -> list[tuple[str, str]]:
    """The clean (German, English) sentence pairs of the dictionary file, in file order."""
    pairs, seen = [], set()
    for aligned in _aligned_lines(path):
        for d, e in aligned:
            if _is_sentence(d) and _is_sentence(e) and (d, e) not in seen:
                seen.add((d, e))
                pairs.append((d, e))
    return pairs


_GROUPS = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>|\([^)]*\)")
"""The dictionary's annotations: ``{f}``, ``[Am.]``, ``<abbr>``, ``(im Gedränge)``."""


def _without_annotations(text: str) -> str:
    return " ".join(_GROUPS.sub(" ", text).split())


def lexicon_pairs(path: Path = DATA, held_out=frozenset()) -> list[tuple[str, str]]:
    """The dictionary's word and phrase pairs, in file order, without duplicates: every
    aligned pair that is not a sentence pair, with its annotations taken out
    (``Sprosse {f} :: muntin``). Pairs that still hold markup (``jdm.``, ``sth.``,
    ``/abbr/``) are left out, and so is every pair of a line that holds one of the
    ``held_out`` sentence pairs, so that nothing from a test or validation sentence's
    entry is trained on."""
    pairs, seen = [], set()
    for aligned in _aligned_lines(path):
        if any(pair in held_out for pair in aligned):
            continue
        for d, e in aligned:
            if _is_sentence(d) and _is_sentence(e):
                continue
            d, e = _without_annotations(d), _without_annotations(e)
            if d and e and not _MARKUP.search(d) and not _MARKUP.search(e) \
                    and (d, e) not in seen:
                seen.add((d, e))
                pairs.append((d, e))
    return pairs


class TranslateSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vocab_size: int = Field(8000, ge=100)
    """BPE vocabulary, shared by German and English."""
    valid_size: int = Field(1000, ge=1)
    test_size: int = Field(1000, ge=1)
    max_tokens: int = Field(64, ge=4)
    """Pairs longer than this (either side, in BPE tokens) are left out of training."""
    max_train: int | None = Field(None, ge=1)
    """Use only this many training pairs (quick tests)."""
    beam_size: int = Field(4, ge=1)
    """Beam for the test-set BLEU (1: greedy)."""
    split_seed: int = 1234
    """The train/valid/test split's seed: fixed, so runs are comparable."""
    lexicon: int = Field(0, ge=0)
    """Add this many of the dictionary's word and phrase pairs (``Kleinkind :: toddler``,
    ``nach vorne schauen :: to look forward to the future``; drawn at random with
    ``split_seed``, all of them when there are fewer) to the training split, for words
    the sentences never show. Entries of a dictionary line that holds a test or
    validation sentence are never among them."""
    word_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """In training, each source word (all its BPE pieces) is dropped with this
    probability (Sennrich & Zhang 2019, sec. 3.2; Gal & Ghahramani 2016): its tokens
    become padding, which attention skips. A sentence keeps at least one word."""


class TranslateDeEn(Seq2SeqTask):
    Settings = TranslateSettings
    metric = "bleu"

    def __init__(self, settings: TranslateSettings | None = None, *, seed: int = 0,
                 workdir: Path | None = None, data: Path = DATA) -> None:
        self.settings = settings or TranslateSettings()
        self.workdir = Path(workdir) if workdir is not None else None
        self.data_path = data
        self.tokenizer = None
        self.pretrained = None
        """A pretrained model's tokenizer (``use_pretrained``), or None for the task's BPE."""
        self._splits: dict[str, list[tuple[str, str]]] = {}
        self._encoded: dict[str, list] = {}
        self._word_starts: torch.Tensor | None = None

    # -- data -------------------------------------------------------------------------------------
    def prepare(self) -> None:
        if self._splits:
            return
        pairs = sentence_pairs(self.data_path)
        random.Random(self.settings.split_seed).shuffle(pairs)
        v, t = self.settings.valid_size, self.settings.test_size
        self._splits = {"test": pairs[:t], "valid": pairs[t:t + v], "train": pairs[t + v:]}
        if self.settings.max_train is not None:
            self._splits["train"] = self._splits["train"][: self.settings.max_train]
        if self.settings.lexicon:
            held_out = set(self._splits["test"]) | set(self._splits["valid"])
            lexicon = lexicon_pairs(self.data_path, held_out)
            random.Random(self.settings.split_seed).shuffle(lexicon)
            self._splits["train"] = self._splits["train"] + lexicon[: self.settings.lexicon]
        self.tokenizer = self._tokenizer()
        for split, items in self._splits.items():
            encoded = []
            for de, en in items:
                src, tgt = self.encode(de), self.encode_target(en)
                if split == "train" and max(len(src), len(tgt)) + 1 > self.settings.max_tokens:
                    continue
                encoded.append((src[: self.settings.max_tokens], tgt[: self.settings.max_tokens - 1]))
            self._encoded[split] = encoded

    def _saved_tokenizer(self):
        """The tokenizer this run saved, or None."""
        if self.workdir is not None and (self.workdir / PRETRAINED_TOKENIZER).is_dir():
            self._adopt(PretrainedTokenizer.load(self.workdir / PRETRAINED_TOKENIZER))
            return self.pretrained
        saved = self.workdir / "tokenizer.json" if self.workdir is not None else None
        if saved is None or not saved.exists():
            return None
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(saved))

    def _tokenizer(self):
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

        if self.pretrained is not None:
            return self.pretrained
        saved_tokenizer = self._saved_tokenizer()
        if saved_tokenizer is not None:
            return saved_tokenizer
        saved = self.workdir / "tokenizer.json" if self.workdir is not None else None
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.BpeTrainer(vocab_size=self.settings.vocab_size, special_tokens=SPECIALS,
                                      min_frequency=2, show_progress=False)
        texts = [s for pair in self._splits["train"] for s in pair]
        tok.train_from_iterator(texts, trainer=trainer)
        if saved is not None:
            saved.parent.mkdir(parents=True, exist_ok=True)
            tok.save(str(saved))
        return tok

    # -- a pretrained model's tokenizer ------------------------------------------------------
    def use_pretrained(self, model) -> None:
        """Fine-tune ``model`` (imported from a transformers folder): its own tokenizer
        and token ids (start, end, pad) replace the task's BPE, and are saved in the run
        folder so the run decodes without the source."""
        pretrained = PretrainedTokenizer.of(model, "translate-de-en")
        if self.workdir is not None:
            pretrained.save(self.workdir / PRETRAINED_TOKENIZER)
        self._adopt(pretrained)

    def _adopt(self, pretrained: PretrainedTokenizer) -> None:
        self.pretrained = self.tokenizer = pretrained
        self.pad_id, self.bos_id, self.eos_id = pretrained.pad, pretrained.start, pretrained.eos

    def generation(self) -> dict[str, Any]:
        """The task's ids and beam; fine-tuning an imported model, that model's own
        generation settings (forbidden tokens, length penalty, ...) with the task's beam."""
        if self.tokenizer is None:  # a run's saved tokenizer says whether it fine-tuned
            self.tokenizer = self._saved_tokenizer()
        own = self.pretrained.generation if self.pretrained is not None else None
        base = super().generation() if own is None else {**own, "num_beams": self.default_beam}
        return {**base, **self.length_limit()}

    def length_limit(self) -> dict[str, Any]:
        """At most twice a batch's source length + 10 new tokens, and three times the
        longest source (``max_tokens``): a translation is about as long as its source,
        and a model that loops stops there."""
        return {"max_new_tokens": None, "source_length_limit": (2.0, 10),
                "max_length": 3 * self.settings.max_tokens + 1}

    def tokenizer_files(self) -> Path | None:
        """The folder of a fine-tuned imported model's tokenizer (transformers' files, for
        ``zoo export --format transformers``), or None for the task's own BPE."""
        folder = self.workdir / PRETRAINED_TOKENIZER if self.workdir is not None else None
        return folder if folder is not None and folder.is_dir() else None

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def encode_target(self, text: str) -> list[int]:
        """A target sentence's ids (the end token is added by ``collate``)."""
        if self.pretrained is not None:
            return self.pretrained.encode_target(text)
        return self.encode(text)

    def decode(self, ids) -> str:
        ids = [i for i in (ids.tolist() if torch.is_tensor(ids) else ids)
               if i not in (self.pad_id, self.bos_id)]
        if self.eos_id in ids:
            ids = ids[: ids.index(self.eos_id)]
        return self.tokenizer.decode(ids)

    def _ensure_tokenizer(self) -> None:
        """The run's saved tokenizer when there is one (decoding a trained run needs no
        data), else everything ``prepare`` makes."""
        if self.tokenizer is None:
            self.tokenizer = self._saved_tokenizer()
        if self.tokenizer is None:
            self.prepare()

    def parse_input(self, text: str) -> list[int]:
        self._ensure_tokenizer()
        return self.encode(text)[: self.settings.max_tokens]

    def render_output(self, ids) -> str:
        self._ensure_tokenizer()
        return self.decode(ids)

    def token_strings(self, ids) -> list[str]:
        self._ensure_tokenizer()
        return [self.tokenizer.id_to_token(int(i)) for i in ids]

    def model_overrides(self) -> dict:
        self.prepare()
        return {"vocab_size": self.tokenizer.get_vocab_size(), "pad_id": PAD}

    def dataset(self, split: str) -> list:
        self.prepare()
        return self._encoded[split]

    def references(self, split: str) -> list[tuple[str, str]]:
        self.prepare()
        return self._splits[split]

    # -- training ---------------------------------------------------------------------------------
    def word_starts(self) -> torch.Tensor:
        """(vocab,) True for each token that begins a word (Metaspace's ``▁``) and for the
        special tokens."""
        if self._word_starts is None:
            self._ensure_tokenizer()
            vocab = self.tokenizer.get_vocab_size()
            starts = torch.zeros(vocab, dtype=torch.bool)
            for i in range(vocab):
                token = self.tokenizer.id_to_token(i)
                starts[i] = token is None or token.startswith("\u2581") or token in SPECIALS
            self._word_starts = starts
        return self._word_starts

    def drop_words(self, src: torch.Tensor, p: float) -> torch.Tensor:
        """``src`` (B, L) with each word dropped (its tokens made padding) with probability
        ``p``: one draw per word from torch's global generator (seeded and checkpointed by
        the training loop). A sentence whose every word is drawn is left whole."""
        starts = self.word_starts().to(src.device)[src]
        word = starts.long().cumsum(1)  # each token's word, counted from 1
        drawn = torch.rand(src.shape[0], src.shape[1] + 1, device=src.device) < p
        drop = drawn.gather(1, word) & src.ne(self.pad_id)
        emptied = (src.ne(self.pad_id) & ~drop).sum(1) == 0
        drop &= ~emptied[:, None]
        return src.masked_fill(drop, self.pad_id)

    def loss(self, model, batch: dict, criterion):
        p = self.settings.word_dropout
        if model.training and p > 0.0:
            batch = {**batch, "src": self.drop_words(batch["src"], p)}
        return super().loss(model, batch, criterion)

    def samples(self, model, n: int = 10, device=None) -> list[dict[str, str]]:
        """The first ``n`` test sentences: German source, English reference, and the model's
        translation (the test beam), for a person to judge."""
        pairs = self.references("test")[:n]
        outputs = self.translate(model, [de for de, _ in pairs], device=device)
        return [{"source": de, "reference": en, "output": out}
                for (de, en), out in zip(pairs, outputs)]

    # -- metrics ----------------------------------------------------------------------------------
    @property
    def default_beam(self) -> int:
        return self.settings.beam_size

    @torch.no_grad()
    def evaluate(self, model, split: str, batch_size: int = 64, limit: int | None = None,
                 device=None) -> dict[str, float]:
        import sacrebleu

        metrics = self.token_accuracy(model, self.batches(split, batch_size, device, limit))
        pairs = self.references(split)[:limit]
        # validation uses greedy decoding (fast); the test split the configured beam
        hyps = self.translate(model, [de for de, _ in pairs], device=device,
                              beam_size=1 if split == "valid" else None)
        refs = [en for _, en in pairs]
        metrics["bleu"] = sacrebleu.corpus_bleu(hyps, [refs]).score
        metrics["chrf"] = sacrebleu.corpus_chrf(hyps, [refs]).score
        return metrics
