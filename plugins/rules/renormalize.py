"""Renormalisation: the scores after the other rules as log-probabilities again
(transformers' ``renormalize_logits``, ``LogitNormalization``), so that beam search ranks
by a distribution that sums to one."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict

from zoo.plugin_api import Rule


class Renormalize(Rule):
    """``log_softmax`` of the scores, after every other rule of its stage."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        renormalize: bool = False

    example = {"renormalize": True}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(scores, dim=-1)
