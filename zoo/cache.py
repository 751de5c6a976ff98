"""Caches for incremental decoding (the ``cache=`` argument of attention)."""

from __future__ import annotations

import torch


class KVCache:
    """What an attention layer keeps between decoding steps.

    Softmax attention keeps keys and values, shaped (B, H, L, D): self-attention
    appends each step's, cross-attention stores the projected memory once.
    Mechanisms with a recurrent state (linear attention, Performer) keep fixed-size
    tensors in ``state`` instead and count positions with :meth:`advance`.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.state: dict[str, torch.Tensor] = {}
        self._seen = 0

    def __len__(self) -> int:
        """Positions seen so far."""
        return self.k.shape[-2] if self.k is not None else self._seen

    @property
    def empty(self) -> bool:
        return self.k is None and not self.state

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is not None:
            k = torch.cat([self.k, k], dim=-2)
            v = torch.cat([self.v, v], dim=-2)
        self.k, self.v = k, v
        return k, v

    def set(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k, self.v = k, v

    def advance(self, n: int) -> None:
        """Count ``n`` more positions (for state-only mechanisms)."""
        self._seen += n

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (beam search)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        self.state = {name: t.index_select(0, index) for name, t in self.state.items()}


class DecoderCache(list):
    """One ``{"self": KVCache, "cross": KVCache}`` per decoder layer."""

    def __init__(self, layers: int) -> None:
        super().__init__({"self": KVCache(), "cross": KVCache()} for _ in range(layers))

    @property
    def offset(self) -> int:
        """How many target positions have been decoded."""
        return len(self[0]["self"]) if self else 0

    def reorder(self, index: torch.Tensor) -> None:
        for layer in self:
            for cache in layer.values():
                cache.reorder(index)
