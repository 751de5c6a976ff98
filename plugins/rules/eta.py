"""Eta sampling (Hewitt, Manning and Liang 2022, "Truncation Sampling as Language Model
Desmoothing", sec. 4.2): only tokens at least ``min(eta, sqrt(eta) * exp(-entropy))``
probable may be drawn, a cutoff that falls as the distribution spreads (transformers'
``EtaLogitsWarper``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class Eta(Rule):
    """A token under the entropy-dependent cutoff scores -inf; the most likely stays."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        eta_cutoff: float = Field(0.0, ge=0, lt=1)

    example = {"eta_cutoff": 0.02}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        eta = torch.tensor(self.settings.eta_cutoff, device=scores.device)
        entropy = torch.distributions.Categorical(logits=scores).entropy()
        cutoff = torch.min(eta, eta.sqrt() * torch.exp(-entropy))[..., None]
        drop = scores.softmax(-1) < cutoff
        drop &= scores < scores.amax(-1, keepdim=True)
        return scores.masked_fill_(drop, float("-inf"))
