"""LSH attention of the Reformer (Kitaev, Kaiser & Levskaya 2020, sec. 2).

Queries and keys are one projection (shared-QK: k_j = q_j / |q_j|). Each
position is hashed into one of ``n_buckets`` buckets by a random rotation R,
h(x) = argmax([xR; -xR]), so that vectors pointing the same way tend to share a
bucket. Positions are sorted by (bucket, position) and cut into chunks of
``chunk_size``; each chunk's queries attend to the keys of their own bucket in
their own chunk and the chunk before (the first chunk wraps to the last), so
memory is O(L · chunk_size), not O(L²). Padding goes to a bucket of its own after
the others, so it moves no real position's chunk. A position attends to itself only when
nothing else is allowed (its score is set to -1e5, as the paper does with
shared-QK), and with ``causal`` never to a later position. ``n_hashes`` rounds
with independent rotations are combined by their softmax normalisers, as if
their keys were one set.

With one bucket and a chunk covering the sequence this is dense shared-QK
attention. It does not decode with a KV cache: a new token changes the sorting
of the others, so a decoder built with it re-runs over its prefix at each step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from zoo.plugin_api import AttentionSettings, Linear, MultiHeadAttention, RecipeError

SELF_SCORE = -1e5
"""The score of a position with itself (the paper's shared-QK rule)."""
MASKED = -1e9
"""The score of a key that may not be attended (finite: a padded query's row stays finite)."""


class LSHSettings(AttentionSettings):
    n_buckets: int = Field(8, ge=1, le=2**16)
    """Buckets per hashing round: 1, or an even number (argmax over [xR; -xR])."""
    chunk_size: int = Field(32, ge=1, le=2**16)
    """Positions per chunk of the sorted sequence (the paper's m)."""
    n_hashes: int = Field(2, ge=1, le=64)
    """Hashing rounds: more rounds, fewer similar pairs missed, more work."""

    @model_validator(mode="after")
    def _even(self) -> "LSHSettings":
        if self.n_buckets > 1 and self.n_buckets % 2:
            raise ValueError(f"n_buckets {self.n_buckets} must be 1 or even: a rotation "
                             f"gives n_buckets / 2 directions and their opposites; try "
                             f"{self.n_buckets + 1}")
        return self


def lsh_buckets(x: torch.Tensor, rotations: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D), rotations (D, n_buckets / 2) -> buckets (B, H, L): the index of the
    largest of [xR; -xR] (the paper's h(x)); all 0 when there are no rotation columns."""
    if rotations.shape[-1] == 0:
        return torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
    rotated = x.float() @ rotations.float()
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


def _look_one_back(x: torch.Tensor) -> torch.Tensor:
    """(..., n_chunks, c, *) -> (..., n_chunks, 2c, *): each chunk followed by the one
    before it (the first by the last); a single chunk only sees itself."""
    if x.shape[2] == 1:
        return x
    return torch.cat([x, x.roll(1, dims=2)], dim=3)


class LSHAttention(MultiHeadAttention):
    """Reformer's shared-QK attention over hashed, sorted chunks."""

    Settings = LSHSettings

    def __init__(self, settings: LSHSettings | None, **kwargs) -> None:
        settings = settings or LSHSettings()
        if kwargs.get("cross"):
            raise RecipeError("lsh attention is self-attention (queries and keys are one "
                              "projection); use vanilla for cross-attention")
        if kwargs.get("n_kv_heads", kwargs.get("n_heads")) != kwargs.get("n_heads"):
            raise RecipeError(f"lsh attention takes no n_kv_heads ({kwargs['n_kv_heads']}): its "
                              "keys are its queries, one head each, so they cannot be grouped; "
                              "leave n_kv_heads out or use vanilla")
        super().__init__(settings, **kwargs)
        self.n_buckets, self.chunk_size = settings.n_buckets, settings.chunk_size
        self.kv_proj = Linear(self.d_model, self.d_model, bias=settings.bias)  # values only
        self.register_buffer("rotations", torch.randn(
            settings.n_hashes, self.head_dim, self.n_buckets // 2))

    def _project(self, x, context, cache):
        if cache is not None:
            raise RecipeError("lsh attention does not decode with a KV cache (a new token "
                              "re-sorts the others); decode with use_cache=False")
        q = self._rotate(self._heads(self.q_proj(x)), 0)
        return q, q, self._heads(self.kv_proj(x)), 0

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask) -> torch.Tensor:
        if attn_mask is not None:
            raise RecipeError("lsh attention takes no attn_mask (it does not claim "
                              "arbitrary_mask); causal and key_padding_mask are honoured")
        b, n = q.shape[0], q.shape[2]
        pad = (torch.zeros(b, n, dtype=torch.bool, device=q.device) if key_padding_mask is None
               else key_padding_mask)
        outs, lses = [], []
        for rotations in self.rotations:
            # padding has a bucket of its own, so its values move no real position
            buckets = lsh_buckets(q, rotations).masked_fill(pad[:, None], self.n_buckets)
            out, lse = self._round(q, v, buckets, min(self.chunk_size, n))
            outs.append(out)
            lses.append(lse)
        weights = torch.softmax(torch.stack(lses), dim=0).unsqueeze(-1)  # over the rounds
        return (torch.stack(outs) * weights).sum(0).to(v.dtype)

    def _round(self, q, v, buckets, c):
        """One hashing round: (B, H, L, D) outputs in the original order and their
        log-normalisers (B, H, L).

        Positions are sorted by (bucket, position), and each bucket starts a new chunk
        (its last chunk padded with empty slots): so a query's chunk, and the chunk
        before it in its bucket, hold the same keys whatever later positions hash to,
        and causal attention stays causal."""
        b, h, n, d = q.shape
        n_buckets = self.n_buckets + 1  # the last one is padding's
        position = torch.arange(n, device=q.device)
        order = (buckets * n + position).argsort(dim=-1)  # (B, H, L)
        sorted_bucket = buckets.gather(2, order)
        counts = torch.zeros(b, h, n_buckets, dtype=torch.long, device=q.device)
        counts.scatter_add_(2, buckets, torch.ones_like(buckets))
        padded = (counts + c - 1) // c * c
        rank = position - (counts.cumsum(-1) - counts).gather(2, sorted_bucket)
        slot = (padded.cumsum(-1) - padded).gather(2, sorted_bucket) + rank  # (B, H, L)
        size = (n + n_buckets * (c - 1) + c - 1) // c * c  # room for every bucket's padding
        chunks = size // c

        def place(sorted_x: torch.Tensor, fill: float) -> torch.Tensor:
            """(B, H, L, *) values in sorted order into their slots: (B, H, chunks, c, *)."""
            tail = sorted_x.shape[3:]
            index = slot.view(b, h, n, *[1] * len(tail)).expand_as(sorted_x)
            out = sorted_x.new_full((b, h, size, *tail), fill).scatter(2, index, sorted_x)
            return out.view(b, h, chunks, c, *tail)

        by_order = order[..., None].expand(b, h, n, d)
        sq, sv = place(q.gather(2, by_order), 0.0), place(v.gather(2, by_order), 0.0)
        s_pos = place(order, -1)  # the sorted positions are the order itself
        s_bucket = place(sorted_bucket, -1)  # empty slots: bucket -1, matched by no query
        s_chunk = place(rank // c, -3)  # the chunk within the bucket
        sk = F.normalize(sq.float(), dim=-1).to(sq.dtype)  # shared-QK: k = q / |q|
        kk, kv = _look_one_back(sk), _look_one_back(sv)
        k_pos, k_bucket, k_chunk = (_look_one_back(t) for t in (s_pos, s_bucket, s_chunk))

        scores = (sq @ kk.transpose(-2, -1)).float() * d**-0.5  # (B, H, chunks, c, 2c)
        step = s_chunk[..., None] - k_chunk[..., None, :]
        allowed = (s_bucket[..., None] == k_bucket[..., None, :]) & ((step == 0) | (step == 1))
        if self.causal:
            allowed &= k_pos[..., None, :] <= s_pos[..., None]
        scores = scores.masked_fill(~allowed, MASKED)
        scores = scores.masked_fill(s_pos[..., None] == k_pos[..., None, :], SELF_SCORE)
        lse = scores.logsumexp(dim=-1, keepdim=True)
        weights = torch.exp(scores - lse).to(v.dtype)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout)
        out = (weights @ kv).view(b, h, size, d).float()
        lse = lse.view(b, h, size)
        # each position's slot, in the original order
        at = slot.new_empty(b, h, n).scatter(2, order, slot)
        return out.gather(2, at[..., None].expand(b, h, n, d)), lse.gather(2, at)
