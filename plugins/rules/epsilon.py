"""Epsilon sampling (Hewitt, Manning and Liang 2022, "Truncation Sampling as Language
Model Desmoothing", sec. 4.1): only tokens at least epsilon probable may be drawn
(transformers' ``EpsilonLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class Epsilon(Rule):
    """A token less than ``epsilon_cutoff`` probable scores -inf; the most likely stays."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        epsilon_cutoff: float = Field(0.0, ge=0, lt=1)

    example = {"epsilon_cutoff": 0.02}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        drop = scores.softmax(-1) < self.settings.epsilon_cutoff
        drop &= scores < scores.amax(-1, keepdim=True)
        return scores.masked_fill_(drop, float("-inf"))
