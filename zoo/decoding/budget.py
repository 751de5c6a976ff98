"""The memory a decoding call will hold, estimated before it starts and refused by name
when this process cannot hold it: the guard models are built under
(:func:`zoo.hardware.memory_available`), for the keys and values each row caches, the
tokens and scores kept for every step and one step's logits. A million beams or a
``max_length`` of a billion is one clear error, not the allocator's.

The estimate is meant as an upper bound: every layer's keys and values at full width
(grouped heads hold less) in the weights' dtype, with room for the copies that exist
for a moment (:data:`CACHE_COPIES`, :data:`LOGIT_COPIES`)."""

from __future__ import annotations

from .._text import format_bytes
from ..errors import MemoryBudgetError, RecipeError
from ..hardware import memory_available
from ..kinds import Kind, kind_of
from ..record import record_of
from .settings import GenerationSettings

LOGIT_COPIES = 8
"""Copies of one step's scores alive at once (logits, log-probabilities, filtered
scores, candidates, and their temporaries): measured peaks of beam search on
``transformer-tiny`` and ``llama-tiny`` with 2,000 to 20,000 beams stay under the
estimate with these factors."""
CACHE_COPIES = 2
"""A cache grown by concatenation holds its old and its new copy for a moment."""
MARGIN = 1.25
"""Room for the allocator and the smaller buffers: measured peaks (``transformer-tiny``,
``llama-tiny``; 200 beams x 200 tokens to 20,000 beams x 4) were 0.58 to 0.83 of the
estimate with it."""


def context_of(model) -> tuple[int, str] | None:
    """The positions ``model`` reads, prompt and new tokens together, and what says so:
    a learned table's rows (``model.max_positions``), else, for a language model, its
    settings' ``max_len`` (an imported folder's ``max_position_embeddings``), times the
    factor of a linear RoPE scaling, which stretches the positions it was trained on
    (transformers' other scalings give the stretched length as max_position_embeddings
    itself). None where the model says neither."""
    record = record_of(model)
    if isinstance(record.max_positions, int):
        return record.max_positions, "its learned positions, max_len"
    length = getattr(record.settings, "max_len", None)
    if kind_of(model) is not Kind.LANGUAGE_MODEL or not isinstance(length, int):
        return None
    positional = getattr(getattr(record.recipe, "components", {}).get("positional"),
                         "settings", None) or {}
    if positional.get("scaling") == "linear" and isinstance(positional.get("factor"),
                                                               (int, float)):
        return (int(length * positional["factor"]),
                f"its context: max_len {length} (max_position_embeddings) times its RoPE "
                f"scaling's factor {positional['factor']:g}")
    return length, "its context: max_len, a folder's max_position_embeddings"


def check_positions(model, start: int, length: int, *, source: int | None = None) -> None:
    """Refuse, before decoding starts, sequences of ``length`` tokens (``start`` of them
    given: the prompt, or the start token) and sources of ``source`` tokens past the
    positions ``model`` reads (:func:`context_of`): past a learned table the table has no
    row, which the first step past it would find; past a rotary model's context its
    positions are ones it never saw."""
    context = context_of(model)
    if context is None:
        return
    limit, why = context
    if source is not None and source > limit:
        raise RecipeError(f"the sources hold {source} tokens, past the {limit} positions this "
                          f"model reads ({why}): shorten them (a tokenizer's "
                          f"truncation=True, max_length={limit})")
    if start > limit:
        raise RecipeError(f"the prompt holds {start} tokens, past the {limit} positions this "
                          f"model reads ({why}): keep its last {limit} tokens at most")
    fed = length - 1  # the last new token is chosen, never read
    if fed > limit and source is None:
        raise RecipeError(f"the prompt's {start} tokens and max_new_tokens={length - start} "
                          f"need {fed} positions (the last new token is never read), past "
                          f"the {limit} this model reads ({why}): ask for "
                          f"max_new_tokens={limit + 1 - start} at most (zoo generate "
                          "--max-new-tokens), or give a shorter prompt")
    if fed > limit:
        raise RecipeError(f"max_new_tokens={length - 1} (max_length={length}, the start token "
                          f"counted) needs {fed} positions, past the {limit} this model's "
                          f"decoder reads ({why}): ask for max_new_tokens={limit} at most")


def decoding_bytes(model, sources: int, source_len: int, beams: int, length: int) -> int | None:
    """About how many bytes decoding ``sources`` rows (``source_len`` tokens each) into
    sequences of ``length`` tokens with ``beams`` beams holds; None for a model whose
    sizes zoo cannot read (an architecture of a plugin's own)."""
    s = record_of(model).settings
    d, vocab = getattr(s, "d_model", None), getattr(s, "vocab_size", None)
    layers = getattr(s, "decoder_layers", None) or getattr(s, "layers", None)
    if not all(isinstance(v, int) for v in (d, vocab, layers)):
        return None
    weight = next(model.parameters(), None)
    item = weight.element_size() if weight is not None else 4
    rows = sources * beams
    cache = CACHE_COPIES * rows * length * layers * 2 * d * item
    if kind_of(model) is Kind.SEQ2SEQ:  # cross-attention: once per source
        cache += sources * source_len * layers * 2 * d * item
    kept = rows * length * (8 + 4)  # each row's tokens and scores, step by step
    return int(MARGIN * (cache + kept + rows * vocab * 4 * LOGIT_COPIES))


def check_decoding_memory(model, sources: int, source_len: int, settings: GenerationSettings,
                          length: int, device) -> None:
    """Refuse a decoding whose estimate (:func:`decoding_bytes`) is more than this process
    may still allocate on ``device``."""
    need = decoding_bytes(model, sources, source_len, settings.num_beams, length)
    if need is None:
        return
    have = memory_available(device)
    if need > have:
        raise MemoryBudgetError(
            f"decoding {sources} source(s) with num_beams={settings.num_beams} into sequences "
            f"of up to {length:,} tokens needs about {format_bytes(need)} (the cached keys "
            f"and values, the tokens and scores of every step), more than the "
            f"{format_bytes(have)} free for this process on {device}. Nothing was allocated. "
            "Ask for fewer beams (num_beams, --beam), fewer new tokens (max_new_tokens, "
            "max_length, --max-new-tokens) or fewer sources at once.")
