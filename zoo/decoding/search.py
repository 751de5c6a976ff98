"""The two searches of zoo's one decoding engine: one sequence per row (the most likely
token each step, or one drawn from the filtered distribution) and beam search.

Both take a step (``step(tokens) -> logits``, ``step.reorder(index)``:
:mod:`zoo.decoding.steps`), the sequences' first tokens and the settings' rules, so
they serve every kind of model the steps serve.

Beam search is one search with two conventions (``length_penalty_form``):
transformers' (``length ** penalty``; only an ending candidate among the ``num_beams``
best of a step finishes) and GNMT's, zoo's own (``((5 + length) / 6) ** penalty``; every
ending candidate looked at finishes). ``early_stopping`` says when it stops; with
``"never"`` it stops only when no running hypothesis can beat the ``num_beams`` best
finished ones at any length left, which makes a beam as wide as the candidates exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from .rules import NEVER, Rules


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + length) / 6) ** alpha


def one_per_row(step: Callable, tokens: torch.Tensor, rules: Rules,
                generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """Each step's new token (N,) for every row of ``tokens`` (N, T0): the most likely
    after the rules, or with ``do_sample`` one drawn after the filters; the pad id once a
    row has ended. Stops when every row has ended or at the length limit."""
    s = rules.settings
    eos = torch.tensor(s.eos_ids, device=tokens.device)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    while tokens.shape[1] < rules.max_length:
        scores = rules.process(tokens, step(tokens))
        if s.do_sample:
            probs = rules.warp(scores, tokens).softmax(-1)
            nxt = torch.multinomial(probs, 1, generator=generator)[:, 0]
        else:
            nxt = scores.argmax(-1)
        nxt = nxt.masked_fill(done, s.pad_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        yield nxt
        done |= torch.isin(nxt, eos)
        if done.all():
            return


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


class _Penalty:
    """The length penalty of a convention, and the best score a running hypothesis could
    still reach under it."""

    def __init__(self, form: str, alpha: float) -> None:
        self.form, self.alpha = form, alpha

    def __call__(self, new_tokens: int) -> float:
        if self.form == "gnmt":
            return length_penalty(new_tokens, self.alpha)
        return float(new_tokens) ** self.alpha

    def bound(self, best: torch.Tensor, now: int, longest: int, early) -> torch.Tensor:
        """What the best running score ``best`` (B,), at ``now`` new tokens, can reach
        when normalised: at ``now`` (``early_stopping`` False or True, transformers'
        heuristic), or at its best over every length up to ``longest`` ("never": scores
        only fall, so the largest penalty bounds it)."""
        if early == "never":
            return best / max(self(now), self(longest))
        return best / self(now)


def _end_of_search(finished, scores, eos: torch.Tensor, pad_id: int, start: int):
    """The best finished hypothesis per source, its start left out, padding after its
    end token, as wide as the longest of them."""
    out = finished[:, 0, start:]
    ended = torch.isin(out, eos).long()
    after = ended.cumsum(1) - ended > 0
    out = out.masked_fill(after, pad_id)
    # a hypothesis is as long as up to its end token, or the whole width without one
    lengths = torch.where(ended.any(1), (~after).sum(1), out.shape[1])
    return out[:, :max(1, int(lengths.max()))], scores[:, 0]


def beam_search(step: Callable, tokens: torch.Tensor, rules: Rules, *, sources: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The best finished hypothesis of ``num_beams`` per source, as (new tokens (B, T),
    their normalised scores (B,)). ``tokens`` (B * num_beams, T0) are the first tokens,
    the same for every beam of a source; the step's rows are those beams."""
    s = rules.settings
    bsz, k, device = sources, s.num_beams, tokens.device
    start = tokens.shape[1]
    gnmt, early = s.length_penalty_form == "gnmt", s.early_stopping
    penalty = _Penalty(s.length_penalty_form, s.length_penalty)
    eos = torch.tensor(s.eos_ids, device=device)
    running = tokens.view(bsz, k, start)
    running_scores = torch.full((bsz, k), NEVER, device=device)
    running_scores[:, 0] = 0.0  # the beams begin equal: only the first one counts
    finished = running.clone()
    finished_scores = torch.full((bsz, k), NEVER, device=device)
    is_finished = torch.zeros(bsz, k, dtype=torch.bool, device=device)
    active = torch.ones(bsz, dtype=torch.bool, device=device)
    rows = torch.arange(bsz, device=device)[:, None]
    longest = rules.max_length - start
    while True:
        length = running.shape[2]
        flat = running.reshape(bsz * k, length)
        logp = rules.process(flat, torch.log_softmax(step(flat), dim=-1))
        vocab = logp.shape[-1]
        total = (logp.view(bsz, k, vocab) + running_scores[:, :, None]).view(bsz, -1)
        width = min(max(2, 1 + len(s.eos_ids)) * k, total.shape[1])
        top_scores, top_index = total.topk(width, dim=1)
        beam, token = top_index // vocab, top_index % vocab
        top_seqs = torch.cat([running[rows, beam], token[:, :, None]], dim=2)
        valid = (top_scores > NEVER) & active[:, None]
        ends = torch.isin(token, eos) | (length + 1 >= rules.max_length)
        # the hypotheses that end here join the finished ones
        joins = ends & valid
        if not gnmt:
            joins[:, k:] = False  # transformers': only among the k best of the step
        if early is True:
            joins &= ~is_finished.all(1, keepdim=True)
        new_tokens = length + 1 - start
        ended = (top_scores / penalty(new_tokens)).masked_fill(~joins, NEVER)
        finished, finished_scores, is_finished = _keep_best(
            (finished, finished_scores, is_finished), (top_seqs, ended, joins), k, s.pad_id)
        # the k best that did not end go on
        go_on = top_scores.masked_fill(ends | ~valid, NEVER)
        order = go_on.topk(k, dim=1).indices
        running, running_scores = top_seqs[rows, order], go_on.gather(1, order)
        # a source is done when its best running hypothesis cannot beat the k-th finished
        worst_kept = torch.where(is_finished.all(1), finished_scores[:, -1],
                                 torch.full_like(finished_scores[:, -1], NEVER))
        bound = penalty.bound(running_scores[:, 0], new_tokens, longest, early)
        done = (worst_kept >= bound) | (running_scores[:, 0] == NEVER)
        if early is True:
            done |= is_finished.all(1)
        active &= ~done
        if not active.any():
            break
        step.reorder((rows * k + beam.gather(1, order)).flatten())
        running_scores = running_scores.masked_fill(~active[:, None], NEVER)
    return _end_of_search(finished, finished_scores, eos, s.pad_id, start)
