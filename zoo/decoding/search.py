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

import struct
from collections.abc import Callable, Iterator

import torch

from .. import native
from .rules import NEVER, Rules


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + length) / 6) ** alpha


def next_tokens(rules: Rules, tokens: torch.Tensor, logits: torch.Tensor,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token (N,) of each row of ``tokens`` (N, T) from its ``logits`` (N, V):
    the most likely after the rules, or with ``do_sample`` one drawn after the filters
    (by ``generator``, else torch's global one)."""
    scores = rules.process(tokens, logits)
    if rules.settings.do_sample:
        probs = rules.warp(scores, tokens).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]
    return scores.argmax(-1)


def one_per_row(step: Callable, tokens: torch.Tensor, rules: Rules,
                generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """Each step's new token (N,) for every row of ``tokens`` (N, T0): the most likely
    after the rules, or with ``do_sample`` one drawn after the filters; the pad id once a
    row has ended. Stops when every row has ended or at the length limit."""
    s = rules.settings
    eos = torch.tensor(s.eos_ids, device=tokens.device)
    done = torch.zeros(tokens.shape[0], dtype=torch.bool, device=tokens.device)
    while tokens.shape[1] < rules.max_length:
        nxt = next_tokens(rules, tokens, step(tokens), generator)
        nxt = nxt.masked_fill(done, s.pad_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        yield nxt
        done |= torch.isin(nxt, eos)
        if done.all():
            return


def top_k(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest of each row of ``x`` (B, N) and their indices, largest first:
    ``torch.topk``'s, through zoo's one-pass ``torch.ops.zoo.top_k`` on a CPU where zoo's
    native code is built (a beam search's step: 8 of 32,000 scores in about a seventh of
    the 53 microseconds ``torch.topk`` took on a 2-core Xeon). Equal scores keep the row's
    order there; ``torch.topk`` does not say which comes first."""
    if x.device.type == "cpu" and x.dtype == torch.float32 and native.available():
        return torch.ops.zoo.top_k(x, k)
    return x.topk(k, dim=1)


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

    def bound(self, best: float, now: int, longest: int, early) -> float:
        """What the best running score ``best``, at ``now`` new tokens, can reach when
        normalised: at ``now`` (``early_stopping`` False or True, transformers'
        heuristic), or at its best over every length up to ``longest`` ("never": scores
        only fall, so the largest penalty bounds it). In float32, as the scores are."""
        divisor = max(self(now), self(longest)) if early == "never" else self(now)
        return _float32(best / _float32(divisor))


def _float32(x: float) -> float:
    """``x`` rounded to the nearest float32 (a quotient of two float32 numbers computed in
    float64 and rounded so is the float32 quotient)."""
    return struct.unpack("f", struct.pack("f", x))[0]


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
    the same for every beam of a source; the step's rows are those beams.

    Each step's scores and their best candidates are tensors; which candidates finish,
    which go on and when a source is done are decided on the host, over the few
    candidates of each source (:class:`_Beams`): some forty small tensor operations a step
    were half of a sentence's beam search on a CPU."""
    s = rules.settings
    beams = _Beams(rules, sources, tokens)
    running = tokens  # (B * num_beams, T): the beams of each source, one after another
    while True:
        length = running.shape[1]
        logp = rules.process(running, torch.log_softmax(step(running), dim=-1))
        vocab = logp.shape[-1]
        total = (logp.view(sources, s.num_beams, vocab)
                 + torch.tensor(beams.scores, device=tokens.device)[:, :, None])
        total = total.view(sources, -1)
        width = min(max(2, 1 + len(s.eos_ids)) * s.num_beams, total.shape[1])
        top_scores, top_index = top_k(total, width)
        scores, index = top_scores.tolist(), top_index.tolist()
        beams.finish(running, (top_scores, top_index), scores, index, vocab)
        rows, new = beams.go_on(scores, index, vocab, length)
        if not any(beams.active):
            break
        rows = torch.tensor(rows, device=tokens.device)
        step.reorder(rows)
        running = torch.cat([running.index_select(0, rows),
                             torch.tensor(new, device=tokens.device)[:, None]], dim=1)
    return _end_of_search(beams.finished, beams.finished_scores, beams.eos, s.pad_id,
                          beams.start)


class _Beams:
    """A beam search's state between steps: each source's running scores, whether it is
    still searching, and its finished hypotheses (tensors, changed only at a step where
    one ends, with the k-th best score kept on the host)."""

    def __init__(self, rules: Rules, sources: int, tokens: torch.Tensor) -> None:
        s = rules.settings
        self.rules, self.k, self.start = rules, s.num_beams, tokens.shape[1]
        self.gnmt, self.early = s.length_penalty_form == "gnmt", s.early_stopping
        self.penalty = _Penalty(s.length_penalty_form, s.length_penalty)
        self.eos_ids = frozenset(s.eos_ids)
        self.eos = torch.tensor(s.eos_ids, device=tokens.device)
        self.scores = [[0.0] + [NEVER] * (self.k - 1) for _ in range(sources)]
        """Each source's running beams' scores (the beams begin equal: the first counts)."""
        self.active = [True] * sources
        self.finished = tokens.view(sources, self.k, self.start).clone()
        self.finished_scores = torch.full((sources, self.k), NEVER, device=tokens.device)
        self.is_finished = torch.zeros(sources, self.k, dtype=torch.bool,
                                       device=tokens.device)
        self.worst = [NEVER] * sources
        """Each source's k-th best finished score once it has k finished, else NEVER."""
        self.full = [False] * sources
        """Whether a source has k finished hypotheses."""

    def ends(self, token: int, length: int) -> bool:
        """Whether a candidate with this new token after ``length`` tokens ends (an end
        token, or the last step)."""
        return token in self.eos_ids or length + 1 >= self.rules.max_length

    def finish(self, running: torch.Tensor, top: tuple[torch.Tensor, torch.Tensor],
               top_scores: list, top_index: list, vocab: int) -> None:
        """The candidates of this step (``top``: their scores and flat indices, as tensors
        and as lists) that end join the finished hypotheses: only among the k best of the
        step in transformers' convention, and none for a source already full with
        ``early_stopping=True``."""
        length = running.shape[1]
        joins = [[self.active[b] and score > NEVER and self.ends(i % vocab, length)
                  and (self.gnmt or c < self.k) and not (self.early is True and self.full[b])
                  for c, (score, i) in enumerate(zip(scores, index))]
                 for b, (scores, index) in enumerate(zip(top_scores, top_index))]
        if not any(map(any, joins)):  # (most steps none ends)
            return
        (top_scores, top_index), sources, device = top, len(joins), running.device
        beam, token = top_index // vocab, top_index % vocab
        rows = torch.arange(sources, device=device)[:, None]
        seqs = torch.cat([running.view(sources, self.k, -1)[rows, beam], token[:, :, None]],
                         dim=2)
        joined = torch.tensor(joins, device=device)
        ended = (top_scores / self.penalty(length + 1 - self.start)).masked_fill(
            ~joined, NEVER)
        self.finished, self.finished_scores, self.is_finished = _keep_best(
            (self.finished, self.finished_scores, self.is_finished), (seqs, ended, joined),
            self.k, self.rules.settings.pad_id)
        self.full = self.is_finished.all(1).tolist()
        kth = self.finished_scores[:, -1].tolist()
        self.worst = [score if full else NEVER for score, full in zip(kth, self.full)]

    def go_on(self, top_scores: list, top_index: list, vocab: int,
              length: int) -> tuple[list, list]:
        """The k best candidates of each source that did not end go on: the rows they
        continue and their new tokens, one after another; a source is done when its best
        running hypothesis cannot beat its k-th finished one."""
        rows, new = [], []
        now = length + 1 - self.start
        longest = self.rules.max_length - self.start
        for b, (scores, index) in enumerate(zip(top_scores, top_index)):
            go = [score if self.active[b] and score > NEVER
                  and not self.ends(i % vocab, length) else NEVER
                  for score, i in zip(scores, index)]
            order = sorted(range(len(go)), key=lambda c: -go[c])[:self.k]
            rows += [b * self.k + index[c] // vocab for c in order]
            new += [index[c] % vocab for c in order]
            best = go[order[0]]
            bound = self.penalty.bound(best, now, longest, self.early)
            done = self.worst[b] >= bound or best == NEVER or (self.early is True
                                                               and self.full[b])
            self.active[b] = self.active[b] and not done
            self.scores[b] = [go[c] for c in order] if self.active[b] else [NEVER] * self.k
        return rows, new
