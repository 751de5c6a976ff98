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
from typing import Any, Literal, Protocol, runtime_checkable

Kind = Literal["seq2seq", "language-model", "encoder", "image-classifier", "image-text"]


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


PROTOCOLS: dict[str, type] = {"seq2seq": Seq2SeqModel, "language-model": LanguageModel,
                              "encoder": Encoder, "image-classifier": ImageClassifier,
                              "image-text": ImageText}
"""Each kind's protocol."""


def missing_methods(cls: type, kind: str) -> list[str]:
    """The methods of ``kind``'s protocol that ``cls`` does not define."""
    wanted = [name for name, value in vars(PROTOCOLS[kind]).items()
              if callable(value) and not name.startswith("_") or name == "forward"]
    return [name for name in wanted if not callable(getattr(cls, name, None))]


def inferred_kind(cls: type, inputs: str, outputs: str, name: str) -> str | None:
    """The kind of an architecture that declares none (one registered before kinds were
    declared), from what it reads and gives and what its class defines, with a
    DeprecationWarning asking its plugin to declare it; None where no kind fits (a
    classifier of texts, say: zoo builds and trains it, and decodes, embeds and exports
    nothing of it)."""
    if inputs == "images" and outputs == "classes":
        kind = "image-classifier"
    elif inputs == "tokens" and outputs == "vectors":
        kind = "encoder"
    elif inputs == outputs == "tokens":
        kind = next((k for k in ("seq2seq", "language-model")
                     if not missing_methods(cls, k)), None)
    else:
        kind = None
    if kind is None:
        return None
    warnings.warn(f"architecture {name!r} declares no kind; zoo takes it for {kind!r}. "
                  f"Declare it among its capabilities: capabilities={{..., 'kind': "
                  f"{kind!r}}} (docs/contract/architecture.md)", DeprecationWarning,
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
    ``(cache, length=)``)."""

    def native_plan(self) -> Any:
        """The kept plan of the model's layers, or a :class:`Refusal` saying why not."""

    def static_decoder(self, *args: Any, **kwargs: Any) -> Any:
        """One decoding call's steps in fixed buffers, or None (the general path)."""


def kind_of(model: Any) -> str | None:
    """The kind ``model`` was built as (``model.kind``, stamped by ``zoo.build``), or None
    for a module zoo did not build, or whose architecture is of none of the kinds."""
    kind = getattr(model, "kind", None)
    return kind if kind in PROTOCOLS else None
