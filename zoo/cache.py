"""Caches for incremental decoding (the ``cache=`` argument of attention)."""

from __future__ import annotations

import torch


class KVCache:
    """What an attention layer keeps between decoding steps.

    Softmax attention keeps keys and values, shaped (B, H, L, D): self-attention
    appends each step's, cross-attention stores the projected memory once.
    Appending writes into a buffer that grows by doubling, so a step costs the new
    token, not a copy of everything before it; ``k`` and ``v`` are views of the
    filled part. Mechanisms with a recurrent state (linear attention, Performer) keep
    fixed-size tensors in ``state`` instead and count positions with :meth:`advance`.
    """

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self._len = 0
        self.fixed = False
        """Set by :meth:`set`: the keys and values of a fixed context (cross-attention)."""
        self.groups = 1
        """Of a fixed context: each of its rows serves this many consecutive query rows
        (the beams of one source share its encoder output; :meth:`DecoderCache.spread`)."""
        self.state: dict[str, torch.Tensor] = {}
        self._seen = 0

    @property
    def k(self) -> torch.Tensor | None:
        """The keys so far, (B, H, L, D), or None."""
        return None if self._k is None else self._k[..., : self._len, :]

    @property
    def v(self) -> torch.Tensor | None:
        """The values so far, (B, H, L, D), or None."""
        return None if self._v is None else self._v[..., : self._len, :]

    def __len__(self) -> int:
        """Positions seen so far."""
        return self._len if self._k is not None else self._seen

    @property
    def empty(self) -> bool:
        """True before anything was stored."""
        return self._k is None and not self.state

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add this step's keys and values; returns all of them so far."""
        new = k.shape[-2]
        if self._k is None or self._len + new > self._k.shape[-2]:
            capacity = max(16, 2 * (self._len + new))
            self._k, self._v = self._grow(self._k, k, capacity), self._grow(self._v, v, capacity)
        self._k[..., self._len: self._len + new, :] = k
        self._v[..., self._len: self._len + new, :] = v
        self._len += new
        return self.k, self.v

    def _grow(self, old: torch.Tensor | None, like: torch.Tensor, capacity: int) -> torch.Tensor:
        buf = like.new_empty((*like.shape[:-2], capacity, like.shape[-1]))
        if old is not None:
            buf[..., : self._len, :] = old[..., : self._len, :]
        return buf

    def set(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep the keys and values of a fixed context, laid out contiguously once (every
        later step reads them)."""
        self._k, self._v = k.contiguous(), v.contiguous()
        self._len, self.fixed, self.groups = k.shape[-2], True, 1

    def ungroup(self) -> None:
        """Give a grouped fixed context one row per query row (each row repeated
        ``groups`` times), for an attention that cannot share it across a group."""
        if self.groups > 1 and self._k is not None:
            self.set(self._k.repeat_interleave(self.groups, 0),
                     self._v.repeat_interleave(self.groups, 0))
        self.groups = 1

    def _reorder_moved(self, index: torch.Tensor) -> bool:
        """Copy in place only the rows that ``index`` moves, when it keeps the row count
        and moves fewer than half of them; False (nothing done) otherwise."""
        rows = self._k.shape[0]
        if index.numel() != rows or index.device.type != "cpu":
            return False
        moved = (index != torch.arange(rows, device=index.device)).nonzero().flatten()
        if 2 * moved.numel() >= rows:
            return False
        if moved.numel():
            sources = index.index_select(0, moved)
            for filled in (self.k, self.v):
                # read every source row before writing any (a row may be both)
                filled.index_copy_(0, moved, filled.index_select(0, sources))
        return True

    def advance(self, n: int) -> None:
        """Count ``n`` more positions (for state-only mechanisms)."""
        self._seen += n

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam search). When the rows stay as many and fewer
        than half of them move (a beam search's usual step), only the moved rows are
        copied; otherwise the filled part is gathered into a second buffer of the same
        size, which then becomes the first."""
        if self._k is not None:
            if self.fixed:
                self.ungroup()
                self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
            elif not self._reorder_moved(index):
                spare_k, spare_v = self.__dict__.pop("_spare", (None, None))
                shape = (index.numel(), *self._k.shape[1:])
                if spare_k is None or spare_k.shape != shape:
                    spare_k, spare_v = self._k.new_empty(shape), self._v.new_empty(shape)
                n = self._len
                torch.index_select(self.k, 0, index, out=spare_k[..., :n, :])
                torch.index_select(self.v, 0, index, out=spare_v[..., :n, :])
                self._spare = (self._k, self._v)
                self._k, self._v = spare_k, spare_v
        self.state = {name: t.index_select(0, index) for name, t in self.state.items()}


class DecoderCache(list):
    """One ``{"self": KVCache, "cross": KVCache}`` per decoder layer."""

    def __init__(self, layers: int) -> None:
        super().__init__({"self": KVCache(), "cross": KVCache()} for _ in range(layers))

    @property
    def offset(self) -> int:
        """How many target positions have been decoded."""
        return len(self[0]["self"]) if self else 0

    def spread(self, beams: int) -> None:
        """Make ``beams`` rows of every row (a beam search's first step, run once per
        source): the decoder's own caches are copied; the fixed contexts stay one row
        per source and serve its ``beams`` rows as a group (:attr:`KVCache.groups`)."""
        for layer in self:
            for cache in layer.values():
                if cache.fixed:
                    cache.groups *= beams
                elif not cache.empty:
                    like = cache._k if cache._k is not None else next(iter(cache.state.values()))
                    rows = torch.arange(like.shape[0], device=like.device)
                    cache.reorder(rows.repeat_interleave(beams))

    def reorder(self, index: torch.Tensor, *, within_groups: bool = False) -> None:
        """Keep batch rows ``index``. With ``within_groups`` (beam search: each row moves
        only among the beams of its own source) the caches of a fixed context, equal
        across a group, are left as they are."""
        for layer in self:
            for cache in layer.values():
                if not (within_groups and cache.fixed):
                    cache.reorder(index)


class LanguageModelCache(list):
    """One :class:`KVCache` per layer of a decoder-only model, and which of the positions
    so far are padding (a batch of prompts padded on the left): every later step's
    queries skip those keys, and positions that count real tokens go on from each
    row's own count."""

    def __init__(self, layers: int) -> None:
        super().__init__(KVCache() for _ in range(layers))
        self.padding: torch.Tensor | None = None
        """(B, L) True at the padded positions so far; None while there is none."""

    @property
    def offset(self) -> int:
        """How many positions (padding included) each row holds."""
        return len(self[0]) if self else 0

    def keys_padding(self, new: torch.Tensor | None, rows: int, length: int,
                     device) -> torch.Tensor | None:
        """Record the padding of ``length`` new positions (``new`` (B, length), None: no
        padding) and return the padding of every key so far (None: no padding)."""
        if new is None and self.padding is None:
            return None
        if new is None:
            new = torch.zeros(rows, length, dtype=torch.bool, device=device)
        if self.padding is None:
            self.padding = torch.zeros(rows, self.offset, dtype=torch.bool, device=device)
        self.padding = torch.cat([self.padding, new], dim=1)
        return self.padding

    def real_counts(self, rows: int, device) -> torch.Tensor:
        """(B,) how many real (not padded) positions each row holds so far."""
        if self.padding is None:
            return torch.full((rows,), self.offset, dtype=torch.long, device=device)
        return (~self.padding).sum(1)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam search, or a first step spread over beams)."""
        for cache in self:
            cache.reorder(index)
        if self.padding is not None:
            self.padding = self.padding.index_select(0, index)

    @property
    def joinable(self) -> bool:
        """Whether :meth:`join` can take this cache's rows: every layer keeps keys and
        values (softmax attention), none a recurrent state, none a fixed context."""
        return all(isinstance(c, KVCache) and not c.state and not c.fixed for c in self)

    @property
    def rows(self) -> int:
        """How many rows (sequences) the cache holds."""
        first = self[0] if self else None
        if first is not None and first._k is not None:
            return first._k.shape[0]
        return 0 if self.padding is None else self.padding.shape[0]

    def join(self, other: LanguageModelCache) -> None:
        """Add ``other``'s rows after this cache's (continuous batching: prompts read
        apart, padded on the left to this cache's length, join the running rows between
        two steps). Both must be :attr:`joinable`, of the same layers and as long: a
        position means the same in every row (rotary keys are turned by it)."""
        if len(other) != len(self) or not (self.joinable and other.joinable):
            raise ValueError("only caches of the same layers' keys and values join")
        if other.offset != self.offset:
            raise ValueError(f"a cache of {other.offset} positions cannot join one of "
                             f"{self.offset}: pad the shorter prompts on the left")
        masks = [c.padding if c.padding is not None else
                 torch.zeros(c.rows, c.offset, dtype=torch.bool, device=c[0]._k.device)
                 for c in (self, other)]
        self.padding = torch.cat(masks) if any(c.padding is not None for c in (self, other)) \
            else None
        for mine, theirs in zip(self, other):
            mine._k, mine._v = torch.cat([mine.k, theirs.k]), torch.cat([mine.v, theirs.v])
            mine.__dict__.pop("_spare", None)

    def shift(self, delta: int, turns: list) -> None:
        """Pad every row on the left by ``delta`` positions (recorded as padding), so
        that longer rows may join: layer i's keys pass through ``turns[i]`` (a function
        ``(k, delta) -> k``: :meth:`zoo.attention.MultiHeadAttention.shifted_keys`, which
        turns rotary keys to their new positions)."""
        if not self.joinable or len(turns) != len(self):
            raise ValueError("only the keys and values of every layer shift")
        rows, device = self.rows, self[0]._k.device
        padding = self.padding if self.padding is not None else torch.zeros(
            rows, self.offset, dtype=torch.bool, device=device)
        self.padding = torch.nn.functional.pad(padding, (delta, 0), value=True)
        for cache, turn in zip(self, turns):
            k = torch.nn.functional.pad(turn(cache.k, delta), (0, 0, delta, 0))
            v = torch.nn.functional.pad(cache.v, (0, 0, delta, 0))
            cache._k, cache._v, cache._len = k, v, k.shape[-2]
            cache.__dict__.pop("_spare", None)

    def spread(self, beams: int) -> None:
        """Make ``beams`` rows of every row (a prompt read once per source)."""
        like = next((t for c in self for t in (c._k, *c.state.values()) if t is not None),
                    self.padding)
        if like is None:
            return
        rows = torch.arange(like.shape[0], device=like.device)
        self.reorder(rows.repeat_interleave(beams))
