"""What the positions that act inside attention share: nothing is added to the
embeddings, and they are built with the attention's shape."""

from __future__ import annotations

import torch
from torch import nn


class InsideAttention(nn.Module):
    """Base of rotary, bias and relative positions: ``forward`` (on the embeddings) is
    the identity; the attention calls the kind's own method."""

    kind: str

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return x
