"""A minimum length: no end token before it (transformers' ``MinLengthLogitsProcessor``
and ``MinNewTokensLengthLogitsProcessor``; the span counts the sequences' first tokens,
so both settings are one rule)."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule, Span


class MinLength(Rule):
    """The end tokens score -inf while a sequence is shorter than its minimum length."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        eos_ids: tuple[Annotated[int, Field(ge=0)], ...] = ()
        min_length: int = Field(0, ge=0)  # (both read through the span, which counts them)
        min_new_tokens: int | None = Field(None, ge=0)

    example = {"eos_ids": [2], "min_length": 8}

    @classmethod
    def wanted(cls, settings: Settings, span: Span) -> bool:
        return span.min_length > span.start and bool(settings.eos_ids)

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] < self.span.min_length:
            for eos in self.settings.eos_ids:  # (a list index costs a tensor at every step)
                scores[:, eos] = float("-inf")
        return scores
