"""A forced last token: the token a sequence ends with when it reaches the maximum length
(transformers' ``ForcedEOSTokenLogitsProcessor``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class ForcedEOS(Rule):
    """At the last step every token but ``forced_eos_id`` scores -inf, it 0."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        forced_eos_id: int | None = Field(None, ge=0)

    example = {"forced_eos_id": 2}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] == self.span.max_length - 1:
            scores.fill_(float("-inf"))
            scores[:, self.settings.forced_eos_id] = 0.0
        return scores
