"""No repeated n-gram (Paulus et al. 2018, "A Deep Reinforced Model for Abstractive
Summarization", sec. 2.5): a token that would complete an n-gram already in its row
scores -inf, as transformers' ``NoRepeatNGramLogitsProcessor``."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class NoRepeatNGram(Rule):
    """No n-gram of ``no_repeat_ngram_size`` tokens occurs twice in a row."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        no_repeat_ngram_size: int = Field(0, ge=0)

    example = {"no_repeat_ngram_size": 2}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        n, length = self.settings.no_repeat_ngram_size, tokens.shape[1]
        if length + 1 < n:
            return scores
        for row, seq in enumerate(tokens.tolist()):
            prefix = tuple(seq[length - n + 1:]) if n > 1 else ()
            banned = [seq[i + n - 1] for i in range(length - n + 1)
                      if tuple(seq[i:i + n - 1]) == prefix]
            if banned:
                scores[row, banned] = float("-inf")
        return scores
