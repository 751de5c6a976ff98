"""Text in, text out, through the one engine: the one entrance of each job that reads
and writes text. :func:`translate` turns sources into their translations (a
sequence-to-sequence model); :func:`complete` gives the new text after prompts all at
once and :func:`stream_text` as it comes (a language model, for a terminal or a
server), ending at the model's end token or at a stop string.

Each reads the model's own tokenizer (``model.tokenizer``: an imported folder's, read at
first use and kept; a trained run's task's), or one given, of transformers' kind
(``tokenizer(texts, padding=True)``, ``tokenizer.batch_decode(ids)``). Prompts are padded
on the left, as generation needs; sources as the tokenizer pads them. Text streams in
pieces that never split a character: a piece whose bytes end inside one (a byte-level
BPE token holding half a UTF-8 sequence) waits for the next token. A stop string ends
the text right after it, as transformers' ``stop_strings`` do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from .._text import short_repr, with_article
from ..errors import FormatError, RecipeError
from ..kinds import Kind, kind_of, said
from ..record import record_of
from . import generate, id_outside, input_vocabulary, settings_for, stream

PARTIAL = "\ufffd"
"""What a tokenizer decodes an unfinished UTF-8 sequence as."""


def own_tokenizer(model, tokenizer: Any = None) -> Any:
    """``tokenizer``, else the one the model carries (``model.tokenizer``); one RecipeError
    for a model that carries none."""
    if tokenizer is None:
        tokenizer = record_of(model).tokenizer
    if tokenizer is None:
        raise RecipeError(f"this {type(model).__name__} carries no tokenizer (model.tokenizer "
                          "is None): it was built from a recipe, or saved without its run's "
                          "files (zoo save runs/NAME OUT keeps them). Give tokenizer=, or "
                          "decode token ids with zoo.generate")
    return tokenizer


def model_tokenizer(model, tokenizer: Any = None) -> Any:
    """:func:`own_tokenizer`, ready for prompts: padded on the left, its pad token the end
    token where it has none (GPT-2, Llama)."""
    tokenizer = own_tokenizer(model, tokenizer)
    if getattr(tokenizer, "padding_side", "left") != "left":
        tokenizer.padding_side = "left"
    if getattr(tokenizer, "pad_token", "") is None and getattr(tokenizer, "eos_token", None):
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_ids(ids: torch.Tensor, model, tokenizer: Any) -> None:
    """Token ids ``tokenizer`` gave, refused (one FormatError naming it) when one is
    outside ``model``'s input vocabulary: the tokenizer does not belong to the model."""
    size = input_vocabulary(model)
    bad = id_outside(ids, size)
    if bad is not None:
        name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        raise FormatError(f"the tokenizer ({name}) gives the id {bad}, outside the model's "
                          f"vocabulary of {size}; the tokenizer's files do not belong to "
                          "this model")


def as_texts(texts: Any, what: str = "texts") -> list[str]:
    """``texts`` (a list, a tuple, a generator: any iterable of ``str``) as a list; one
    RecipeError naming what is not a text. A bare ``str`` is refused (give ``[text]``):
    it would be read as its characters."""
    if isinstance(texts, (str, bytes)):
        raise RecipeError(f"{what} are a list of texts, not one {type(texts).__name__}: "
                          f"give [text] for one")
    if isinstance(texts, Mapping):  # its keys would be taken for the texts
        raise RecipeError(f"{what} are a list of texts, not "
                          f"{with_article(type(texts).__name__)}")
    try:
        items = list(texts)
    except TypeError:
        raise RecipeError(f"{what} are a list of texts, not "
                          f"{with_article(type(texts).__name__)}") from None
    for item in items:
        if not isinstance(item, str):
            raise RecipeError(f"{what} are texts (str); one is {short_repr(item, 60)} (of type "
                              f"{type(item).__name__})")
        check_characters(item, what)
    return items


def check_characters(text: str, what: str = "a text") -> None:
    """One RecipeError for a text holding a lone surrogate (half of a UTF-16 pair, such as
    ``"\\ud800"``, which JSON and Python strings allow): it is no character, and a
    tokenizer fails on it in its own words."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RecipeError(f"{what}: {short_repr(text, 60)} holds a lone surrogate "
                          f"({text[exc.start]!r} at {exc.start}), half of a UTF-16 pair and "
                          "no character; give the whole pair, or leave it out") from None


def count_of(value: Any, name: str) -> int:
    """``value`` as a count of at least 1, or one RecipeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecipeError(f"{name} is a whole number of at least 1, not {short_repr(value, 60)}")
    return value


def stop_strings(stop: Any) -> tuple[str, ...]:
    """``stop`` (one text or a list of texts) as the stop strings; an empty one, or one
    that is not text, is refused by name."""
    stops = tuple(as_texts([stop] if isinstance(stop, str) else stop, "stop strings"))
    if "" in stops:
        raise RecipeError("a stop string is empty: it would end every text before its first "
                          "character")
    return stops


@torch.no_grad()
def translate(model, texts: Sequence[str], *, tokenizer: Any = None, batch_size: int = 64,
              **changes: Any) -> list[str]:
    """Each of ``texts`` decoded by a sequence-to-sequence ``model`` (its own tokenizer and
    generation settings, with ``changes``: ``num_beams=1``, ``max_new_tokens=64``, ...),
    ``batch_size`` sources at a time; the new tokens as text, special tokens left out."""
    texts = as_texts(texts)
    if kind_of(model) is not Kind.SEQ2SEQ:
        raise RecipeError(f"{with_article(type(model).__name__)} does not translate: "
                          "zoo.translate decodes sequence-to-sequence models, and this one is "
                          f"{said(kind_of(model))} (zoo.complete continues a language "
                          "model's prompts)")
    count_of(batch_size, "batch_size")
    tokenizer = own_tokenizer(model, tokenizer)
    settings = settings_for(model, None, **changes)  # a wrong setting: one error, first
    device = next(model.parameters()).device
    out: list[str] = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], return_tensors="pt",
                          padding=True)["input_ids"]
        check_ids(batch, model, tokenizer)
        ids = generate(model.eval(), batch.to(device), settings)
        out += tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True)
    return out


def encode_prompts(tokenizer, prompts: Sequence[str], device=None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as (B, L) token ids padded on the left, and their padding mask (True at
    padding)."""
    prompts = as_texts(prompts, "prompts")
    if not prompts:
        raise RecipeError("prompts are a list of one or more texts")
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    ids, mask = batch["input_ids"], batch["attention_mask"] == 0
    if ids.shape[1] == 0:
        raise RecipeError("the prompts hold no tokens: give each prompt some text")
    return ids.to(device), mask.to(device)


def _stopped(text: str, stops: Sequence[str], start: int = 0) -> int | None:
    """Where ``text`` ends if a stop string occurs in it from ``start`` on: right after
    the first one to end (None: none occurs)."""
    ends = [i + len(s) for s in stops if (i := text.find(s, start)) >= 0]
    return min(ends) if ends else None


class TextPieces:
    """One prompt's new tokens turned into text as they come: :meth:`add` gives what may
    be shown now (never half a character), :meth:`rest` what was held back; ``text`` is
    the text so far, ``done`` True once the end token or a stop string came."""

    def __init__(self, tokenizer, stops: Sequence[str], eos: set[int]) -> None:
        self.tokenizer, self.stops, self.eos = tokenizer, stops, eos
        self.ids: list[int] = []
        self.text, self.shown, self.done = "", 0, False

    def add(self, token: int) -> str:
        """Take the next token; return the new text that may be shown now."""
        if self.done:
            return ""
        if token in self.eos:
            self.done = True
            return self.rest()
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        longest = max((len(s) for s in self.stops), default=0)
        end = _stopped(text, self.stops, max(0, len(self.text) - longest))
        if end is not None:
            self.done = True
            text = text[:end]
        self.text = text
        return self._show(text if self.done else text.rstrip(PARTIAL))

    def rest(self) -> str:
        """The text not shown yet (held back at the end of a stream)."""
        return self._show(self.text)

    def _show(self, text: str) -> str:
        piece = text[self.shown:]
        self.shown = max(self.shown, len(text))
        return piece


def prepare_prompts(model, tokenizer: Any, prompts: Sequence[str], stop: Any,
                    changes: dict[str, Any]):
    """What decoding ``prompts`` needs, each checked: their ids (B, L) padded on the
    left and padding mask, the settings (the model's with ``changes``) and one
    :class:`TextPieces` a prompt, ending at a ``stop`` string. The text entrances (and
    ``zoo serve``) start here."""
    tokenizer = model_tokenizer(model, tokenizer)
    ids, mask = encode_prompts(tokenizer, prompts, next(model.parameters()).device)
    settings = settings_for(model, None, **changes)
    return ids, mask, settings, text_rows(model, tokenizer, ids, settings, stop)


def text_rows(model, tokenizer, ids: torch.Tensor, settings, stop: Any) -> list[TextPieces]:
    """One :class:`TextPieces` for each row of prompt ``ids`` (checked against the model's
    vocabulary), ending at ``settings``' end tokens or a ``stop`` string."""
    stops = stop_strings(stop)
    check_ids(ids, model, tokenizer)
    return [TextPieces(tokenizer, stops, set(settings.eos_ids)) for _ in range(ids.shape[0])]


def stream_rows(model, ids: torch.Tensor, mask: torch.Tensor | None, settings,
                rows: list[TextPieces]) -> Iterator[list[str]]:
    """The new text of each row as it comes, one list of pieces a step ("" where a row
    has none new), the pieces held back at the length limit last; ends once every row
    is done."""
    for tokens in stream(model.eval(), ids, settings, padding_mask=mask):
        yield [row.add(int(t)) for row, t in zip(rows, tokens.tolist())]
        if all(row.done for row in rows):
            return
    tails = [row.rest() for row in rows]  # the length limit: what was held back
    if any(tails):
        yield tails


def complete_rows(model, ids: torch.Tensor, mask: torch.Tensor | None, settings,
                  rows: list[TextPieces]) -> list[str]:
    """Each row's whole new text: step by step (so that stop strings end it early), or at
    once for beam search."""
    if settings.num_beams == 1:
        for _ in stream_rows(model, ids, mask, settings, rows):
            pass
    else:
        out = generate(model.eval(), ids, settings, padding_mask=mask)
        for row, tokens in zip(rows, out.tolist()):
            for t in tokens:
                row.add(t)
    return [row.text for row in rows]


@torch.no_grad()
def stream_text(model, prompts: str | Sequence[str], *, tokenizer: Any = None,
                stop: Sequence[str] = (), **changes: Any) -> Iterator[str] | Iterator[list[str]]:
    """The new text after ``prompts`` as it comes: for one prompt (a ``str``) its pieces
    (``str``), for a list one list of pieces per step, a piece per prompt ("" where none
    is new). Ends when every prompt has met its end token or a ``stop`` string, or at
    the length limit. ``changes`` are generation settings (``max_new_tokens=64,
    do_sample=True, temperature=0.8, seed=0``); beam search chooses only at its end,
    so it does not stream."""
    single = isinstance(prompts, str)
    ids, mask, settings, rows = prepare_prompts(model, tokenizer, [prompts] if single else prompts,
                                      stop, changes)
    for pieces in stream_rows(model, ids, mask, settings, rows):
        if not single:
            yield pieces
        elif pieces[0]:
            yield pieces[0]


@torch.no_grad()
def complete(model, prompts: str | Sequence[str], *, tokenizer: Any = None,
             stop: Sequence[str] = (), **changes: Any) -> str | list[str]:
    """The new text after each prompt, decoded by the model's settings with ``changes``
    (greedy, sampled or beam search), each cut right after a ``stop`` string: for one
    prompt (a ``str``) its text, for a list one text per prompt."""
    single = isinstance(prompts, str)
    ids, mask, settings, rows = prepare_prompts(model, tokenizer, [prompts] if single else prompts,
                                      stop, changes)
    texts = complete_rows(model, ids, mask, settings, rows)
    return texts[0] if single else texts
