"""Reranking: a query and documents -> one relevance score each, by a cross-encoder
(Nogueira and Cho 2019, "Passage Re-ranking with BERT"): the query and each document read
together as one pair of segments by an encoder with a classification head, as
sentence-transformers' ``CrossEncoder.predict`` scores them (ms-marco-MiniLM-L6-v2,
bge-reranker, ...).

The score is the head's logits through the folder's activation: ``config.json``'s
``sentence_transformers.activation_fn`` (or the older
``sbert_ce_default_activation_function``), else a sigmoid for a head of one label and the
logits themselves for more, sentence-transformers' defaults. ``zoo.build`` reads it once
(:func:`read_activation`) into ``model.score_activation``. Pairs are encoded in batches of
similar length, cut to the model's positions from the longer segment first; the scores
come back in the order of the documents.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import torch

from ._text import with_article
from .decoding.text import as_texts, check_characters, count_of, own_tokenizer
from .embedding import by_length, on_device
from .errors import FormatError, RecipeError
from .kinds import Kind, kind_of
from .record import record_of

Activation = Literal["sigmoid", "identity", "tanh"]
ACTIVATIONS: dict[str, Activation] = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity", "torch.nn.Identity": "identity",
    "torch.nn.modules.activation.Tanh": "tanh", "torch.nn.Tanh": "tanh",
}
"""The activations a sentence-transformers cross-encoder folder names, and zoo's names."""
CONFIG_KEYS = frozenset({"sentence_transformers", "sbert_ce_default_activation_function"})
"""``config.json`` keys a cross-encoder folder keeps for sentence-transformers: read here,
by :func:`read_activation`, for every encoder family."""


def default_activation(labels: int) -> Activation:
    """sentence-transformers' activation for a head of ``labels`` outputs."""
    return "sigmoid" if labels == 1 else "identity"


def read_activation(config: dict[str, Any], labels: int, source: str) -> Activation:
    """The activation a folder's ``config`` names for its scores (:data:`ACTIVATIONS`),
    else :func:`default_activation`; one it does not name by a torch class zoo has is
    refused by name."""
    settings = config.get("sentence_transformers")
    path = settings.get("activation_fn") if isinstance(settings, dict) else None
    if settings is not None and not isinstance(settings, dict):
        raise FormatError(f"{source}: config.json's sentence_transformers is "
                          f"{type(settings).__name__}, not an object")
    path = path or config.get("sbert_ce_default_activation_function")
    if path is None:
        return default_activation(labels)
    if path not in ACTIVATIONS:
        raise FormatError(f"{source}: config.json names the score activation {path!r}; zoo "
                          f"scores through {sorted(set(ACTIVATIONS))}. Nothing was loaded.")
    return ACTIVATIONS[path]


def activation_of(model) -> Activation:
    """The activation ``model``'s scores go through: ``model.score_activation`` (read from
    an imported folder), else sentence-transformers' default for its labels."""
    record = record_of(model)
    return record.score_activation or default_activation(record.settings.num_labels)


def _activate(logits: torch.Tensor, activation: Activation) -> torch.Tensor:
    if activation == "sigmoid":
        return torch.sigmoid(logits)
    return torch.tanh(logits) if activation == "tanh" else logits


def rerank(model, query: str, documents: Sequence[str], *, tokenizer: Any = None,
           batch_size: int = 32, activation: Activation | None = None) -> torch.Tensor:
    """The relevance of each of ``documents`` to ``query``: (N,) for a head of one label
    (N, labels) for more, in the order of ``documents``; ``activation`` (else
    :func:`activation_of`) over the head's logits. ``model`` is an encoder with a
    classification head (a cross-encoder folder: ``BertForSequenceClassification``,
    ``XLMRobertaForSequenceClassification``, ...)."""
    record = record_of(model)
    if record.kind is not Kind.ENCODER or getattr(record.settings, "head", None) != "classification":
        raise RecipeError(f"{with_article(type(model).__name__)} does not rerank: zoo.rerank "
                          "reads a cross-encoder, an encoder with a classification head (a "
                          "...ForSequenceClassification folder such as ms-marco-MiniLM-L6-v2)")
    if not isinstance(query, str):
        raise RecipeError(f"query is one text (str), not {type(query).__name__}")
    check_characters(query, "the query")
    documents = as_texts(documents)
    count_of(batch_size, "batch_size")
    if activation is not None and activation not in ("sigmoid", "identity", "tanh"):
        raise RecipeError(f"activation {activation!r} is not one zoo scores through: "
                          "'sigmoid', 'identity' or 'tanh'")
    activation = activation or activation_of(model)
    labels = model.settings.num_labels
    tokenizer = own_tokenizer(model, tokenizer)
    if not documents:
        return torch.empty(0) if labels == 1 else torch.empty(0, labels)
    device = next(model.parameters()).device

    def scores(chosen: list[int]) -> torch.Tensor:
        batch = tokenizer([query] * len(chosen), [documents[i] for i in chosen],
                          padding=True, truncation="longest_first",
                          max_length=model.settings.max_len, return_tensors="pt")
        ids, keep, types = on_device(batch, device)
        logits = _activate(model(ids, padding_mask=~keep, token_types=types).float(),
                           activation)
        return logits[:, 0] if labels == 1 else logits

    return by_length(model, [len(query) + len(d) for d in documents], batch_size, scores)
