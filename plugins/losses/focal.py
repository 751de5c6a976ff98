"""Focal loss (Lin et al. 2017, "Focal Loss for Dense Object Detection"), in the
multi-class form “PyTorch实现Transformer：从Self-Attention到实战调优” (sec. 4.2) gives:

    FL = alpha * (1 - p_t)^gamma * CE,     CE = -log p_t,

p_t the predicted probability of the true class. gamma = 0 and alpha = 1 give
cross-entropy; a larger gamma leaves less of the loss to targets already
predicted well, so the rare and the hard ones weigh more.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn


class FocalLoss(nn.Module):
    """module(logits (N, C), target (N,), ignore_index=-100) -> the mean focal loss over
    the targets that are not ``ignore_index``."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        gamma: float = Field(2.0, ge=0.0, le=100.0)
        """Focusing exponent: 0 is cross-entropy (times alpha)."""
        alpha: float = Field(1.0, gt=0.0, le=100.0)
        """Weight of every term (the article's default 1)."""

    def __init__(self, settings: Settings | None = None) -> None:
        super().__init__()
        settings = settings or self.Settings()
        self.gamma, self.alpha = settings.gamma, settings.alpha

    def forward(self, logits: torch.Tensor, target: torch.Tensor,
                ignore_index: int = -100) -> torch.Tensor:
        keep = target != ignore_index
        logits, target = logits.float()[keep], target[keep]
        if target.numel() == 0:  # as cross-entropy: the mean of nothing is NaN
            return logits.sum() * float("nan")
        log_pt = F.log_softmax(logits, dim=-1).gather(-1, target[:, None]).squeeze(-1)
        # (1 - p_t) from log p_t without cancellation when p_t is near 1
        weight = (-torch.expm1(log_pt)).clamp_min(0.0).pow(self.gamma)
        return (self.alpha * weight * -log_pt).mean()
