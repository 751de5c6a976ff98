"""zoo's one decoding engine, and its one entrance: :func:`generate`.

Every model built by zoo carries how it decodes as ``model.generation`` (a
:class:`GenerationSettings`): an imported model its own files' settings, a trained run
its task's, a recipe's model its architecture's defaults. ``generate(model, src)``
decodes by them; any setting can be changed for one call by name::

    zoo.generate(model, src)                                   # the model's own way
    zoo.generate(model, src, num_beams=1, max_new_tokens=64)   # greedy, 64 tokens at most
    zoo.generate(model, src, do_sample=True, temperature=0.7, top_p=0.9, seed=0)

``model.generate``, ``translate`` (a task's, an imported model's), ``zoo translate``,
the exports and ``zoo bench decode`` all go through it. :func:`stream` gives the same
tokens one step at a time. Greedy and sampled decoding, and beam search with
transformers' or GNMT's length penalty, are settings of the same engine
(:mod:`zoo.decoding.search`); the rules on each step's scores follow transformers'
logits processors (:mod:`zoo.decoding.rules`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from .._text import with_article
from ..deprecations import warn_deprecated
from ..derived import fixed_weights
from ..errors import RecipeError
from ..hardware import threads_for_a_call
from ..kinds import Kind, kind_of, said
from ..record import record_of
from .budget import check_decoding_memory, check_positions
from .rules import Rules, check_vocabulary, filter_logits
from .search import beam_search as search_beams
from .search import length_penalty, one_per_row
from .settings import OLD_NAMES, GenerationSettings, parse_settings, settings_with
from .steps import PromptSteps, Seq2SeqSteps

__all__ = ["generate", "stream", "GenerationSettings", "settings_for", "filter_logits",
           "length_penalty", "greedy", "beam_search", "sample", "parse_settings"]


def _renamed(changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` with the first decoding functions' keywords (``strategy``,
    ``beam_size``, ``bos_id``, ``eos_id``, ``alpha``) in today's names, said once."""
    old = {k: changes.pop(k) for k in list(changes) if k in OLD_NAMES}
    if not old:
        return changes
    warn_deprecated("generate-keywords", f"generate({', '.join(f'{k}=' for k in old)}) are "
                    f"the old names; they are now settings: "
                    f"{', '.join(f'{k} -> {OLD_NAMES[k]}' for k in old)} "
                    "(zoo.decoding.GenerationSettings)", stacklevel=4)
    strategy = old.pop("strategy", None)
    if strategy is not None and strategy not in ("greedy", "beam", "sample"):
        raise RecipeError(f"unknown decoding strategy {strategy!r}; one of 'beam', 'greedy', "
                          "'sample' (today: num_beams=N, or do_sample=True)")
    beams = old.pop("beam_size", None)
    if strategy == "beam" or (beams is not None and strategy is None):
        changes["num_beams"] = beams if beams is not None else 4
    elif strategy is not None:
        changes.update(num_beams=1, do_sample=strategy == "sample")
    if "bos_id" in old:
        changes["start_id"] = old["bos_id"]
    if "eos_id" in old:
        changes["eos_ids"] = (old["eos_id"],)
    if "alpha" in old:
        changes["length_penalty"] = old["alpha"]
    return changes


def settings_for(model, settings: GenerationSettings | dict | None = None,
                 **changes: Any) -> GenerationSettings:
    """The settings a call decodes ``model`` by: ``settings`` (else ``model.generation``)
    with ``changes``; one RecipeError naming a setting that is unknown or wrong."""
    changes = _renamed(changes)
    if "max_length" in changes and "max_new_tokens" not in changes:
        changes["max_new_tokens"] = None  # a call's own max_length means it
    record = record_of(model)
    base = settings if settings is not None else record.generation
    if base is None:
        name = type(model).__name__
        if record.kind is None or not record.kind.generates:
            raise RecipeError(f"{with_article(name)} does not generate text: zoo decodes "
                              f"{GENERATES} models, and this one is {said(record.kind)}.")
        missing = [k for k in ("start_id", "eos_ids") if k not in changes]
        if missing:
            raise RecipeError(f"this {name} carries no generation settings "
                              f"(model.generation); give {' and '.join(missing)} (or "
                              "settings=GenerationSettings(...)).")
        pad = record.pad_id
        base = {"pad_id": pad if pad is not None else tuple(changes["eos_ids"])[0]}
        return fits_vocabulary(model, parse_settings({**base, **changes},
                                                     "generation settings"))
    return fits_vocabulary(model, settings_with(parse_settings(base, "generation settings"),
                                                changes))


GENERATES = " and ".join(kind.value for kind in Kind if kind.generates)
"""The kinds of model (:mod:`zoo.kinds`) that generate text, said."""


def fits_vocabulary(model, settings: GenerationSettings) -> GenerationSettings:
    """``settings``, refused (one RecipeError) when they name a token past ``model``'s
    vocabulary: checked when a model is read and before decoding starts (a model whose
    settings do not say its ``vocab_size`` is checked at the first step, by its
    logits)."""
    size = getattr(record_of(model).settings, "vocab_size", None)
    if isinstance(size, int):
        check_vocabulary(settings, size)
    return settings


def input_vocabulary(model) -> int | None:
    """The number of token ids ``model`` reads (its source vocabulary where it has one of
    its own), or None where its settings do not say."""
    settings = record_of(model).settings
    size = getattr(settings, "src_vocab_size", None) or getattr(settings, "vocab_size", None)
    return size if isinstance(size, int) else None


def id_outside(ids: torch.Tensor, size: int | None) -> int | None:
    """An id of ``ids`` outside a vocabulary of ``size`` (negative, or ``size`` and past),
    or None where all fit (or ``size`` is None): an embedding would raise an IndexError
    past it, and read from the end before 0."""
    if size is None or ids.numel() == 0:
        return None
    low, high = int(ids.min()), int(ids.max())
    return low if low < 0 else high if high >= size else None


def _check_source_ids(model, src: torch.Tensor) -> None:
    """Source or prompt ids are whole numbers inside the model's input vocabulary."""
    if src.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool):
        raise RecipeError(f"token ids are integers, not {src.dtype}")
    size = input_vocabulary(model)
    bad = id_outside(src, size)
    if bad is not None:
        raise RecipeError(f"the input holds the token id {bad}, outside the model's "
                          f"vocabulary of {size} (ids 0 to {size - 1}): the tokenizer does "
                          "not belong to this model")


def check_prompts(model, src: torch.Tensor, settings: GenerationSettings) -> None:
    """What :func:`generate` checks of a language model's prompts ``src`` (B, L) before
    it decodes them by ``settings``: room for a new token, the positions the model
    reads, the memory the decoding will hold; one RecipeError (or MemoryBudgetError)
    naming what is wrong. ``zoo serve`` checks each request so before it joins a batch."""
    limit = settings.length_limit(src.shape[1])
    if limit <= src.shape[1]:
        raise RecipeError(
            f"the prompts hold {src.shape[1]} tokens, and max_length={limit} counts the "
            "prompt: no room is left for a new token. Ask for new tokens by "
            "max_new_tokens (zoo generate --max-new-tokens), or a larger max_length.")
    check_positions(model, src.shape[1], limit)
    check_decoding_memory(model, src.shape[0], src.shape[1], settings, limit, src.device)


def _steps(model, src: torch.Tensor, settings: GenerationSettings, use_cache: bool,
           padding_mask: torch.Tensor | None = None):
    """The step for ``model``, its first tokens and their rules: a decoder-only model
    goes on from the prompts ``src``, an encoder-decoder one from its start token."""
    _check_source_ids(model, src)
    beams = settings.num_beams
    kind = kind_of(model)
    if kind is Kind.LANGUAGE_MODEL:
        if src.dim() != 2 or src.shape[1] == 0:
            raise RecipeError(f"a prompt is (batch, length) token ids, at least one token "
                              f"each; got a tensor of shape {tuple(src.shape)}")
        if padding_mask is None:
            padding_mask = model.padding_mask(src)
        elif padding_mask.shape != src.shape:
            raise RecipeError(f"padding_mask has shape {tuple(padding_mask.shape)}, the "
                              f"prompts {tuple(src.shape)}: one flag per token, True at "
                              "padding")
        if padding_mask is not None and bool(padding_mask[:, -1].any()):
            raise RecipeError("a prompt ends in padding: pad prompts on the left "
                              "(tokenizer.padding_side = 'left'), so that every row's "
                              "next token follows its last real one")
        check_prompts(model, src, settings)
        rules = Rules(settings, start=src.shape[1])
        step = PromptSteps(model, src, padding_mask, use_cache=use_cache, beams=beams,
                           steps=rules.max_length - src.shape[1])
        return step, src.repeat_interleave(beams, 0), rules
    if padding_mask is not None:
        raise RecipeError("padding_mask is for a decoder-only model's prompts; an "
                          "encoder-decoder model reads its sources' padding from pad_id")
    if kind is not Kind.SEQ2SEQ:
        raise RecipeError(f"{with_article(type(model).__name__)} cannot be decoded: zoo's "
                          f"decoding serves {GENERATES} models, and this one is {said(kind)}.")
    rules = Rules(settings, start=1, source=src.shape[1])
    check_positions(model, 1, rules.max_length, source=src.shape[1])
    check_decoding_memory(model, src.shape[0], src.shape[1], settings, rules.max_length,
                          src.device)
    step = Seq2SeqSteps(model, src, use_cache=use_cache, beams=beams,
                        steps=rules.max_length - 1)
    first = torch.full((src.shape[0] * beams, 1), settings.start_id, dtype=torch.long,
                       device=src.device)
    return step, first, rules


def _generator(settings: GenerationSettings, generator: torch.Generator | None,
               device: torch.device) -> torch.Generator | None:
    if generator is None and settings.do_sample and settings.seed is not None:
        generator = torch.Generator(device=device).manual_seed(settings.seed)
    return generator


@torch.no_grad()
def generate(model, src: torch.Tensor, settings: GenerationSettings | dict | None = None, *,
             use_cache: bool = True, generator: torch.Generator | None = None,
             return_scores: bool = False, padding_mask: torch.Tensor | None = None,
             **changes: Any):
    """(B, Ls) source ids -> (B, T) new tokens (the start token left out; the pad id after
    a sequence's end; T stops at the step where every row has ended, so it may be fewer
    than ``max_new_tokens``), decoded by ``settings`` (else ``model.generation``) with
    ``changes`` (any :class:`GenerationSettings` field by name).

    For a decoder-only model ``src`` are prompts, padded on the left, and
    ``padding_mask`` (B, Ls) says where (True at padding; a tokenizer's
    ``attention_mask == 0``); the new tokens follow each prompt. Lengths count the
    prompt, as transformers' do (``max_new_tokens`` does not).

    ``use_cache=False`` re-runs the decoder over the prefix at every step (the same
    tokens, slower); ``generator`` draws the samples (else one seeded by ``seed``, else
    torch's global one); ``return_scores`` (beam search) also returns each best
    hypothesis' normalised score (B,)."""
    settings = settings_for(model, settings, **changes)
    if return_scores and settings.num_beams == 1:
        raise RecipeError("return_scores is for beam search (num_beams > 1)")
    with fixed_weights(model), threads_for_a_call():
        step, first, rules = _steps(model, src, settings, use_cache, padding_mask)
        if settings.num_beams > 1:
            out, scores = search_beams(step, first, rules, sources=src.shape[0])
            return (out, scores) if return_scores else out
        pieces = list(one_per_row(step, first, rules,
                                  _generator(settings, generator, src.device)))
    return torch.stack(pieces, dim=1)


@torch.no_grad()
def stream(model, src: torch.Tensor, settings: GenerationSettings | dict | None = None, *,
           use_cache: bool = True, generator: torch.Generator | None = None,
           padding_mask: torch.Tensor | None = None,
           **changes: Any) -> Iterator[torch.Tensor]:
    """The tokens :func:`generate` makes, one step at a time: (B,) new tokens per step, as
    soon as they are chosen (the pad id for a sequence that has ended). Beam search
    chooses only at its end, so a stream decodes one sequence per source."""
    settings = settings_for(model, settings, **changes)
    if settings.num_beams > 1:
        raise RecipeError(f"stream gives tokens as they are chosen; beam search "
                          f"(num_beams={settings.num_beams}) chooses only at its end. Stream "
                          "with num_beams=1 (greedy or do_sample), or generate with beams.")
    # the weights may not change while a stream is open; its threads are chosen at its start
    with fixed_weights(model), threads_for_a_call():
        step, first, rules = _steps(model, src, settings, use_cache, padding_mask)
        yield from one_per_row(step, first, rules, _generator(settings, generator, src.device))


# -- the first decoding functions, kept for plugins that call them ----------------------------
def _deprecated(name: str) -> None:
    warn_deprecated("decoding-functions", f"zoo.decoding.{name} is deprecated: call "
                    "zoo.generate(model, src, ...) with settings by name (num_beams, "
                    "do_sample, start_id, eos_ids, max_new_tokens, length_penalty)",
                    stacklevel=3)


def greedy(model, src: torch.Tensor, *, max_new_tokens: int, bos_id: int, eos_id: int,
           use_cache: bool = True) -> torch.Tensor:
    """Deprecated: ``generate(model, src, num_beams=1, ...)``."""
    _deprecated("greedy")
    return generate(model, src, use_cache=use_cache, num_beams=1, do_sample=False,
                    max_new_tokens=max_new_tokens, start_id=bos_id, eos_ids=(eos_id,))


def beam_search(model, src: torch.Tensor, *, beam_size: int = 4, max_new_tokens: int,
                bos_id: int, eos_id: int, alpha: float = 0.6, use_cache: bool = True,
                return_scores: bool = False):
    """Deprecated: ``generate(model, src, num_beams=4, length_penalty_form="gnmt", ...)``
    (GNMT's penalty and the exact bound, as this function always had)."""
    _deprecated("beam_search")
    if beam_size == 1:  # zoo's first beam search of one beam was greedy's tokens
        out = generate(model, src, use_cache=use_cache, num_beams=1, do_sample=False,
                       max_new_tokens=max_new_tokens, start_id=bos_id, eos_ids=(eos_id,))
        return (out, None) if return_scores else out
    return generate(model, src, use_cache=use_cache, return_scores=return_scores,
                    num_beams=beam_size, do_sample=False, max_new_tokens=max_new_tokens,
                    start_id=bos_id, eos_ids=(eos_id,), length_penalty=alpha,
                    length_penalty_form="gnmt", early_stopping="never")


def sample(model, src: torch.Tensor, *, max_new_tokens: int, bos_id: int, eos_id: int,
           temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Deprecated: ``generate(model, src, do_sample=True, ...)``."""
    _deprecated("sample")
    return generate(model, src, generator=generator, num_beams=1, do_sample=True,
                    max_new_tokens=max_new_tokens, start_id=bos_id, eos_ids=(eos_id,),
                    temperature=temperature, top_k=top_k, top_p=1.0 if top_p is None else top_p)
