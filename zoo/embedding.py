"""Sentence embeddings: texts -> one vector each, by an encoder's hidden states pooled
(Reimers and Gurevych 2019, "Sentence-BERT"), as sentence-transformers computes them.

:func:`embed` reads the model's own tokenizer and the pooling ``zoo.build`` read once
from an imported folder's sentence-transformers files: ``modules.json`` (is there a
``Normalize`` module), ``1_Pooling/config.json`` (mean of the real tokens, the first
token, their maximum, or their mean times sqrt(length)) and
``sentence_bert_config.json`` (the longest text, in tokens, before truncation). A model
without them pools by the mean and normalises to length 1, sentence-transformers' most
common setting. Texts are encoded in batches of similar length (sorted, as
sentence-transformers does), so that little is padding; the vectors come back in the
order of the texts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import torch

from ._text import with_article
from .decoding.text import as_texts, count_of, own_tokenizer
from .derived import fixed_weights
from .errors import FormatError, RecipeError
from .files import read_json
from .hardware import SHORT_CALL, threads_for_a_call
from .kinds import Kind, kind_of
from .record import record_of
from .quantization import is_quantized

MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
         "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len"}
"""sentence-transformers' pooling switches (before its version 6), and zoo's names."""
NAMED_MODES = {"mean": "mean", "cls": "cls", "max": "max",
               "mean_sqrt_len_tokens": "mean_sqrt_len"}
"""sentence-transformers 6's ``pooling_mode`` values, and zoo's names for them."""


@dataclass(frozen=True)
class Pooling:
    """How hidden states become one vector: ``mode`` over the real tokens, then (with
    ``normalize``) divided by its length; texts cut at ``max_tokens``."""

    mode: Literal["mean", "cls", "max", "mean_sqrt_len"] = "mean"
    normalize: bool = True
    max_tokens: int | None = None


def pooling_of(model) -> Pooling:
    """The model's pooling: ``model.pooling`` (``zoo.build`` reads an imported folder's
    sentence-transformers files once, :func:`read_pooling`), else the mean, normalised,
    cut at the model's longest input."""
    record = record_of(model)
    if record.pooling is not None:
        return record.pooling
    return Pooling(max_tokens=getattr(record.settings, "max_len", None))


def read_pooling(folder: Path, source: str, longest: int | None) -> Pooling:
    """The pooling a sentence-transformers ``folder`` says (its ``modules.json``, pooling
    config and ``sentence_bert_config.json``, through zoo's one bounded JSON reader); a
    folder without ``modules.json`` pools by the mean, normalised, cut at ``longest``."""
    if not os.path.lexists(folder / "modules.json"):
        return Pooling(max_tokens=longest)
    modules = read_json(folder / "modules.json", source, list)
    if not all(isinstance(m, dict) for m in modules):
        raise FormatError(f"{source}: modules.json is a list of modules (objects)")
    if not any(str(m.get("type", "")).endswith(".Transformer") for m in modules):
        raise FormatError(f"{source}: modules.json names no Transformer module; a "
                          "sentence-transformers folder lists its Transformer, then its "
                          "Pooling (and a Normalize)")
    types = [str(m.get("type", "")) for m in modules]
    mode = "mean"
    pooling = next((m for m in modules if str(m.get("type", "")).endswith(".Pooling")), None)
    if pooling is not None:
        config = read_json(_inside(folder, str(pooling.get("path", "")), source) /
                           "config.json", source)
        mode = _pooling_mode(config if isinstance(config, dict) else {},
                             f"{source}: {pooling.get('path')}/config.json")
    unknown = [t for t in types if not t.endswith((".Transformer", ".Pooling", ".Normalize"))]
    if unknown:
        raise FormatError(f"{source}: modules.json holds modules zoo does not run: {unknown} "
                          "(zoo embeds with a Transformer, a Pooling and a Normalize)")
    st_config = folder / "sentence_bert_config.json"
    if os.path.lexists(st_config):  # absent: no bound of its own; anything else is read
        data = read_json(st_config, source)
        limit = data.get("max_seq_length") if isinstance(data, dict) else None
        if isinstance(limit, int) and limit > 0:
            longest = min(limit, longest or limit)
    return Pooling(mode, any(t.endswith(".Normalize") for t in types), longest)


def _pooling_mode(config: dict, where: str) -> str:
    """The one pooling a Pooling module's config asks for: sentence-transformers 6's
    ``pooling_mode`` (a name, or a list of one), else the older ``pooling_mode_*``
    switches; several, or one zoo does not pool by, refused by name."""
    if "pooling_mode" in config:
        asked = config["pooling_mode"]
        asked = asked if isinstance(asked, list) else [asked]
        chosen = [NAMED_MODES.get(m) for m in asked]
        if len(chosen) == 1 and chosen[0] is not None:
            return chosen[0]
        raise FormatError(f"{where} asks for pooling {asked}; zoo pools by one of "
                          f"{sorted(NAMED_MODES)}")
    chosen = [MODES[k] for k in MODES if config.get(k)]
    others = [k for k, v in config.items()
              if k.startswith("pooling_mode_") and k not in MODES and v]
    if len(chosen) != 1 or others:
        raise FormatError(f"{where} asks for pooling {chosen + others or 'none'}; zoo pools "
                          f"by one of {sorted(MODES.values())}")
    return chosen[0]


def _inside(folder: Path, path: str, source: str) -> Path:
    """``folder / path``, refused when it leads out of ``folder`` (``../other``, a link to
    elsewhere): a module's files are the folder's own."""
    target = (folder / path).resolve()
    if not target.is_relative_to(folder.resolve()):
        raise FormatError(f"{source}: modules.json's module path {path!r} leads out of the "
                          "folder; a module's files are in a folder inside it (1_Pooling)")
    return target


def pool(hidden: torch.Tensor, keep: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """hidden states (B, L, d) and ``keep`` (B, L, True at real tokens) -> (B, d)."""
    if pooling.mode == "cls":
        out = hidden[:, 0]
    elif pooling.mode == "max":
        out = hidden.masked_fill(~keep[..., None], float("-inf")).amax(1)
    else:
        weights = keep[..., None].to(hidden.dtype)
        counts = weights.sum(1).clamp(min=1e-9)
        out = (hidden * weights).sum(1) / (counts if pooling.mode == "mean" else counts.sqrt())
    if pooling.normalize:
        out = torch.nn.functional.normalize(out, p=2, dim=-1)
    return out


def embed(model, texts: Sequence[str], *, tokenizer: Any = None, batch_size: int = 32,
          pooling: Pooling | None = None) -> torch.Tensor:
    """One vector (N, d) for each of ``texts``, by ``model``'s own tokenizer and pooling
    (:func:`pooling_of`) unless given; in batches of ``batch_size`` texts of similar
    length."""
    if kind_of(model) is not Kind.ENCODER:
        raise RecipeError(f"{with_article(type(model).__name__)} does not embed texts: "
                          "zoo.embed pools the hidden states of an encoder (architecture "
                          "encoder; a BERT or sentence-transformers folder)")
    texts = as_texts(texts)
    count_of(batch_size, "batch_size")
    tokenizer = own_tokenizer(model, tokenizer)
    if pooling is None:
        pooling = pooling_of(model)  # the one zoo.build read
    if not texts:
        return torch.empty(0, model.settings.d_model)
    device = next(model.parameters()).device

    def vectors(chosen: list[int]) -> torch.Tensor:
        batch = tokenizer([texts[i] for i in chosen], padding=True, truncation=True,
                          max_length=pooling.max_tokens, return_tensors="pt")
        ids, keep, types = on_device(batch, device)
        return pool(model.hidden_states(ids, ~keep, types), keep, pooling)

    return by_length(model, [len(t) for t in texts], batch_size, vectors)


def on_device(batch: Any, device: Any) -> tuple[torch.Tensor, torch.Tensor,
                                                 torch.Tensor | None]:
    """A tokenizer's batch as token ids, ``keep`` (True at real tokens) and token types
    (None where the tokenizer gives none), on ``device``."""
    types = batch.get("token_type_ids")
    return (batch["input_ids"].to(device), batch["attention_mask"].bool().to(device),
            None if types is None else types.to(device))


def by_length(model, sizes: Sequence[int], batch_size: int, run) -> torch.Tensor:
    """``run(chosen)`` (one output row for each index of ``chosen``) over batches of
    ``batch_size`` items of similar ``sizes``, longest first, as sentence-transformers
    batches (little is padding); the rows stacked back in the items' order. The model
    runs in eval mode (put back after), without gradients, with the threads the cores
    free at the call allow (:func:`zoo.hardware.threads_for_a_call`), one for an int8
    model whose items add up to a sentence or two (``sizes`` in characters:
    :data:`zoo.hardware.SHORT_CALL`).

    The model's weights are checked once for all the batches
    (:func:`zoo.derived.fixed_weights`), and the texts pass through the encoder's layers
    in zoo's native code, padding left out. Measured on a 2-core AVX2 EPYC with the real
    all-MiniLM-L6-v2 (``python benchmarks/encoder_pass.py``), one sentence in fp32: 11.1
    ms a call that checks its own weights, 15.0 ms in Python (an fp32 call stayed in
    Python until December 2026, when the native pass of a few texts saved about what
    the check cost); 7.5 ms inside a caller's block that fixes the weights once around
    all its calls (``with zoo.plugin_api.fixed_weights(model):``, as a server would)."""
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    out: list[torch.Tensor | None] = [None] * len(sizes)
    was_training = model.training
    if was_training:
        model.eval()
    try:
        short = is_quantized(model) and sum(sizes) <= SHORT_CALL
        with torch.no_grad(), fixed_weights(model), threads_for_a_call(short=short):
            for start in range(0, len(order), batch_size):
                chosen = order[start:start + batch_size]
                for i, row in zip(chosen, run(chosen)):
                    out[i] = row
    finally:
        if was_training:
            model.train()
    return torch.stack(out)  # type: ignore[arg-type]


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of each row of ``a`` (N, d) with each row of ``b`` (M, d): (N, M)."""
    a = torch.nn.functional.normalize(a.float(), dim=-1)
    b = torch.nn.functional.normalize(b.float(), dim=-1)
    return a @ b.T
