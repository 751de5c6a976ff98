"""What the settings do to the next token's scores, each step: the rules (forbidden
tokens, lengths, forced tokens, repetition) and, when sampling, the filters
(temperature, top-k, top-p, min-p).

They follow transformers' logits processors and warpers, in the same order and with the
same arithmetic, so an imported model decodes and samples as it does there
(``tests/test_decoding.py`` holds them equal to transformers' own on the same logits).
"""

from __future__ import annotations

import torch

from ..errors import RecipeError
from .settings import GenerationSettings

NEVER = float("-inf")


class Rules:
    """The rules of ``settings`` for sequences that begin with ``start`` tokens (the
    start token, or a prompt), applied to the scores (N, V) of their next token."""

    def __init__(self, settings: GenerationSettings, start: int) -> None:
        self.settings = settings
        self.start = start
        self.max_length = settings.length_limit(start)
        self.min_length = settings.min_length_for(start)
        self._checked = False

    def process(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` (N, V) after the rules, for the sequences ``tokens`` (N, T) so far:
        the repetition penalty, no repeated n-gram, forbidden tokens, no end before the
        minimum length, a forced first and a forced last token; then, with
        ``renormalize``, the log-probabilities normalised again."""
        s = self.settings
        if not self._checked:
            check_vocabulary(s, scores.shape[-1])
            self._checked = True
        length = tokens.shape[1]
        scores = scores.clone()
        if s.repetition_penalty != 1.0:
            scores = repetition_penalty(tokens, scores, s.repetition_penalty)
        if s.no_repeat_ngram_size:
            ban_repeated_ngrams(tokens, scores, s.no_repeat_ngram_size)
        if s.forbidden_ids:
            scores[:, list(s.forbidden_ids)] = NEVER
        if length < self.min_length:
            scores[:, list(s.eos_ids)] = NEVER
        if s.forced_bos_id is not None and length == self.start:
            scores.fill_(NEVER)
            scores[:, s.forced_bos_id] = 0.0
        if s.forced_eos_id is not None and length == self.max_length - 1:
            scores.fill_(NEVER)
            scores[:, s.forced_eos_id] = 0.0
        if s.renormalize:
            scores = torch.log_softmax(scores, dim=-1)
        return scores

    def warp(self, scores: torch.Tensor) -> torch.Tensor:
        """The filters of sampling on ``scores`` (N, V), in transformers' order:
        temperature, top-k, top-p, min-p; a filtered token's score is -inf."""
        s = self.settings
        if s.temperature != 1.0:
            scores = scores / s.temperature
        return filter_logits(scores, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p)


def check_vocabulary(settings: GenerationSettings, vocab: int) -> None:
    """Refuse settings that name a token past the model's vocabulary."""
    ids = [settings.start_id, settings.pad_id, *settings.eos_ids, *settings.forbidden_ids,
           *(i for i in (settings.forced_bos_id, settings.forced_eos_id) if i is not None)]
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise RecipeError(f"generation settings name token ids {bad}, past the model's "
                          f"vocabulary of {vocab}: the settings belong to another model")


def repetition_penalty(tokens: torch.Tensor, scores: torch.Tensor,
                       penalty: float) -> torch.Tensor:
    """Each token already in its row's sequence: its score divided by ``penalty`` when
    positive, multiplied when negative (CTRL, Keskar et al. 2019)."""
    seen = scores.gather(1, tokens)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return scores.scatter(1, tokens, seen)


def ban_repeated_ngrams(tokens: torch.Tensor, scores: torch.Tensor, n: int) -> None:
    """In place: a token that would repeat an n-gram already in its row scores -inf."""
    length = tokens.shape[1]
    if length + 1 < n:
        return
    for row, seq in enumerate(tokens.tolist()):
        prefix = tuple(seq[length - n + 1:]) if n > 1 else ()
        banned = [seq[i + n - 1] for i in range(length - n + 1)
                  if tuple(seq[i:i + n - 1]) == prefix]
        if banned:
            scores[row, banned] = NEVER


def filter_logits(logits: torch.Tensor, *, top_k: int | None = None, top_p: float | None = None,
                  min_p: float | None = None) -> torch.Tensor:
    """Keep the ``top_k`` most likely tokens, then the smallest set whose probability
    reaches ``top_p``, then those at least ``min_p`` times as likely as the most likely
    one; the rest score -inf. The most likely token is always kept."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, NEVER)
    if top_p is not None and top_p < 1.0:
        ascending, order = logits.sort(dim=-1)
        # a token goes when the less likely ones, it included, hold at most 1 - top_p
        drop = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), NEVER)
    if min_p is not None and min_p > 0:
        probs = logits.softmax(-1)
        drop = probs < min_p * probs.amax(-1, keepdim=True)
        drop.scatter_(-1, probs.argmax(-1, keepdim=True), False)
        logits = logits.masked_fill(drop, NEVER)
    return logits
