"""The repetition penalty (Keskar et al. 2019, "CTRL: A Conditional Transformer Language
Model for Controllable Generation", sec. 4.1): each token already in a sequence has its
score divided by the penalty when positive and multiplied when negative, as
transformers' ``RepetitionPenaltyLogitsProcessor``."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class RepetitionPenalty(Rule):
    """Tokens seen before in a row score less (more than 1) or more (less than 1)."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        repetition_penalty: float = Field(1.0, gt=0)

    example = {"repetition_penalty": 1.3}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        penalty = self.settings.repetition_penalty
        seen = scores.gather(1, tokens)
        seen = torch.where(seen < 0, seen * penalty, seen / penalty)
        return scores.scatter_(1, tokens, seen)
