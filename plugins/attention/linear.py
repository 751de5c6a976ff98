"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs").

softmax similarity replaced by phi(q) . phi(k) with phi(x) = elu(x) + 1, which
makes attention O(L) in time and memory; causal attention by prefix sums, and
decoding with the recurrent state (S, z): O(1) work per new token.
"""

from __future__ import annotations

import torch
from pydantic import Field

from zoo.plugin_api import AttentionSettings
from ._linear import FeatureMapAttention


class LinearAttentionSettings(AttentionSettings):
    chunk_size: int = Field(64, ge=1)
    """Causal: positions computed together (memory chunk^2, work the same)."""


class LinearAttention(FeatureMapAttention):
    Settings = LinearAttentionSettings

    def __init__(self, settings: LinearAttentionSettings | None, **kwargs) -> None:
        settings = settings or LinearAttentionSettings()
        super().__init__(settings, **kwargs)
        self.chunk_size = settings.chunk_size

    def _features(self, x, is_query, mask=None, cache=None) -> torch.Tensor:
        return torch.nn.functional.elu(x) + 1.0
