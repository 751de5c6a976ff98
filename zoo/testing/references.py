"""The conformance kit's own reference parts, so that a check never depends on another
plugin: a kernel written from the formula, positions of each kind that act inside
attention, a dense reference attention, norm and feed-forward network (for blocks)."""

from __future__ import annotations

import torch
from torch import nn

from ..attention import InsideAttention, MultiHeadAttention, boolean_mask
from .contract import D, H


def reference_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                     attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                     dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) v, eq. 1 of Vaswani et al. (2017), over (B, H, L, D);
    ``attn_mask`` boolean (True: may attend) or float (added); no dropout."""
    scores = (q @ k.transpose(-2, -1)).float() * (q.shape[-1] ** -0.5 if scale is None else scale)
    if is_causal:
        lq, lk = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(lq, lk, dtype=torch.bool,
                                                device=q.device).tril(), float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                  else scores + attn_mask.float())
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


class Rotary(InsideAttention):
    """Rotary positions (RoPE, Su et al. 2021) written from their formula."""

    kind = "rotary"

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Each head vector turned by its position's angles, halves paired."""
        half = x.shape[-1] // 2
        angle = positions.float()[:, None] * 10000.0 ** (-torch.arange(half) / half)
        x1, x2 = x.float()[..., :half], x.float()[..., half:]
        cos, sin = angle.cos(), angle.sin()
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).to(x.dtype)


class Bias(InsideAttention):
    """A bias on the scores, −slope·|i − j| per head (as ALiBi, Press et al. 2022)."""

    kind = "bias"

    def bias(self, rel: torch.Tensor) -> torch.Tensor:
        """(H, Lq, Lk): −slope of each head times |i − j|."""
        slopes = torch.tensor([0.5 ** (h + 1) for h in range(H)], device=rel.device)
        return -slopes.view(H, *[1] * rel.dim()) * rel.abs().float()[None]


class Relative(InsideAttention):
    """Relative positions on keys and values, clipped at distance 4 (Shaw et al. 2018)."""

    kind = "relative"

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.table_k = torch.randn(9, D // H, generator=generator) * 0.3
        self.table_v = torch.randn(9, D // H, generator=generator) * 0.3

    def _rows(self, table: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        return table[rel.clamp(-4, 4) + 4]  # (Lq, Lk, Dh)

    def scores(self, q: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """The scores' relative term, q · a_k[i − j]."""
        return torch.einsum("bhqd,qkd->bhqk", q, self._rows(self.table_k, rel).to(q.dtype))

    def values_term(self, weights: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
        """The output's relative term, Σ_j weights · a_v[i − j]."""
        return torch.einsum("bhqk,qkd->bhqd", weights,
                            self._rows(self.table_v, rel).to(weights.dtype))


class Disentangled(InsideAttention):
    """A table of the distances clipped at 4 (rows 0 to 8), for disentangled attention
    (DeBERTa, He et al. 2021): ``table()`` its vectors (of the kit's width), ``rows`` the
    row of each query and key, the distance query - key plus 4."""

    kind = "disentangled"

    def __init__(self) -> None:
        super().__init__()
        self.vectors = torch.randn(9, D, generator=torch.Generator().manual_seed(1))

    def table(self) -> torch.Tensor:
        """(9, D): a vector per clipped distance."""
        return self.vectors

    def rows(self, lq: int, lk: int, offset: int, device) -> torch.Tensor:
        """(Lq, Lk): the row of each query (at ``offset`` on) and key."""
        q = torch.arange(offset, offset + lq, device=device)
        return (q[:, None] - torch.arange(lk, device=device)[None, :]).clamp(-4, 4) + 4


REFERENCE_POSITIONS = {"rotary": Rotary, "bias": Bias, "relative": Relative,
                       "disentangled": Disentangled}
"""A reference position of each kind that acts inside attention."""


class ReferenceAttention(MultiHeadAttention):
    """Dense softmax attention through the kit's reference kernel (for blocks)."""

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=self.causal and not self.cross,
                            key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                            device=q.device)
        return self._dense(q, k, v, mask, offset=offset)


def reference_norm() -> nn.Module:
    """LayerNorm over the kit's width."""
    return nn.LayerNorm(D)


def reference_ffn() -> nn.Module:
    """Linear, ReLU, Linear (2× the kit's width inside)."""
    return nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, D))


def reference_flow(flow, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
    """What a block whose ``data_flow()`` is ``flow`` (:class:`zoo.layer_flow.DataFlow`)
    computes of ``x`` (B, L, d), written out from the description over the flow's own
    modules: the sublayers in sequence or in parallel, pre-norm or post-norm, a sandwich
    block's norms of the sublayers' outputs, a decoder's cross-attention over ``memory``.
    The kit holds a block's ``forward`` to it, as zoo's native step computes the flow."""
    first, second = flow.norms

    def sublayer(f, h: torch.Tensor, after) -> torch.Tensor:
        out = f(h)
        return after(out) if after is not None else out

    def attend(h: torch.Tensor) -> torch.Tensor:
        return sublayer(flow.attention, h, flow.after[0])

    def feed(h: torch.Tensor) -> torch.Tensor:
        return sublayer(flow.ffn, h, flow.after[1])

    def cross(h: torch.Tensor) -> torch.Tensor:
        return flow.cross_attention(h, memory)

    if flow.residual == "parallel":
        return x + attend(first(x)) + feed(second(x))
    if flow.norm_first:
        x = x + attend(first(x))
        if flow.cross_attention is not None:
            x = x + cross(flow.cross_norm(x))
        return x + feed(second(x))
    x = first(x + attend(x))
    if flow.cross_attention is not None:
        x = flow.cross_norm(x + cross(x))
    return second(x + feed(x))
