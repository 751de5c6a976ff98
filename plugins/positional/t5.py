"""T5's relative position bias (Raffel et al. 2020, "Exploring the Limits of
Transfer Learning", sec. 2.1).

Each relative distance key - query falls into one of ``num_buckets`` buckets:
the first half of a direction's buckets hold exact small distances, the rest
grow logarithmically up to ``max_distance``, beyond which all distances share
the last bucket. A bidirectional (encoder) scheme gives each direction half the
buckets; a causal (decoder) scheme only looks back. Each bucket has a learned
scalar per head, added to the attention scores. As in T5, one table is shared
by all layers of a stack (the encoder's and the decoder's are separate).
"""

from __future__ import annotations

import math

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from zoo.plugin_api import InsideAttention


def relative_position_bucket(
    rel: torch.Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """Bucket of each relative position ``rel`` = key position - query position."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).long() * num_buckets  # keys after the query
        distance = rel.abs()
    else:
        distance = (-rel).clamp(min=0)  # only keys at or before the query
    max_exact = num_buckets // 2
    exact = distance < max_exact
    scaled = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    far = max_exact + (scaled * (num_buckets - max_exact)).long()
    far = far.clamp(max=num_buckets - 1)
    return buckets + torch.where(exact, distance, far)


class T5RelativeBias(InsideAttention):
    """bias(rel) = table[bucket(rel)] per head."""

    kind = "bias"

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        num_buckets: int = Field(32, ge=2)
        max_distance: int = Field(128, ge=2)

        @model_validator(mode="after")
        def _check(self) -> "T5RelativeBias.Settings":
            if self.max_distance < self.num_buckets // 2:
                raise ValueError(
                    f"max_distance {self.max_distance} must be at least num_buckets / 2 "
                    f"({self.num_buckets // 2}), where the logarithmic buckets start"
                )
            return self

    def __init__(
        self, settings: Settings, *, d_model: int, n_heads: int, max_len: int = 0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        settings = settings or self.Settings()
        self.bidirectional = not causal
        self.num_buckets, self.max_distance = settings.num_buckets, settings.max_distance
        self.relative_attention_bias = nn.Embedding(self.num_buckets, n_heads)
        nn.init.normal_(self.relative_attention_bias.weight, std=d_model**-0.5)

    def bias(self, rel: torch.Tensor) -> torch.Tensor:
        """rel (key - query positions, any shape) -> (H, *rel.shape)."""
        buckets = relative_position_bucket(
            rel, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.relative_attention_bias(buckets).movedim(-1, 0)
