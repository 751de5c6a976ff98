"""A forced first token: the token right after the start token (BART's and mBART-50's
language token; transformers' ``ForcedBOSTokenLogitsProcessor``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class ForcedBOS(Rule):
    """At the first step every token but ``forced_bos_id`` scores -inf, it 0."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        forced_bos_id: int | None = Field(None, ge=0)

    example = {"forced_bos_id": 5}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] == self.span.start:
            scores.fill_(float("-inf"))
            scores[:, self.settings.forced_bos_id] = 0.0
        return scores
