"""Nucleus (top-p) sampling (Holtzman et al. 2020, "The Curious Case of Neural Text
Degeneration", sec. 3.1): only the smallest set of most likely tokens whose probability
reaches p may be drawn (transformers' ``TopPLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class TopP(Rule):
    """Outside the nucleus a token scores -inf; the most likely token always stays."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        top_p: float = Field(1.0, gt=0, le=1)

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        ascending, order = scores.sort(dim=-1)
        # a token goes when the less likely ones, it included, hold at most 1 - top_p
        drop = ascending.softmax(-1).cumsum(-1) <= 1 - self.settings.top_p
        drop[..., -1] = False
        return scores.masked_fill_(drop.scatter(-1, order, drop), float("-inf"))
