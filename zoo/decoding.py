"""Decoding an encoder-decoder model: greedy, beam search and sampling.

Each works on any model with ``encode(src)``, ``decode(tgt, memory,
memory_padding_mask, cache=)``, ``init_cache()`` and ``padding_mask(src)`` (the
``seq2seq`` architecture), and uses the attention family's caches, so a new token
costs one decoder step. ``use_cache=False`` re-runs the decoder over the whole
prefix instead: slower, the same results (a test holds them equal).
"""

from __future__ import annotations

import torch


def _start(model, src: torch.Tensor):
    mask = model.padding_mask(src)
    return model.encode(src, mask), mask


def _repeat(x: torch.Tensor | None, times: int) -> torch.Tensor | None:
    return x.repeat_interleave(times, 0) if x is not None and times > 1 else x


class _Stepper:
    """Next-token log-probabilities, with or without the cache.

    With ``beams`` > 1 the rows are ``beams`` hypotheses per source. They all begin
    with the same token, so with the cache the first step runs once per source
    (projecting each source's memory for cross-attention once, not once per beam) and
    its caches are then copied to every beam.

    ``steps`` (the most the caller will take) lets a model that offers
    ``static_decoder(memory, mask, groups=, length=)`` decode in buffers of that
    length; it returns None when its parts need the general path."""

    def __init__(self, model, memory, mask, use_cache: bool, beams: int = 1,
                 steps: int | None = None) -> None:
        self.model = model
        # a model whose attention cannot decode with a cache re-runs over the prefix
        use_cache = use_cache and getattr(model, "decodes_incrementally", True)
        make_static = getattr(model, "static_decoder", None) if use_cache and steps else None
        self.static = make_static(memory, mask, groups=beams, length=steps) \
            if make_static is not None else None
        self.cache = model.init_cache() if use_cache and self.static is None else None
        self.pending = beams if self.cache is not None else 1
        if self.pending == 1 and self.static is None:
            memory, mask = _repeat(memory, beams), _repeat(mask, beams)
        self.memory, self.mask = memory, mask

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
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
        return torch.log_softmax(logits[:, -1].float(), dim=-1)

    def reorder_beams(self, index: torch.Tensor) -> None:
        """Keep rows ``index``, each taken from a beam of the same source: the memory, its
        mask and the cross-attention caches are the same for every beam of a source, so
        only the decoder's own caches move."""
        if self.static is not None:
            self.static.reorder(index)
        elif self.cache is not None:
            self.cache.reorder(index, within_groups=True)


def _finish(tokens: torch.Tensor, eos_id: int, pad_id: int) -> torch.Tensor:
    """Everything after the first EOS becomes padding."""
    after = (tokens == eos_id).long().cumsum(1) - (tokens == eos_id).long()
    return tokens.masked_fill(after > 0, pad_id)


def _step_by_step(model, src: torch.Tensor, choose, *, max_new_tokens: int, bos_id: int,
                  eos_id: int, use_cache: bool = True) -> torch.Tensor:
    """One sequence per source, each next token ``choose(log_probs)``, until EOS."""
    pad_id = model.pad_id if model.pad_id is not None else eos_id
    step = _Stepper(model, *_start(model, src), use_cache, steps=max_new_tokens)
    tokens = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_new_tokens):
        nxt = choose(step(tokens)).masked_fill(done, pad_id)
        tokens = torch.cat([tokens, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if done.all():
            break
    return _finish(tokens[:, 1:], eos_id, pad_id)


@torch.no_grad()
def greedy(model, src: torch.Tensor, *, max_new_tokens: int, bos_id: int, eos_id: int,
           use_cache: bool = True) -> torch.Tensor:
    """(B, Ls) -> (B, T) generated ids (BOS not included), padding after EOS."""
    return _step_by_step(model, src, lambda logp: logp.argmax(-1), max_new_tokens=max_new_tokens,
                         bos_id=bos_id, eos_id=eos_id, use_cache=use_cache)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(model, src: torch.Tensor, *, beam_size: int = 4, max_new_tokens: int,
                bos_id: int, eos_id: int, alpha: float = 0.6, use_cache: bool = True,
                return_scores: bool = False):
    """The highest-scoring sequence per source under log p(Y|X) / lp(Y).

    Hypotheses end with EOS or at ``max_new_tokens``. The search stops when no live
    hypothesis can still beat the k best finished ones (the bound uses the largest
    length penalty a live one could reach), so with a beam as wide as the candidates
    it returns the exact best."""
    bsz, k = src.shape[0], beam_size
    device = src.device
    neg_inf = float("-inf")
    pad_id = model.pad_id if model.pad_id is not None else eos_id
    step = _Stepper(model, *_start(model, src), use_cache, beams=k, steps=max_new_tokens)
    tokens = torch.full((bsz * k, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((bsz, k), neg_inf, device=device)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(bsz)]
    worst_kept = torch.full((bsz,), neg_inf, device=device)  # k-th best finished, if k exist
    active = torch.ones(bsz, dtype=torch.bool, device=device)
    rows = torch.arange(bsz, device=device)[:, None]
    for t in range(1, max_new_tokens + 1):
        logp = step(tokens).view(bsz, k, -1)
        vocab = logp.shape[-1]
        cand = (scores[:, :, None] + logp).view(bsz, -1)
        width = min(2 * k, cand.shape[1])
        top_scores, top_index = cand.topk(width, dim=1)  # (bsz, 2k), best first
        beam, token = top_index // vocab, top_index % vocab
        valid = (top_scores > neg_inf) & active[:, None]
        ends = valid & (token == eos_id)
        # hypotheses that end here join their source's finished list (rare: Python is fine)
        if ends.any():
            for b, j in ends.nonzero().tolist():
                seq = tokens[b * k + beam[b, j], 1:].tolist() + [eos_id]
                finished[b].append((top_scores[b, j].item() / length_penalty(t, alpha), seq))
            for b in ends.any(1).nonzero().flatten().tolist():
                finished[b].sort(key=lambda h: -h[0])
                del finished[b][k:]
                if len(finished[b]) >= k:
                    worst_kept[b] = finished[b][-1][0]
        # the k best that go on, in order: a stable sort puts them first
        goes_on = valid & ~ends
        order = torch.where(goes_on, 0, 1).argsort(dim=1, stable=True)[:, :k]
        kept = goes_on.gather(1, order)
        new_beam = beam.gather(1, order).masked_fill(~kept, 0)
        new_token = token.gather(1, order).masked_fill(~kept, pad_id)
        new_score = top_scores.gather(1, order).masked_fill(~kept, neg_inf)
        best_alive = new_score.max(1).values
        bound = torch.where(best_alive < 0, best_alive / length_penalty(max_new_tokens, alpha),
                            best_alive)
        done = ~kept.any(1) | (worst_kept >= bound)
        active &= ~done
        if not active.any():
            break
        index = (rows * k + new_beam).flatten()
        step.reorder_beams(index)
        tokens = torch.cat([tokens.index_select(0, index), new_token.flatten()[:, None]], dim=1)
        scores = new_score.masked_fill(~active[:, None], neg_inf)
    else:  # ran out of length: live hypotheses count as they are
        for b in active.nonzero().flatten().tolist():
            for j in range(k):
                if scores[b, j] > neg_inf:
                    finished[b].append((scores[b, j].item() / length_penalty(max_new_tokens, alpha),
                                        tokens[b * k + j, 1:].tolist()))
            finished[b].sort(key=lambda h: -h[0])
    best = [finished[b][0] if finished[b] else (float("-inf"), []) for b in range(bsz)]
    width = max(1, max(len(seq) for _, seq in best))
    out = torch.full((bsz, width), pad_id, dtype=torch.long, device=device)
    for b, (_, seq) in enumerate(best):
        if seq:
            out[b, : len(seq)] = torch.tensor(seq, device=device)
    if return_scores:
        return out, torch.tensor([s for s, _ in best])
    return out


@torch.no_grad()
def sample(model, src: torch.Tensor, *, max_new_tokens: int, bos_id: int, eos_id: int,
           temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
           generator: torch.Generator | None = None) -> torch.Tensor:
    """Ancestral sampling with temperature, top-k and nucleus (top-p) filtering."""

    def choose(logp: torch.Tensor) -> torch.Tensor:
        logits = filter_logits(logp / max(temperature, 1e-6), top_k=top_k, top_p=top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)[:, 0]

    return _step_by_step(model, src, choose, max_new_tokens=max_new_tokens, bos_id=bos_id,
                         eos_id=eos_id)


def filter_logits(logits: torch.Tensor, *, top_k: int | None = None,
                  top_p: float | None = None) -> torch.Tensor:
    """Keep the k most likely tokens and/or the smallest set whose probability reaches p."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the tokens before it already reach top_p
        drop = probs.cumsum(-1) - probs >= top_p
        drop[..., 0] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


def generate(model, src: torch.Tensor, *, strategy: str = "greedy", **kwargs) -> torch.Tensor:
    """``greedy``, ``beam`` or ``sample``; keyword arguments go to that function."""
    functions = {"greedy": greedy, "beam": beam_search, "sample": sample}
    if strategy not in functions:
        raise ValueError(f"unknown decoding strategy {strategy!r}; one of {sorted(functions)}")
    return functions[strategy](model, src, **kwargs)

