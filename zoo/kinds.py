"""What kind of model an architecture builds, declared rather than guessed.

An architecture declares its ``kind`` among its capabilities; each kind is a protocol
listing what zoo's engine, CLI and exports call on such a model. The resolver checks the
class against its kind's protocol before anything is built, the builder stamps the kind on
every model (``model.kind``), and the core dispatches on :func:`kind_of`, never on the
presence of an attribute.

- ``seq2seq`` (:class:`Seq2SeqModel`): ``encode``, ``decode``, ``padding_mask``; decoded from
  a start token (``zoo.generate``, ``zoo translate``).
- ``language-model`` (:class:`LanguageModel`): ``forward(tokens, padding_mask=None,
  cache=None)`` over the tokens so far, ``padding_mask``, ``init_cache``; decoded from a
  prompt (``zoo.generate``, ``zoo generate``).
- ``encoder`` (:class:`Encoder`): ``hidden_states``, ``padding_mask``; pooled into
  vectors (``zoo.embed``).
- ``image-classifier`` (:class:`ImageClassifier`): ``forward(images)`` to class logits.
- ``image-text`` (:class:`ImageText`): ``image_features``, ``text_features``, ``padding_mask``;
  images and texts in one space (CLIP), compared by :func:`zoo.classify_image`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from ._text import with_article


class Kind(str, Enum):
    """A kind of model, typed: what zoo dispatches on (``kind_of(model) is
    Kind.SEQ2SEQ``). A ``str`` too, so an architecture declares it by its value
    (``capabilities={"kind": "seq2seq"}``) and ``model.kind == "seq2seq"`` still
    holds."""

    SEQ2SEQ = "seq2seq"
    LANGUAGE_MODEL = "language-model"
    ENCODER = "encoder"
    IMAGE_CLASSIFIER = "image-classifier"
    IMAGE_TEXT = "image-text"

    def __str__(self) -> str:
        return self.value

    @property
    def generates(self) -> bool:
        """Whether a model of this kind generates text (``zoo.generate``)."""
        return self in (Kind.SEQ2SEQ, Kind.LANGUAGE_MODEL)


def said(kind: Kind | None) -> str:
    """``kind`` in a sentence: "a seq2seq model", "an encoder model", or "a model of
    no kind zoo decodes" (a module ``zoo.build`` did not make)."""
    if kind is None:
        return ("a model of no kind zoo decodes (model.kind: zoo.build sets it from the "
                "architecture)")
    return with_article(f"{kind.value} model")


@runtime_checkable
class Seq2SeqModel(Protocol):
    """An encoder-decoder: what decoding and export call."""

    def encode(self, src: Any, src_padding_mask: Any = None) -> Any:
        """(B, Ls) source ids -> (B, Ls, d) memory."""

    def decode(self, tgt: Any, memory: Any, *args: Any, **kwargs: Any) -> Any:
        """(B, Lt) target ids and the memory -> (B, Lt, V) logits (a cache at decoding)."""

    def padding_mask(self, tokens: Any) -> Any:
        """(B, L) ids -> True at padding, or None."""


@runtime_checkable
class LanguageModel(Protocol):
    """A decoder-only (causal) language model: what decoding and export call."""

    def forward(self, tokens: Any, padding_mask: Any = None, cache: Any = None) -> Any:
        """(B, L) ids (the new ones, with a cache) -> (B, L, V) next-token logits."""

    def padding_mask(self, tokens: Any) -> Any:
        """(B, L) ids -> True at padding, or None."""

    def init_cache(self) -> Any:
        """An empty cache of keys and values for incremental decoding."""


@runtime_checkable
class Encoder(Protocol):
    """An encoder of whole texts: what embedding, export and the CLI call."""

    def hidden_states(self, tokens: Any, padding_mask: Any = None, *args: Any,
                      **kwargs: Any) -> Any:
        """(B, L) ids -> (B, L, d) hidden states."""

    def padding_mask(self, tokens: Any) -> Any:
        """(B, L) ids -> True at padding, or None."""


@runtime_checkable
class ImageClassifier(Protocol):
    """A classifier of images: what export and the bench call."""

    def forward(self, images: Any) -> Any:
        """(B, C, H, W) images -> (B, classes) logits."""


@runtime_checkable
class ImageText(Protocol):
    """Images and texts embedded in one space (CLIP): what zero-shot classification calls."""

    def image_features(self, images: Any) -> Any:
        """(B, C, H, W) images -> (B, d) vectors."""

    def text_features(self, tokens: Any, padding_mask: Any = None) -> Any:
        """(B, L) ids -> (B, d) vectors in the images' space."""

    def padding_mask(self, tokens: Any) -> Any:
        """(B, L) ids -> True at padding, or None."""


PROTOCOLS: dict[Kind, type] = {Kind.SEQ2SEQ: Seq2SeqModel, Kind.LANGUAGE_MODEL: LanguageModel,
                               Kind.ENCODER: Encoder, Kind.IMAGE_CLASSIFIER: ImageClassifier,
                               Kind.IMAGE_TEXT: ImageText}
"""Each kind's protocol."""


def as_kind(value: Any) -> Kind | None:
    """``value`` (a :class:`Kind` or its string) as a Kind, or None where it is none."""
    try:
        return Kind(value)
    except ValueError:
        return None


def missing_methods(cls: type, kind: Kind) -> list[str]:
    """The methods of ``kind``'s protocol that ``cls`` does not define."""
    wanted = [name for name, value in vars(PROTOCOLS[kind]).items()
              if callable(value) and not name.startswith("_") or name == "forward"]
    return [name for name in wanted if not callable(getattr(cls, name, None))]


def inferred_kind(cls: type, inputs: str, outputs: str, name: str) -> Kind | None:
    """The kind of an architecture that declares none (one registered before kinds were
    declared), from what it reads and gives and what its class defines, with a
    DeprecationWarning asking its plugin to declare it; None where no kind fits (a
    classifier of texts, say: zoo builds and trains it, and decodes, embeds and exports
    nothing of it)."""
    if inputs == "images" and outputs == "classes":
        kind = Kind.IMAGE_CLASSIFIER
    elif inputs == "tokens" and outputs == "vectors":
        kind = Kind.ENCODER
    elif inputs == outputs == "tokens":
        kind = next((k for k in (Kind.SEQ2SEQ, Kind.LANGUAGE_MODEL)
                     if not missing_methods(cls, k)), None)
    else:
        kind = None
    if kind is None:
        return None
    warnings.warn(f"architecture {name!r} declares no kind; zoo takes it for {kind.value!r}. "
                  f"Declare it among its capabilities: capabilities={{..., 'kind': "
                  f"{kind.value!r}}} (docs/contract/architecture.md)", DeprecationWarning,
                  stacklevel=3)
    return kind


@dataclass(frozen=True)
class Refusal:
    """Why zoo's native decoding step does not run a model's layers: what the one gate,
    ``model.native_plan()``, returns in place of a plan (``zoo native status`` prints
    it). False as a truth value, so ``if plan:`` reads as "a plan"."""

    reason: str

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


@runtime_checkable
class StaticDecoding(Protocol):
    """A seq2seq or language model whose steps after the first can run in fixed buffers,
    in zoo's native step where its layers allow: ``native_plan()`` is the one gate (the
    sealed plan of its layers, or a :class:`Refusal` saying why not; nothing is
    decoded), and ``static_decoder(...)`` gives the steps of one decoding call from it,
    or None (the seq2seq's ``(memory, mask, groups=, length=)``, a language model's
    ``(cache, length=)``). A language model's steps that also offer ``cache()`` (the
    keys, values and padding so far as a ``LanguageModelCache``) run continuous
    batching's steps too (:class:`zoo.decoding.batch.RunningBatch`), which gives them
    back whenever its rows change."""

    def native_plan(self) -> Any:
        """The kept plan of the model's layers (a mapping the architecture reads: true as
        a truth value, its contents its own), or a :class:`Refusal` saying why not."""

    def static_decoder(self, *args: Any, **kwargs: Any) -> Any:
        """One decoding call's steps in fixed buffers, or None (the general path)."""


@runtime_checkable
class PromptReading(Protocol):
    """A language model that reads prompts into its cache and gives only the last
    position's logits: decoding needs no other, and the output layer over every prompt
    position is a large share of a prompt's reading (a vocabulary of 30,000 over a width
    of 512 is 40% of a small Llama's products). Decoding calls it where a model offers
    it, else ``forward`` and keeps the last position."""

    def read_prompt(self, tokens: Any, padding_mask: Any = None, cache: Any = None) -> Any:
        """(B, L) prompt ids -> (B, V) logits of the token after each row's last; the
        cache (if given) holds the prompts' keys and values after."""


def kind_of(model: Any) -> Kind | None:
    """The kind ``model`` was built as (its record's ``kind``, stamped by ``zoo.build``:
    :func:`zoo.record.record_of`), or None for a module zoo did not build, or whose
    architecture is of none of the kinds."""
    return as_kind(getattr(model, "kind", None))
