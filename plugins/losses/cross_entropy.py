"""Cross-entropy against one-hot targets, optionally smoothed: the target puts
1 - eps on the true class and eps / C on every class (Szegedy et al. 2016;
Vaswani et al. 2017, sec. 5.4, with eps = 0.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class CrossEntropy(nn.Module):
    """module(logits (N, C), target (N,), ignore_index=-100) -> the mean over the targets
    that are not ``ignore_index``."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        label_smoothing: float = Field(0.0, ge=0.0, lt=1.0)
        """eps: the share of the target spread evenly over all classes."""

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        self.label_smoothing = (settings or self.Settings()).label_smoothing

    def forward(self, logits: torch.Tensor, target: torch.Tensor,
                ignore_index: int = -100) -> torch.Tensor:
        return F.cross_entropy(logits.float(), target, ignore_index=ignore_index,
                               label_smoothing=self.label_smoothing)
