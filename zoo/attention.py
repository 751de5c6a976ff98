"""The bases an attention mechanism or a position inside attention builds on: the
projections, the heads, positions applied inside attention, the KV cache and the
mask conventions (part of the plugin API, :mod:`zoo.plugin_api`).

A mechanism subclasses :class:`MultiHeadAttention` and implements ``_attend``
(queries, keys and values already split into heads, rotated when the positions
are rotary, and extended by the cache). A position that acts inside attention
subclasses :class:`InsideAttention` and offers the method of its kind.
"""

from __future__ import annotations

from typing import Callable

import torch
from pydantic import BaseModel, ConfigDict
from torch import nn

from .cache import KVCache
from .errors import RecipeError
from .ops import Linear, rms_norm


class AttentionSettings(BaseModel):
    """The settings every :class:`MultiHeadAttention` takes (subclass it to add yours)."""

    model_config = ConfigDict(extra="forbid")
    bias: bool = True
    """Biases in the query, key, value and output projections."""
    out_bias: bool | None = None
    """A bias in the output projection; None: as ``bias`` (Qwen2 has biases on q, k and v
    only)."""


class HeadNorm(nn.Module):
    """RMSNorm of each head's queries or keys over the head's own features, with a
    learned weight per feature: QK-norm (Dehghani et al. 2023, "Scaling Vision
    Transformers to 22 Billion Parameters", sec. 3.1), in the RMS form of Qwen3, OLMo 2
    and Gemma 3. It keeps q·k bounded however large the projections grow. ``offset`` 1 is
    Gemma 3's form: the stored weight is the scale less one."""

    def __init__(self, dim: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.eps, self.offset = eps, offset
        self.weight = nn.Parameter(torch.ones(dim) - offset)  # the identity at start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., head_dim), each head's vector normed over its own features."""
        return rms_norm(x, self.weight, self.eps, self.offset)


def relative_positions(lq: int, lk: int, offset: int, device) -> torch.Tensor:
    """(Lq, Lk) key position - query position, queries at offset .. offset + Lq - 1."""
    q_pos = torch.arange(offset, offset + lq, device=device)
    return torch.arange(lk, device=device)[None, :] - q_pos[:, None]


def boolean_mask(
    lq: int, lk: int, *, causal: bool, key_padding_mask: torch.Tensor | None,
    attn_mask: torch.Tensor | None, device,
) -> torch.Tensor | None:
    """One boolean mask, True where attending is allowed, broadcastable to (B, H, Lq, Lk);
    causal is bottom-right aligned (the last query sees every key)."""
    mask = None
    if attn_mask is not None:
        mask = attn_mask if attn_mask.dim() == 2 else attn_mask[:, None]
    if key_padding_mask is not None:
        keep = ~key_padding_mask[:, None, None, :]
        mask = keep if mask is None else mask & keep
    if causal:
        tri = torch.ones(lq, lk, dtype=torch.bool, device=device).tril(lk - lq)
        mask = tri if mask is None else mask & tri
    return mask


class MultiHeadAttention(nn.Module):
    """Projections and bookkeeping of an attention mechanism; a subclass says how queries
    meet keys by writing ``_attend(q, k, v, *, offset, key_padding_mask, attn_mask)``.

    It takes the attention contract's arguments (``settings, *, d_model, n_heads,
    kernel, dropout, causal, cross, positional``, and ``head_dim`` and ``n_kv_heads``
    when a recipe sets them) and call (``x, context=None, *, key_padding_mask=None, attn_mask=None,
    cache=None``), projects queries, keys and values into heads, rotates them for
    rotary positions at the right offset, extends them by the cache (or stores a
    cross-attention context in it once), and projects the output.

    What a subclass writes:

    - ``_attend(q, k, v, *, offset, key_padding_mask, attn_mask)`` (required): q is
      (B, H, Lq, D), k and v (B, H, Lk, D); ``offset`` is the position of the first
      query (the cache's length before this step). It returns (B, H, Lq, D). It
      **builds the causal mask itself** when ``self.causal`` (``boolean_mask`` does,
      bottom-right aligned), and honours ``key_padding_mask`` (B, Lk, True at padding)
      and ``attn_mask`` ((Lq, Lk) or (B, Lq, Lk), True where allowed).
    - ``Settings``: its pydantic settings, a subclass of :class:`AttentionSettings`.
    - ``groups_queries = True`` when its queries are independent of one another (see
      below); the default False is always correct.

    What it may call: ``self._dense(q, k, v, mask, offset=, scale=)``, softmax attention
    through the kernel with bias and relative positions applied and the weights
    recorded when asked; ``self._weights(scores, mask)``, the softmax weights of scores
    it wrote out itself (masked, recorded when asked, dropped out in training);
    ``boolean_mask`` for the mask.

    Attributes (set by ``__init__``; read them, do not reassign them after building):
    ``d_model``, ``n_heads``, ``head_dim`` (d_model // n_heads unless given),
    ``inner_dim`` (n_heads * head_dim); ``causal`` and ``cross`` (bool); ``dropout``
    (the attention weights' dropout probability; apply it only when ``self.training``);
    ``kernel`` (the kernel slot's function); ``positional`` (None, or the position
    module acting inside attention; always None in cross-attention) and
    ``position_kind`` (its ``kind``: ``"rotary"``, ``"bias"``, ``"relative"`` or None);
    ``scale`` (the factor of q·k, None for 1/sqrt(head_dim); a subclass may set it in
    ``__init__``); ``record_weights`` and ``last_weights`` (below).

    Projections: ``q_proj`` (d_model → inner_dim), ``kv_proj`` (d_model → 2 ·
    n_kv_heads · head_dim: keys, then values, ``[k | v]`` along the output features) and
    ``out_proj`` (inner_dim → d_model), all :class:`zoo.plugin_api.Linear` with biases when
    ``settings.bias``. Heads are contiguous slices of ``head_dim`` features.

    ``record_weights = True`` (set on a built module, e.g. for attention maps) makes
    the softmax path compute the weights explicitly and keep them, detached, in
    ``last_weights`` (B, H, Lq, Lk). A mechanism that does not go through ``_dense``
    and wants maps sets ``last_weights`` itself when ``record_weights`` is True."""

    Settings = AttentionSettings

    groups_queries = False
    """True when each query attends independently of the others (no causal or positional
    link between the queries of a cross-attention): the beams of one source may then
    share one row of its cached keys and values. False (the safe default) repeats that
    row for every beam."""

    softmax_attention = False
    """True when ``_attend`` is exactly ``_dense`` over every key with the causal and
    padding masks (softmax(scale · q·kᵀ) · v, the paper's eq. 1): a decoder may then run
    its steps calling ``_dense`` itself, on keys and values it keeps (the seq2seq
    architecture's static decoder). Set it beside the ``_attend`` it speaks for: a
    subclass that rewrites ``_attend`` without setting it again is taken as not plain."""

    def __init__(
        self,
        settings: AttentionSettings | None,
        *,
        d_model: int,
        n_heads: int,
        kernel: Callable[..., torch.Tensor] | None = None,
        dropout: float = 0.0,
        causal: bool = False,
        cross: bool = False,
        positional: nn.Module | None = None,
        head_dim: int | None = None,
        n_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        settings = settings or self.Settings()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads < 1 or n_heads % n_kv_heads:
            raise RecipeError(
                f"n_kv_heads {n_kv_heads} does not divide n_heads {n_heads}: each group of "
                f"queries shares one key/value head; pick n_kv_heads among "
                f"{[h for h in range(1, n_heads + 1) if n_heads % h == 0]}.")
        if head_dim is None and d_model % n_heads:
            raise RecipeError(
                f"d_model {d_model} is not divisible by n_heads {n_heads}; pick n_heads among "
                f"{[h for h in range(1, min(d_model, 64) + 1) if d_model % h == 0]}."
            )
        self.d_model, self.n_heads = d_model, n_heads
        self.head_dim = head_dim or d_model // n_heads
        self.inner_dim = n_heads * self.head_dim
        """The width of the heads together: d_model unless ``head_dim`` is given (T5 v1.1
        small: 6 heads of 64 in a width of 512)."""
        self.n_kv_heads = n_kv_heads
        """Key/value heads: ``n_heads`` (multi-head), fewer (grouped-query attention,
        Ainslie et al. 2023: each of ``n_heads / n_kv_heads`` query heads in a group
        shares one), or 1 (multi-query, Shazeer 2019). The cache keeps only these."""
        self.causal, self.cross, self.dropout = causal, cross, dropout
        self.kernel = kernel
        # positions act in self-attention only: a query and a key of two different
        # sequences have no relative position
        self.positional = None if cross else positional
        self.position_kind = getattr(self.positional, "kind", None)
        self.scale: float | None = None
        """The factor of q·k; None: 1/sqrt(head_dim), the paper's (a subclass may set it)."""
        self.record_weights = False
        """When True, the softmax path keeps its attention weights in ``last_weights``
        (B, H, Lq, Lk), for attention maps; it then computes them explicitly."""
        self.last_weights: torch.Tensor | None = None
        self.q_proj = Linear(d_model, self.inner_dim, bias=settings.bias)
        self.kv_proj = Linear(d_model, 2 * n_kv_heads * self.head_dim, bias=settings.bias)
        self.q_norm: nn.Module | None = None
        self.k_norm: nn.Module | None = None
        """Norms of each head's queries and keys (:class:`HeadNorm`), applied before
        positions act on them; None: none (a subclass sets them)."""
        out_bias = settings.bias if settings.out_bias is None else settings.out_bias
        self.out_proj = Linear(self.inner_dim, d_model, bias=out_bias)

    # -- shapes -----------------------------------------------------------------------------------
    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape  # (B, L, H*D) -> (B, H, L, D)
        return x.view(b, n, -1, self.head_dim).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = x.shape  # (B, H, L, D) -> (B, L, H*D)
        return x.transpose(1, 2).reshape(b, n, self.inner_dim)

    def _keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.kv_proj(source).chunk(2, dim=-1)
        k = self._heads(k)
        return (k if self.k_norm is None else self.k_norm(k)), self._heads(v)

    def _shared_heads(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``n_kv_heads`` (B, Hkv, L, D) given to every query head of
        their group (B, H, L, D); as they are with as many heads as queries."""
        groups = self.n_heads // self.n_kv_heads
        if groups == 1:
            return k, v
        return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)

    SHIFTABLE = (None, "rotary", "bias", "relative")
    """The position kinds :meth:`shifted_keys` can move: rotary keys are turned; biases
    and relative positions act through key-minus-query distances, which a shift keeps."""

    def shifted_keys(self, k: torch.Tensor, delta: int) -> torch.Tensor:
        """Cached keys ``k`` (B, H, L, D) of positions p, as they would have been cached
        at p + ``delta`` (continuous batching pads running rows on the left to join a
        longer prompt): rotary keys turned ``delta`` further (the rotations compose);
        any other key as it is. One ValueError for a position kind outside
        :data:`SHIFTABLE`."""
        if self.position_kind not in self.SHIFTABLE:
            raise ValueError(f"keys of {self.position_kind!r} positions cannot be shifted")
        if self.position_kind != "rotary" or not delta:
            return k
        return self.positional.rotate(k, torch.full((k.shape[-2],), delta, device=k.device))

    def _rotate(self, x: torch.Tensor, offset: int) -> torch.Tensor:
        if self.position_kind != "rotary":
            return x
        positions = torch.arange(offset, offset + x.shape[-2], device=x.device)
        return self.positional.rotate(x, positions)

    # -- the call ---------------------------------------------------------------------------------
    def _project(
        self, x: torch.Tensor, context: torch.Tensor | None, cache: KVCache | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Queries, keys, values (B, H, L, D) and the position of x's first token."""
        q = self._heads(self.q_proj(x))
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.cross:
            if cache is not None and not cache.empty:
                return q, cache.k, cache.v, 0
            if context is None:
                raise ValueError("cross-attention needs a context (the encoder's output)")
            k, v = self._keys_values(context)
            if cache is not None:
                cache.set(k, v)
            return q, k, v, 0
        offset = len(cache) if cache is not None else 0
        k, v = self._keys_values(x)
        q, k = self._rotate(q, offset), self._rotate(k, offset)
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v, offset

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """x (B, Lq, d); context (B, Lk, d) for cross-attention; key_padding_mask (B, Lk),
        True at padding; attn_mask (Lq, Lk) or (B, Lq, Lk), True where attending is allowed."""
        q, k, v, offset = self._project(x, context, cache)
        if cache is not None and cache.fixed and cache.groups > 1:
            if self.groups_queries and attn_mask is None and not self.record_weights:
                out = self._attend_grouped(q, *self._shared_heads(k, v), cache.groups,
                                           key_padding_mask)
                return self.out_proj(self._merge(out))
            cache.ungroup()
            k, v = cache.k, cache.v
        k, v = self._shared_heads(k, v)
        out = self._attend(q, k, v, offset=offset, key_padding_mask=key_padding_mask,
                           attn_mask=attn_mask)
        return self.out_proj(self._merge(out))

    def _attend_grouped(self, q, k, v, groups: int, key_padding_mask) -> torch.Tensor:
        """Cross-attention of ``groups`` consecutive query rows (the beams of a source)
        to one row of keys and values: their queries are attended together, as one
        longer query sequence, so the shared keys are read once per group."""
        b, h, lq, d = q.shape
        q = q.view(b // groups, groups, h, lq, d).transpose(1, 2).reshape(
            b // groups, h, groups * lq, d)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask[::groups]
        out = self._attend(q, k, v, offset=0, key_padding_mask=key_padding_mask, attn_mask=None)
        return out.view(b // groups, h, groups, lq, d).transpose(1, 2).reshape(b, h, lq, d)

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask) -> torch.Tensor:
        """How queries meet keys (a subclass writes it): q (B, H, Lq, D), k and v
        (B, H, Lk, D), projected, rotated and extended by the cache; ``offset`` the
        position of the first query. Returns (B, H, Lq, D). Builds the causal mask itself
        when ``self.causal``; honours ``key_padding_mask`` and ``attn_mask`` as claimed."""
        raise NotImplementedError

    # -- shared by the softmax mechanisms ---------------------------------------------------------
    def _dense(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
        *, offset: int = 0, is_causal: bool = False, q_positions: torch.Tensor | None = None,
        scale: float | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """softmax attention over all keys with a boolean ``mask`` and the positions.

        The queries sit at ``offset`` .. ``offset + Lq - 1``, or at ``q_positions`` (the
        global rows of a sparse mechanism, whose weights are not recorded). ``scale`` is
        the factor of the scores, for this call: a number, or a tensor broadcastable to
        (B, H, Lq, 1), such as a learned per-head (H, 1, 1) temperature; None
        takes ``self.scale`` (and when that is None, 1/sqrt(head_dim)). Bias and relative
        positions are added after it, as to the paper's scale."""
        lq, lk = q.shape[-2], k.shape[-2]
        dropout = self.dropout if self.training else 0.0
        record = self.record_weights and q_positions is None
        rel_needed = self.position_kind in ("relative", "bias") or record
        if is_causal and rel_needed:
            tri = torch.ones(lq, lk, dtype=torch.bool, device=q.device).tril()
            mask, is_causal = (tri if mask is None else mask & tri), False
        rel = None  # key minus query positions, made only where positions or maps use them
        if rel_needed:
            rel = (relative_positions(lq, lk, offset, q.device) if q_positions is None else
                   torch.arange(lk, device=q.device)[None, :] - q_positions[:, None])
        scale = self.scale if scale is None else scale
        if self.position_kind == "relative" or record:
            return self._explicit(q, k, v, mask, rel, dropout=dropout, record=record,
                                  scale=scale)
        if self.position_kind == "bias":  # a float mask: the bias, -inf where not allowed
            bias = self.positional.bias(rel).to(q.dtype)[None]  # (1, H, Lq, Lk)
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        if isinstance(scale, torch.Tensor):  # kernels take a number: scale the queries
            q, scale = q * scale.to(q.dtype), 1.0
        # the paper's scale is every kernel's default; another is passed only when set
        given = {} if scale is None else {"scale": float(scale)}
        return self.kernel(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout,
                           **given)

    def _explicit(self, q, k, v, mask, rel: torch.Tensor, *, dropout: float,
                  record: bool, scale: float | torch.Tensor | None = None) -> torch.Tensor:
        """Attention written out, weights and all: for Shaw's positions (no kernel
        computes their value term) and when the weights are recorded."""
        if self.position_kind == "relative":
            content = self.positional.content_query(q) @ k.transpose(-2, -1)
            scores = content + self.positional.scores(q, rel)
        else:
            scores = q @ k.transpose(-2, -1)
        scores = scores * (self.head_dim**-0.5 if scale is None else scale)
        if self.position_kind == "bias":
            scores = scores + self.positional.bias(rel).to(scores.dtype)[None]
        weights = self._weights(scores, mask, record=record, dropout=dropout)
        out = weights @ v
        if self.position_kind == "relative":
            term = self.positional.values_term(weights, rel)
            if term is not None:
                out = out + term
        return out


    def _weights(self, scores: torch.Tensor, mask: torch.Tensor | None, *,
                 record: bool | None = None, dropout: float | None = None) -> torch.Tensor:
        """Softmax weights of scores written out (B, H, Lq, Lk): -inf where ``mask`` is
        False, the softmax in fp32, kept in ``last_weights`` when ``record`` (None:
        ``record_weights``), then dropped out at ``dropout`` (None: the attention's own
        in training). What a mechanism that computes its own scores multiplies v by."""
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(scores.dtype)
        if self.record_weights if record is None else record:
            self.last_weights = weights.detach()
        dropout = (self.dropout if self.training else 0.0) if dropout is None else dropout
        if dropout > 0.0:
            weights = nn.functional.dropout(weights, p=dropout)
        return weights


class InsideAttention(nn.Module):
    """Base of rotary, bias and relative positions: ``forward`` (on the embeddings) is
    the identity; the attention calls the kind's own method:

    - ``kind = "rotary"``: ``rotate(x (B, H, L, D), positions (L,)) -> x`` rotated;
    - ``kind = "bias"``: ``bias(rel (Lq, Lk)) -> (H, Lq, Lk)`` added to the scores, where
      ``rel`` is key position minus query position;
    - ``kind = "relative"``: ``scores(q (B, H, Lq, D), rel) -> (B, H, Lq, Lk)`` added to
      the content scores before scaling, and ``values_term(weights (B, H, Lq, Lk), rel)
      -> (B, H, Lq, D)`` added to the output, or None for none (Shaw et al. 2018 add
      both; Transformer-XL only scores). The content scores are
      ``content_query(q)·k``: q itself unless the position adds a bias to the queries
      (Transformer-XL's u);
    - ``kind = "disentangled"``: ``table() -> (R, d_model)``, a vector per clipped
      distance, and ``rows(lq, lk, offset, device) -> (Lq, Lk)`` the row of each query
      (at ``offset`` on) and key; the attention projects the table itself (DeBERTa's
      disentangled attention)."""

    kind: str
    """``rotary``, ``bias``, ``relative`` or ``disentangled``: which method the attention
    calls."""

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x`` unchanged: these positions add nothing to the embeddings."""
        return x

    def content_query(self, q: torch.Tensor) -> torch.Tensor:
        """relative kind: the queries of the content term q·k (q itself by default)."""
        return q
