"""The ViT encoder block (Dosovitskiy et al. 2021): always pre-norm, with optional
LayerScale (Touvron et al. 2021) multiplying each residual branch by a learned vector."""

from __future__ import annotations

from typing import Callable

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from .encoder import EncoderBlock


class ViTBlock(EncoderBlock):
    """Pre-norm encoder block; ``layer_scale`` (e.g. 1e-5) adds LayerScale."""

    class Settings(BaseModel):
        model_config = ConfigDict(extra="forbid")
        layer_scale: float | None = Field(None, gt=0.0)

    def __init__(
        self,
        settings: Settings,
        *,
        d_model: int,
        dropout: float,
        norm_first: bool = True,
        make_attention: Callable[..., nn.Module],
        make_norm: Callable[[], nn.Module],
        make_ffn: Callable[[], nn.Module],
        drop_path: float = 0.0,
    ) -> None:
        super().__init__(
            None, d_model=d_model, dropout=dropout, norm_first=True,
            make_attention=make_attention, make_norm=make_norm, make_ffn=make_ffn,
            drop_path=drop_path,
        )
        scale = settings.layer_scale
        self.ls1 = nn.Parameter(torch.full((d_model,), scale)) if scale else None
        self.ls2 = nn.Parameter(torch.full((d_model,), scale)) if scale else None

    def _attend(self, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
        out = super()._attend(x, key_padding_mask)
        return out * self.ls1 if self.ls1 is not None else out

    def _feed(self, x: torch.Tensor) -> torch.Tensor:
        out = super()._feed(x)
        return out * self.ls2 if self.ls2 is not None else out
