"""One decoding step of a model: the next token's logits for every sequence so far.

:class:`Seq2SeqSteps` serves any model with ``encode(src, mask)``, ``decode(tgt,
memory, memory_padding_mask, cache=)``, ``init_cache()`` and ``padding_mask(src)`` (the
``seq2seq`` architecture), through the attention family's caches, so a new token costs
one decoder step; ``use_cache=False`` re-runs the decoder over the whole prefix instead
(slower, the same results: a test holds them equal). A model that offers
``static_decoder(memory, mask, groups=, length=)`` decodes in preallocated buffers (and,
where zoo's kernels are built, in C++).

The searches (:mod:`zoo.decoding.search`) ask a step only for ``step(tokens)`` and
``step.reorder(index)``: :class:`PromptSteps` serves a decoder-only model (kind
``language-model``, the ``decoder`` architecture) going on from prompts.
"""

from __future__ import annotations

import torch

from ..kinds import PromptReading, StaticDecoding
from ..record import record_of


def _repeat(x: torch.Tensor | None, times: int) -> torch.Tensor | None:
    return x.repeat_interleave(times, 0) if x is not None and times > 1 else x


def _last_logits(model, tokens: torch.Tensor, mask: torch.Tensor | None, cache) -> torch.Tensor:
    """(B, V) logits of the token after each prompt of ``tokens``, the cache filled: by
    ``read_prompt`` where the model offers it (:class:`zoo.kinds.PromptReading`)."""
    if isinstance(model, PromptReading):
        return model.read_prompt(tokens, padding_mask=mask, cache=cache)
    return model(tokens, padding_mask=mask, cache=cache)[:, -1]


class Seq2SeqSteps:
    """Next-token logits of an encoder-decoder model for the sources ``src``.

    With ``beams`` > 1 the rows are ``beams`` hypotheses per source. They all begin with
    the same token, so with the cache the first step runs once per source (projecting
    each source's memory for cross-attention once, not once per beam) and its caches are
    then copied to every beam.

    ``steps`` (the most the caller will take) lets a model with a static decoder decode
    in buffers of that length; it gives None when its parts need the general path."""

    def __init__(self, model, src: torch.Tensor, *, use_cache: bool = True, beams: int = 1,
                 steps: int | None = None) -> None:
        self.model = model
        mask = model.padding_mask(src)
        memory = model.encode(src, mask)
        # a model whose attention cannot decode with a cache re-runs over the prefix
        use_cache = use_cache and record_of(model).decodes_incrementally
        self.static = model.static_decoder(memory, mask, groups=beams, length=steps) \
            if use_cache and steps and isinstance(model, StaticDecoding) else None
        self.cache = model.init_cache() if use_cache and self.static is None else None
        self.pending = beams if self.cache is not None else 1
        if self.pending == 1 and self.static is None:
            memory, mask = _repeat(memory, beams), _repeat(mask, beams)
        self.memory, self.mask = memory, mask

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, T) sequences so far -> (N, V) float32 logits of their next token."""
        if self.static is not None:
            logits = self.static(tokens[:, -1:])
        elif self.cache is None:
            logits = self.model.decode(tokens, self.memory, self.mask)
        elif self.pending > 1:
            beams, self.pending = self.pending, 1
            logits = self.model.decode(tokens[::beams, -1:], self.memory, self.mask,
                                       cache=self.cache)
            self.cache.spread(beams)
            self.memory, self.mask = _repeat(self.memory, beams), _repeat(self.mask, beams)
            logits = logits.repeat_interleave(beams, 0)
        else:
            logits = self.model.decode(tokens[:, -1:], self.memory, self.mask, cache=self.cache)
        return logits[:, -1].float()

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index``, each taken from a beam of the same source: the memory, its
        mask and the cross-attention caches are the same for every beam of a source, so
        only the decoder's own caches move."""
        if self.static is not None:
            self.static.reorder(index)
        elif self.cache is not None:
            self.cache.reorder(index, within_groups=True)


class PromptSteps:
    """Next-token logits of a decoder-only model (kind ``language-model``: ``model(tokens,
    padding_mask=, cache=)``, ``init_cache()``) going on from prompts.

    The rows are ``beams`` copies of each prompt; its first step reads each prompt
    once (padded on the left, ``padding_mask`` True at the padding) and copies the
    caches to every beam. Later steps give the model only the newest token; a model that
    offers ``static_decoder(cache, length=)`` takes them over from there (``steps``, the
    most the caller will take: in buffers of that length, where zoo's native step runs
    it), else None."""

    def __init__(self, model, prompt: torch.Tensor, padding_mask: torch.Tensor | None, *,
                 use_cache: bool = True, beams: int = 1, steps: int | None = None) -> None:
        self.model, self.beams = model, beams
        use_cache = use_cache and record_of(model).decodes_incrementally
        self.cache = model.init_cache() if use_cache else None
        self.steps = steps
        self.static = None
        self.mask = _repeat(padding_mask, beams)
        """(N, L0) the prompts' padding, one row per beam (None: no padding)."""

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, T) sequences so far, the prompt first -> (N, V) float32 logits."""
        if self.static is not None:
            return self.static(tokens[:, -1:])[:, -1].float()
        if self.cache is None:
            mask = self.mask
            if mask is not None:
                new = tokens.shape[1] - mask.shape[1]
                mask = torch.nn.functional.pad(mask, (0, new), value=False)
            return self.model(tokens, padding_mask=mask)[:, -1].float()
        if self.cache.offset == 0:  # the first step: each prompt once
            rows = slice(None, None, self.beams)
            mask = None if self.mask is None else self.mask[rows]
            logits = _last_logits(self.model, tokens[rows], mask, self.cache)
            if self.beams > 1:
                self.cache.spread(self.beams)
                logits = logits.repeat_interleave(self.beams, 0)
            if self.steps and isinstance(self.model, StaticDecoding):
                self.static = self.model.static_decoder(self.cache, length=self.steps)
            return logits.float()
        return self.model(tokens[:, -1:], cache=self.cache)[:, -1].float()

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (beam search)."""
        if self.static is not None:
            self.static.reorder(index)
        elif self.cache is not None:
            self.cache.reorder(index)
        if self.mask is not None:
            self.mask = self.mask.index_select(0, index)
