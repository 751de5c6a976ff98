"""Locally typical sampling (Meister, Pimentel, Wiher and Cotterell 2023, "Locally
Typical Sampling", TACL 11, eq. 6): only the tokens whose surprise ``-log p`` is closest
to the distribution's entropy may be drawn, the fewest such whose probability reaches
``typical_p`` (transformers' ``TypicalLogitsWarper``, tie for tie)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from zoo.plugin_api import Rule


class Typical(Rule):
    """Tokens outside the typical set score -inf; the most typical one always stays."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        typical_p: float = Field(1.0, gt=0, le=1)

    example = {"typical_p": 0.9}

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(scores, dim=-1)
        entropy = -(logp * logp.exp()).nansum(-1, keepdim=True)
        distance, order = (-logp - entropy).abs().sort(dim=-1)
        mass = scores.gather(-1, order).softmax(-1).cumsum(-1)
        # the last token kept is the first whose mass, it included, reaches typical_p
        last = (mass < self.settings.typical_p).sum(-1, keepdim=True)
        last.clamp_(max=distance.shape[-1] - 1)
        drop = distance > distance.gather(-1, last)
        drop[..., 0] = False
        return scores.masked_fill_(drop.scatter(-1, order, drop), float("-inf"))
