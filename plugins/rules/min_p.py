"""Min-p sampling (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling for Creative
and Coherent LLM Outputs"): only tokens at least p times as likely as the most likely may
be drawn (transformers' ``MinPLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class MinP(Rule):
    """A token less than ``min_p`` times the most likely one's probability scores -inf."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        min_p: float | None = Field(None, ge=0, le=1)

    example = {"min_p": 0.1}

    @classmethod
    def wanted(cls, settings: Settings, span) -> bool:
        return bool(settings.min_p)

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        probs = scores.softmax(-1)
        drop = probs < self.settings.min_p * probs.amax(-1, keepdim=True)
        drop.scatter_(-1, probs.argmax(-1, keepdim=True), False)
        return scores.masked_fill_(drop, float("-inf"))
