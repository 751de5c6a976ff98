"""The two rules: transformers' SuppressTokensLogitsProcessor and
SuppressTokensAtBeginLogitsProcessor, with the same arithmetic (a suppressed token
scores -inf; an id past the vocabulary is left alone, as ``torch.isin`` there leaves
it)."""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule, Span

NEVER = float("-inf")


def suppress(scores: torch.Tensor, ids: tuple[int, ...]) -> torch.Tensor:
    """``scores`` (N, V) with the columns of ``ids`` (those inside the vocabulary) -inf."""
    inside = [i for i in ids if i < scores.shape[-1]]
    if inside:
        scores[:, inside] = NEVER
    return scores


class SuppressTokens(Rule):
    """Every token of ``suppress_tokens`` scores -inf at every step."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        suppress_tokens: tuple[Annotated[int, Field(ge=0)], ...] | None = None
        """Tokens never generated (transformers' ``suppress_tokens``; None: none)."""

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return suppress(scores, self.settings.suppress_tokens or ())


class BeginSuppressTokens(Rule):
    """Every token of ``begin_suppress_tokens`` scores -inf at the first generated step:
    right after the start token or the prompt, or one step later when a one-token start
    is followed by a forced first token (``forced_bos_id``), as transformers'
    ``generate`` places its ``begin_index``."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        begin_suppress_tokens: tuple[Annotated[int, Field(ge=0)], ...] | None = None
        """Tokens not generated first (transformers' ``begin_suppress_tokens``)."""
        forced_bos_id: int | None = Field(None, ge=0)
        """zoo's own setting, read to place the first step as transformers does."""

    @classmethod
    def wanted(cls, settings: Settings, span: Span) -> bool:
        return settings.begin_suppress_tokens is not None

    def __init__(self, settings: Settings, span: Span) -> None:
        super().__init__(settings, span)
        forced = span.start <= 1 and settings.forced_bos_id is not None
        self.begin = span.start + 1 if forced else span.start

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] == self.begin:
            scores = suppress(scores, self.settings.begin_suppress_tokens or ())
        return scores
