"""Attention through a feature map: softmax(q k^T) v is replaced by
phi(q) (phi(k)^T v) / phi(q) . sum_j phi(k_j), which costs O(L) rather than O(L^2).

Causal attention keeps the running sums S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j):
the recurrent state of a decoder, O(1) per new token. It is computed chunk by
chunk (inside a chunk the masked quadratic form, across chunks the state), which
is the prefix-sum form with the memory of one chunk.
"""

from __future__ import annotations

import torch

from zoo.plugin_api import KVCache, MultiHeadAttention


EPS = 1e-30  # a division guard only: a tiny denominator is still exact (see performer.py)


def linear_attention(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Non-causal: every query sees every key. Features (B, H, L, M), v (B, H, Lk, D)."""
    kv = phi_k.transpose(-2, -1) @ v  # (B, H, M, D)
    z = phi_k.sum(-2)  # (B, H, M)
    den = (phi_q @ z.unsqueeze(-1)).clamp_min(EPS)
    return (phi_q @ kv) / den


def causal_linear_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor,
    state: tuple[torch.Tensor, torch.Tensor] | None = None, chunk: int = 64,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Causal: query t sees keys <= t (and everything summed in ``state``).
    Returns the output and the state after the last key."""
    bsz, heads, length, m = phi_q.shape
    if state is None:
        s = phi_q.new_zeros(bsz, heads, m, v.shape[-1])
        z = phi_q.new_zeros(bsz, heads, m)
    else:
        s, z = state
    outs = []
    for start in range(0, length, chunk):
        qc, kc, vc = (t[:, :, start : start + chunk] for t in (phi_q, phi_k, v))
        a = (qc @ kc.transpose(-2, -1)).tril()  # (B, H, C, C)
        num = qc @ s + a @ vc
        den = (qc @ z.unsqueeze(-1)).squeeze(-1) + a.sum(-1)
        outs.append(num / den.clamp_min(EPS).unsqueeze(-1))
        s = s + kc.transpose(-2, -1) @ vc
        z = z + kc.sum(-2)
    return torch.cat(outs, dim=-2), (s, z)


def causal_linear_attention_quadratic(phi_q, phi_k, v) -> torch.Tensor:
    """The same as :func:`causal_linear_attention`, as a masked (L, L) matrix: the
    definition, for tests and short sequences."""
    a = (phi_q @ phi_k.transpose(-2, -1)).tril()
    return (a @ v) / a.sum(-1, keepdim=True).clamp_min(EPS)


class FeatureMapAttention(MultiHeadAttention):
    """Linear attention with the feature map of a subclass (``_features``).

    No (Lq, Lk) weights are ever formed, so ``attention_dropout`` has nothing to drop
    and an arbitrary ``attn_mask`` cannot be honoured; padding and causality can."""

    chunk_size: int = 64

    def _features(self, x: torch.Tensor, is_query: bool, mask: torch.Tensor | None = None,
                  cache: KVCache | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        if attn_mask is not None:
            raise ValueError(
                f"{type(self).__name__} never forms the (Lq, Lk) score matrix, so it takes no "
                "attn_mask; key_padding_mask and causal masking work. Use 'vanilla' "
                "attention for an arbitrary mask."
            )
        dtype = x.dtype
        q = self._heads(self.q_proj(x))
        if self.cross:
            out = self._cross(q, context, key_padding_mask, cache)
        else:
            offset = len(cache) if cache is not None else 0
            k, v = self._shared_heads(*self._keys_values(x))  # grouped heads: each its group's
            q, k = self._rotate(q, offset), self._rotate(k, offset)
            keep = None if key_padding_mask is None else ~key_padding_mask[:, None, :, None]
            phi_q = self._features(q.float(), True)
            phi_k = self._features(k.float(), False, keep, cache if self.causal else None)
            v = v.float()
            if keep is not None:
                phi_k, v = phi_k * keep, v * keep
            if self.causal:
                state = None
                if cache is not None and "s" in cache.state:
                    state = (cache.state["s"], cache.state["z"])
                out, (s, z) = causal_linear_attention(phi_q, phi_k, v, state, self.chunk_size)
                if cache is not None:
                    cache.state.update(s=s, z=z)
                    cache.advance(x.shape[1])
            else:
                if cache is not None:
                    raise ValueError("a cache serves causal self-attention or cross-attention; "
                                     "this attention is neither")
                out = linear_attention(phi_q, phi_k, v)
        return self.out_proj(self._merge(out.to(dtype)))

    def _cross(self, q, context, key_padding_mask, cache) -> torch.Tensor:
        phi_q = self._features(q.float(), True)
        if cache is not None and "s" in cache.state:
            s, z = cache.state["s"], cache.state["z"]
        else:
            if context is None:
                raise ValueError("cross-attention needs a context (the encoder's output)")
            k, v = self._shared_heads(*self._keys_values(context))
            keep = None if key_padding_mask is None else ~key_padding_mask[:, None, :, None]
            phi_k, v = self._features(k.float(), False, keep), v.float()
            if keep is not None:
                phi_k, v = phi_k * keep, v * keep
            s, z = phi_k.transpose(-2, -1) @ v, phi_k.sum(-2)
            if cache is not None:
                cache.state.update(s=s, z=z)
        den = (phi_q @ z.unsqueeze(-1)).clamp_min(EPS)
        return (phi_q @ s) / den
