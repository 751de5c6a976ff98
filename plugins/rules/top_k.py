"""Top-k sampling (Fan, Lewis and Dauphin 2018, "Hierarchical Neural Story Generation",
sec. 5.1): only the k most likely tokens may be drawn (transformers'
``TopKLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class TopK(Rule):
    """Every token less likely than the ``top_k``-th scores -inf."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        top_k: int | None = Field(None, ge=1)

    example = {"top_k": 5}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.settings.top_k >= scores.shape[-1]:
            return scores
        kth = scores.topk(self.settings.top_k, dim=-1).values[..., -1:]
        return scores.masked_fill_(scores < kth, float("-inf"))
