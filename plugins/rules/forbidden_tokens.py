"""Forbidden tokens: tokens never generated (transformers' ``bad_words_ids`` of one token
each, ``NoBadWordsLogitsProcessor``; Marian forbids its pad token this way)."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class ForbiddenTokens(Rule):
    """Every token of ``forbidden_ids`` scores -inf at every step."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        forbidden_ids: tuple[Annotated[int, Field(ge=0)], ...] = ()

    example = {"forbidden_ids": [3, 7]}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores[:, list(self.settings.forbidden_ids)] = float("-inf")
        return scores
