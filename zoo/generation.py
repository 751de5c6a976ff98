"""A model's own generation settings, and decoding that follows them as Hugging Face's
``generate`` does.

A model imported from the Hub (``zoo.build("hf-hub:Helsinki-NLP/opus-mt-de-en")``)
comes with ``generation_config.json``: its start token, end tokens, beams, length
penalty, maximum length, forbidden tokens. :class:`GenerationSettings` holds them
as zoo's data, and :func:`generate_with` decodes by them with the rules of
transformers' ``generate``, so an imported model gives the tokens it gives there:

- lengths count the start token (``max_length`` 512 allows 511 new tokens);
- the rules on the next token's log-probabilities: forbidden tokens, no end before
  ``min_length``, a forced first token (``forced_bos_id``) and a forced end at the
  last step (``forced_eos_id``), no repeated n-gram; then, with ``renormalize``,
  the log-probabilities normalised again;
- beam search ranks a finished hypothesis by its summed log-probability over
  ``length ** length_penalty`` (the length counts the new tokens, the end token
  included), keeps the ``num_beams`` best finished ones, and stops once the best
  running beam cannot beat the worst of them (``early_stopping``: False, True or
  ``"never"``, as transformers' flag).

zoo's own :func:`zoo.decoding.beam_search` (GNMT's length penalty, an exact stopping
bound) stays what trained zoo models decode with; this module serves models that
bring settings of their own.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from .decoding import _start, _Stepper
from .errors import RecipeError

NEG = -1.0e9
"""transformers' stand-in for "never" in beam scores (a finite number, so that sums of
them still order)."""


class GenerationSettings(BaseModel):
    """How a model decodes by default (transformers' ``generation_config.json``, in zoo's
    names)."""

    model_config = ConfigDict(extra="forbid")

    start_id: int = Field(ge=0)
    """The decoder's first token (``decoder_start_token_id``)."""
    eos_ids: tuple[int, ...] = Field(min_length=1)
    """Tokens that end a sequence (``eos_token_id``, one or several)."""
    pad_id: int = Field(ge=0)
    """What fills a sequence after its end (``pad_token_id``)."""
    max_length: int = Field(20, gt=1)
    """The longest output, the start token counted (``max_length``)."""
    min_length: int = Field(0, ge=0)
    """No end token before this length, the start token counted (``min_length``)."""
    num_beams: int = Field(1, ge=1)
    length_penalty: float = 1.0
    early_stopping: bool | Literal["never"] = False
    forbidden_ids: tuple[int, ...] = ()
    """Tokens never generated (``bad_words_ids`` of one token each: Marian's pad)."""
    forced_bos_id: int | None = None
    """The token forced right after the start token (BART, mBART-50's language)."""
    forced_eos_id: int | None = None
    """The token forced at the last step, when the maximum length is reached."""
    no_repeat_ngram_size: int = Field(0, ge=0)
    renormalize: bool = False
    """Normalise the log-probabilities again after the rules (``renormalize_logits``)."""


def apply_rules(settings: GenerationSettings, tokens: torch.Tensor,
                logp: torch.Tensor) -> torch.Tensor:
    """The next token's log-probabilities (N, V) after the settings' rules, for the
    sequences ``tokens`` (N, T) so far (start token included)."""
    length = tokens.shape[1]
    logp = logp.clone()
    n = settings.no_repeat_ngram_size
    if n and length + 1 >= n:
        for row, seq in enumerate(tokens.tolist()):
            prefix = tuple(seq[length - n + 1:]) if n > 1 else ()
            banned = [seq[i + n - 1] for i in range(length - n + 1)
                      if tuple(seq[i:i + n - 1]) == prefix]
            if banned:
                logp[row, banned] = float("-inf")
    if settings.forbidden_ids:
        logp[:, list(settings.forbidden_ids)] = float("-inf")
    if length < settings.min_length:
        logp[:, list(settings.eos_ids)] = float("-inf")
    if settings.forced_bos_id is not None and length == 1:
        logp.fill_(float("-inf"))
        logp[:, settings.forced_bos_id] = 0.0
    if settings.forced_eos_id is not None and length == settings.max_length - 1:
        logp.fill_(float("-inf"))
        logp[:, settings.forced_eos_id] = 0.0
    if settings.renormalize:
        logp = torch.log_softmax(logp, dim=-1)
    return logp


def _check_vocab(settings: GenerationSettings, vocab: int) -> None:
    ids = [settings.start_id, settings.pad_id, *settings.eos_ids, *settings.forbidden_ids,
           *(i for i in (settings.forced_bos_id, settings.forced_eos_id) if i is not None)]
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise RecipeError(f"generation settings name token ids {bad}, past the model's "
                          f"vocabulary of {vocab}: the settings belong to another model")


@torch.no_grad()
def greedy_with(model, src: torch.Tensor, settings: GenerationSettings) -> torch.Tensor:
    """(B, Ls) -> (B, T) new tokens (the start token left out), each the most likely
    after the rules; the pad id after a sequence's end."""
    step = _Stepper(model, *_start(model, src), True, steps=settings.max_length - 1)
    tokens = torch.full((src.shape[0], 1), settings.start_id, dtype=torch.long,
                        device=src.device)
    eos = torch.tensor(settings.eos_ids, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    while tokens.shape[1] < settings.max_length:
        logp = step(tokens)
        if tokens.shape[1] == 1:
            _check_vocab(settings, logp.shape[-1])
        nxt = apply_rules(settings, tokens, logp).argmax(-1).masked_fill(done, settings.pad_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        done |= torch.isin(nxt, eos)
        if done.all():
            break
    return tokens[:, 1:]


def _keep_best(kept, new, k: int, pad_id: int):
    """The ``k`` best of the finished hypotheses ``kept`` and the candidates ``new``, each
    a (sequences (B, n, T), scores (B, n), finished (B, n)) triple; shorter sequences
    are padded to the longer width."""
    rows = torch.arange(kept[0].shape[0], device=kept[0].device)[:, None]
    width = new[0].shape[2]
    seqs = torch.cat([torch.nn.functional.pad(kept[0], (0, width - kept[0].shape[2]),
                                              value=pad_id), new[0]], dim=1)
    scores, done = torch.cat([kept[1], new[1]], dim=1), torch.cat([kept[2], new[2]], dim=1)
    best = scores.topk(k, dim=1).indices
    return seqs[rows, best], scores.gather(1, best), done.gather(1, best)


@torch.no_grad()
def beam_with(model, src: torch.Tensor, settings: GenerationSettings) -> torch.Tensor:
    """(B, Ls) -> (B, T) new tokens of the best finished hypothesis per source, found
    by beam search under the settings (see the module's docstring); the pad id fills."""
    bsz, k, device = src.shape[0], settings.num_beams, src.device
    lp, stop_early = settings.length_penalty, settings.early_stopping
    eos = torch.tensor(settings.eos_ids, device=device)
    keep = max(2, 1 + len(settings.eos_ids)) * k  # candidates looked at per source
    step = _Stepper(model, *_start(model, src), True, beams=k,
                    steps=settings.max_length - 1)
    running = torch.full((bsz, k, 1), settings.start_id, dtype=torch.long, device=device)
    running_scores = torch.zeros(bsz, k, device=device)
    running_scores[:, 1:] = NEG  # the beams start equal: only the first one counts
    finished = running.clone()
    finished_scores = torch.full((bsz, k), NEG, device=device)
    is_finished = torch.zeros(bsz, k, dtype=torch.bool, device=device)
    may_improve = torch.ones(bsz, 1, dtype=torch.bool, device=device)
    in_top = torch.arange(keep, device=device) < k
    rows = torch.arange(bsz, device=device)[:, None]
    while True:
        length = running.shape[2]
        logp = step(running.view(bsz * k, length))
        vocab = logp.shape[-1]
        if length == 1:
            _check_vocab(settings, vocab)
        logp = apply_rules(settings, running.view(bsz * k, length), logp)
        total = (logp.view(bsz, k, vocab) + running_scores[:, :, None]).view(bsz, -1)
        top_scores, top_index = total.topk(keep, dim=1)
        beam, token = top_index // vocab, top_index % vocab
        top_seqs = torch.cat([running[rows, beam], token[:, :, None]], dim=2)
        ends = torch.isin(token, eos) | (length + 1 >= settings.max_length)
        # the beams that go on: the best that did not end
        go_on = top_scores + ends.float() * NEG
        order = go_on.topk(k, dim=1).indices
        running, running_scores = top_seqs[rows, order], go_on.gather(1, order)
        # the hypotheses that ended among the k best join the finished ones
        ended = top_scores / (length ** lp)
        ended = ended + (is_finished.all(1, keepdim=True) & (stop_early is True)).float() * NEG
        ended = ended + (~may_improve).float() * NEG + (~(ends & in_top)).float() * NEG
        finished, finished_scores, is_finished = _keep_best(
            (finished, finished_scores, is_finished), (top_seqs, ended, ends & in_top),
            k, settings.pad_id)
        step.reorder_beams((rows * k + beam.gather(1, order)).flatten())
        length += 1
        longest = settings.max_length - 1 if stop_early == "never" and lp > 0 else length - 1
        best_running = running_scores[:, :1] / (longest ** lp)
        worst_kept = torch.where(is_finished, finished_scores.min(1, keepdim=True).values,
                                 torch.full_like(finished_scores, NEG))
        may_improve &= (best_running > worst_kept).any(1, keepdim=True)
        all_full = bool(is_finished.all()) and stop_early is True
        if not may_improve.any() or all_full or bool(ends.all()):
            break
    out = finished[:, 0, 1:]
    # a finished hypothesis ends at its end token; what follows is padding
    after = torch.isin(out, eos).long().cumsum(1) - torch.isin(out, eos).long()
    out = out.masked_fill(after > 0, settings.pad_id)
    used = int((out != settings.pad_id).any(0).nonzero().max()) + 1 if (
        out != settings.pad_id).any() else 1
    return out[:, :used]


def generate_with(model, src: torch.Tensor, settings: GenerationSettings,
                  **changes: Any) -> torch.Tensor:
    """Decode ``src`` by ``settings`` with ``changes`` applied (``num_beams=1`` for
    greedy, ``max_length=64``, ...): beam search when num_beams > 1, else greedy."""
    if changes:
        settings = GenerationSettings.model_validate({**settings.model_dump(), **changes})
    if settings.num_beams > 1:
        return beam_with(model, src, settings)
    return greedy_with(model, src, settings)
