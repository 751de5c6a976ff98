"""Disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", sec. 3.1, eq. 4).

Each token is its content and, apart from it, its position relative to the others. The
score of query i and key j sums the content-to-content term q_i·k_j and, by
``terms``, the content-to-position term q_i·K_r(δ(i, j)) (``c2p``) and the
position-to-content term k_j·Q_r(δ(i, j)) (``p2c``), where δ is the clipped, bucketed
distance i - j and Q_r, K_r are the relative-distance table of the ``disentangled``
positions projected by the query and key projections (``share_projections``, DeBERTa
v3's ``share_att_key``) or by projections of their own (``pos_q_proj``,
``pos_k_proj``). The sum is scaled by 1/sqrt(head_dim x (1 + number of terms)), the
paper's eq. 5, then softmax attention over the real keys. Without positions it is
vanilla attention scaled by 1/sqrt(head_dim).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from zoo.plugin_api import AttentionSettings, Linear, MultiHeadAttention, boolean_mask


class DisentangledSettings(AttentionSettings):
    terms: list[Literal["c2p", "p2c"]] = Field(default_factory=lambda: ["c2p", "p2c"])
    """The position terms added to the content scores (DeBERTa's ``pos_att_type``)."""
    share_projections: bool = True
    """Project the distance table with the query and key projections (DeBERTa v3's
    ``share_att_key``); False gives the positions projections of their own."""


class DisentangledAttention(MultiHeadAttention):
    """Multi-head attention whose scores add content-to-position and position-to-content
    terms to the content scores."""

    Settings = DisentangledSettings

    def __init__(self, settings: DisentangledSettings | None, **kwargs) -> None:
        settings = settings or DisentangledSettings()
        super().__init__(settings, **kwargs)
        self.terms = tuple(dict.fromkeys(settings.terms))
        self.share = settings.share_projections
        width = self.n_kv_heads * self.head_dim
        if self.positional is not None and not self.share:
            self.pos_k_proj = Linear(self.d_model, width, bias=True) \
                if "c2p" in self.terms else None
            self.pos_q_proj = Linear(self.d_model, self.inner_dim, bias=True) \
                if "p2c" in self.terms else None

    def _table_heads(self, table: torch.Tensor, query: bool) -> torch.Tensor:
        """The distance table (R, d) projected as queries or keys: (1, H, R, D)."""
        if self.share:
            out = self.q_proj(table) if query else self.kv_proj(table).chunk(2, dim=-1)[0]
        else:
            out = (self.pos_q_proj if query else self.pos_k_proj)(table)
        heads = self.n_heads if query else self.n_kv_heads
        out = out.view(1, -1, heads, self.head_dim).transpose(1, 2)
        return out.repeat_interleave(self.n_heads // heads, dim=1)

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask) -> torch.Tensor:
        lq, lk = q.shape[-2], k.shape[-2]
        scores = q @ k.transpose(-2, -1)
        terms = self.terms if self.positional is not None else ()
        if terms:
            rows = self.positional.rows(lq, lk, offset, q.device)  # (Lq, Lk)
            table = self.positional.table().to(q.dtype)
            if "c2p" in terms:  # q_i . K_r[delta(i, j)]
                c2p = q @ self._table_heads(table, query=False).transpose(-2, -1)
                scores = scores + c2p.gather(-1, rows.expand(*c2p.shape[:2], lq, lk))
            if "p2c" in terms:  # k_j . Q_r[delta(i, j)]
                p2c = k @ self._table_heads(table, query=True).transpose(-2, -1)
                scores = scores + p2c.gather(-1, rows.T.expand(*p2c.shape[:2], lk, lq)) \
                    .transpose(-2, -1)
        scores = scores * (self.head_dim * (1 + len(terms))) ** -0.5
        mask = boolean_mask(lq, lk, causal=self.causal and lq > 1,
                            key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                            device=q.device)
        return self._weights(scores, mask) @ v
