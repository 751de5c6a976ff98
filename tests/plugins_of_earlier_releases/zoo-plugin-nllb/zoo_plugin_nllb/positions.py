"""fairseq's sinusoidal positions, as transformers' M2M100 and NLLB-200 compute them
(``M2M100SinusoidalPositionalEmbedding``, from fairseq's
``SinusoidalPositionalEmbedding``).

The table: half_dim = d / 2 frequencies exp(-i * log(10000) / (half_dim - 1)),
i = 0 .. half_dim - 1; row p is [sin(p * f) | cos(p * f)] (all the sines, then all the
cosines), a zero column after them when d is odd, and the row ``padding_idx`` all
zeros. A sequence's first token takes row padding_idx + 1, the next padding_idx + 2,
and so on.

zoo's ``sinusoidal`` with ``layout: concatenated`` has the same layout but divides by
half_dim instead of half_dim - 1 and counts from row 0, hence this component.

The positional contract of zoo (docs/contract/positional.md, kind ``absolute``) hands
a position module the embeddings, not the token ids, so it cannot see padding: the
tokens are numbered by place. That is transformers' numbering wherever padding comes
after the real tokens (a source padded on the right, a target): the real tokens get
the rows transformers gives them, and a padded place, masked in attention, changes
no real token's output. A source padded on the left is numbered otherwise than
transformers numbers it (transformers counts only the real tokens).
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


def fairseq_table(rows: int, dim: int, padding_idx: int) -> torch.Tensor:
    """(rows, dim) fairseq sinusoid table, row ``padding_idx`` zero.

    Computed on the CPU with the operations transformers uses (so the values are its
    own, bit for bit), then moved to the default device. On the meta device (a model
    built only to be counted) the table is only shaped."""
    if torch.get_default_device().type == "meta":
        return torch.empty(rows, dim)
    cpu = torch.device("cpu")
    half = dim // 2
    step = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.int64, device=cpu).float() * -step)
    angles = (torch.arange(rows, dtype=torch.int64, device=cpu).float().unsqueeze(1)
              * freqs.unsqueeze(0))
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(rows, -1)
    if dim % 2 == 1:
        table = torch.cat([table, torch.zeros(rows, 1, device=cpu)], dim=1)
    if padding_idx < rows:
        table[padding_idx, :] = 0
    return table.to(torch.get_default_device())


class FairseqSinusoidalPositions(nn.Module):
    """Adds fairseq's fixed sinusoids, the first token at row ``padding_idx + 1``; any
    length works (the table grows on demand, as transformers' does)."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")

        padding_idx: int = Field(1, ge=0)
        """The pad token's id: its row of the table is zero and a sequence's positions
        start one after it (M2M100's and NLLB-200's pad is 1)."""

    def __init__(self, settings: Settings, *, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        if d_model < 4:
            raise ValueError(f"fairseq-sinusoidal needs d_model >= 4 (its frequencies divide "
                             f"by d_model // 2 - 1); got {d_model}")
        self.d_model = d_model
        self.padding_idx = settings.padding_idx
        self.register_buffer("table", self._table(self.padding_idx + 1 + max_len),
                             persistent=False)

    def _table(self, rows: int) -> torch.Tensor:
        return fairseq_table(rows, self.d_model, self.padding_idx)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (B, L, d) -> x plus the rows padding_idx + 1 + offset .. of the table."""
        start = self.padding_idx + 1 + offset
        end = start + x.shape[1]
        if end > self.table.shape[0]:
            self.table = self._table(end).to(self.table.device)
        return x + self.table[start:end].to(x.dtype)
