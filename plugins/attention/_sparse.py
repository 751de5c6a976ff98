"""Block-sparse softmax attention: each block of queries meets only a few blocks
of keys, so memory and time grow linearly with the sequence.

A mechanism describes its pattern by
- ``_member(nb, causal)``: an (nb, nb) boolean table, query block x key block;
- ``_refine(q_pos, k_pos)``: an optional finer, per-position rule inside it;
- ``_global_queries(length)``: positions whose query attends to every key.

The full forward gathers, per query block, the keys of its member blocks and
computes a (block, keys-per-block) score matrix per block; global queries are
computed as dense rows. With a cache (a few new queries against all keys seen),
the same pattern is applied as a dense boolean mask, which costs O(t) per token.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.plugin_api import MultiHeadAttention, boolean_mask


class BlockSparseAttention(MultiHeadAttention):
    block_size: int

    def __init__(self, settings, **kwargs) -> None:
        super().__init__(settings, **kwargs)
        self._layouts: dict = {}

    # -- the pattern (subclasses) -----------------------------------------------------------------
    def _member(self, nb: int, causal: bool) -> torch.Tensor:
        raise NotImplementedError

    def _refine(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return None

    def _global_queries(self, length: int) -> torch.Tensor:
        return torch.zeros(0, dtype=torch.long)

    # -- the pattern as masks and gathers ---------------------------------------------------------
    def allowed(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """(Lq, Lk) True where query position i may attend key position j (before causal
        and padding masks)."""
        b = self.block_size
        nb = (int(max(q_pos.max(), k_pos.max())) // b) + 1
        member = self._member(nb, self.causal).to(q_pos.device)
        allowed = member[(q_pos // b)[:, None], (k_pos // b)[None, :]]
        refine = self._refine(q_pos[:, None], k_pos[None, :])
        if refine is not None:
            allowed = allowed & refine
        glob = self._global_queries(nb * b).to(q_pos.device)
        if glob.numel():
            allowed = allowed | torch.isin(q_pos, glob)[:, None]
        return allowed

    def _layout(self, length: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Key positions per query block (nb, K) with -1 for none, the allowed mask
        (nb, block, K), and the global query positions below ``length``."""
        key = (length, self.causal, str(device))
        if key not in self._layouts:
            b = self.block_size
            nb = -(-length // b)
            member = self._member(nb, self.causal)
            count = int(member.sum(1).max())
            blocks = torch.full((nb, count), -1, dtype=torch.long)
            for i in range(nb):
                row = member[i].nonzero().flatten()
                blocks[i, : row.numel()] = row
            positions = (blocks[:, :, None] * b + torch.arange(b)).flatten(1)  # (nb, K)
            valid = (blocks[:, :, None] >= 0).expand(-1, -1, b).flatten(1) & (positions < length)
            positions = torch.where(valid, positions, -1)
            q_pos = torch.arange(nb * b).view(nb, b)
            allowed = valid[:, None, :].expand(-1, b, -1)
            refine = self._refine(q_pos[:, :, None], positions[:, None, :])
            if refine is not None:
                allowed = allowed & refine
            glob = self._global_queries(length)
            glob = glob[glob < length]
            if len(self._layouts) >= 16:  # lengths vary while training: keep the recent ones
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[key] = (positions.to(device), allowed.to(device), glob.to(device))
        return self._layouts[key]

    # -- attention --------------------------------------------------------------------------------
    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask) -> torch.Tensor:
        if attn_mask is not None:
            raise ValueError(
                f"{type(self).__name__} has its own sparsity pattern and takes no attn_mask; "
                "use 'vanilla' attention for an arbitrary mask."
            )
        lq, lk = q.shape[-2], k.shape[-2]
        if offset or lq != lk:  # decoding with a cache: the pattern as a dense mask
            q_pos = torch.arange(offset, offset + lq, device=q.device)
            mask = self.allowed(q_pos, torch.arange(lk, device=q.device))
            extra = boolean_mask(lq, lk, causal=self.causal, key_padding_mask=key_padding_mask,
                                 attn_mask=None, device=q.device)
            return self._dense(q, k, v, mask if extra is None else mask & extra, offset=offset)
        return self._blocked(q, k, v, key_padding_mask)

    def _blocked(self, q, k, v, key_padding_mask) -> torch.Tensor:
        bsz, heads, length, dim = q.shape
        b = self.block_size
        positions, allowed, glob = self._layout(length, q.device)
        nb, kn = positions.shape
        pad = nb * b - length
        qb = nn.functional.pad(q, (0, 0, 0, pad)).view(bsz, heads, nb, b, dim)
        index = positions.clamp(min=0).flatten()
        kg = k.index_select(2, index).view(bsz, heads, nb, kn, dim)
        vg = v.index_select(2, index).view(bsz, heads, nb, kn, dim)
        scale = dim**-0.5
        scores = torch.einsum("bhnqd,bhnkd->bhnqk", qb, kg).float() * scale
        q_pos = torch.arange(nb * b, device=q.device).view(nb, b, 1)
        k_pos = positions[:, None, :]
        mask = allowed
        if self.causal:
            mask = mask & (k_pos <= q_pos)
        if key_padding_mask is not None:  # (B, L) -> (B, 1, nb, 1, K)
            mask = mask & ~key_padding_mask[:, positions.clamp(min=0)][:, None, :, None, :]
        if self.position_kind == "bias":
            scores = scores + self.positional.bias(k_pos - q_pos).float()
        # a row with nothing to attend (padding queries) gets finite, ignored values
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1).to(q.dtype)
        if self.training and self.dropout > 0.0:
            weights = nn.functional.dropout(weights, p=self.dropout)
        out = torch.einsum("bhnqk,bhnkd->bhnqd", weights, vg).reshape(bsz, heads, nb * b, dim)
        out = out[:, :, :length]
        if glob.numel():  # global queries see every key: dense rows
            qg = q.index_select(2, glob)
            mask = None
            if self.causal:
                mask = torch.arange(length, device=q.device)[None, :] <= glob[:, None]
            if key_padding_mask is not None:
                keep = ~key_padding_mask[:, None, None, :]
                mask = keep if mask is None else mask & keep
            rows = self._dense(qg, k, v, mask, q_positions=glob)
            out = out.index_copy(2, glob, rows)
        return out
