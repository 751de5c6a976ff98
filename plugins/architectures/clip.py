"""CLIP (Radford et al. 2021, "Learning Transferable Visual Models From Natural Language
Supervision"): an image tower and a text tower whose vectors, each projected to one
space and normalised, are compared by their cosine; the image's label is the text it is
nearest to (zero-shot classification, :func:`zoo.classify_image`).

The image tower is zoo's ViT (a class token, learned positions, a norm before the
blocks, pre-norm blocks, the class token's normed vector); the text tower is zoo's
encoder made causal (learned positions, pre-norm blocks, a final norm), read at the end
of the text: the first ``eos_id``, or the highest id where ``eos_id`` is None (the first
CLIP configs, whose end token is the last id of the vocabulary). Both are built from
the recipe's components; ``logit_scale`` is the learned temperature, its exponential
multiplying the cosines.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from zoo.plugin_api import Linear, Slot

from .encoder import EncoderSettings, Encoder
from .vit import ViTSettings, VisionTransformer


class CLIPSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: EncoderSettings
    """The text tower: an encoder with ``causal: true``, ``head: hidden``, no pooler."""
    vision: ViTSettings
    """The image tower: a ViT with ``num_classes: 0`` (its pooled vector out)."""
    projection_dim: int = Field(512, gt=0, le=2**16)
    """The width of the shared space."""
    logit_scale: float = Field(2.6592, allow_inf_nan=False)
    """The temperature's logarithm at the start (log(1 / 0.07), the paper's)."""
    eos_id: int | None = Field(None, ge=0)
    """The token whose first place gives the text's vector; None: the highest id's."""


class CLIP(nn.Module):
    """forward(images, tokens, padding_mask=None) -> logits (B images, B texts): the
    cosines of their vectors times exp(logit_scale)."""

    Settings = CLIPSettings
    slots = {
        "attention": Slot("attention", {"causal": True, "padding_mask": True},
                          "the text tower is causal, and skips its padding"),
        "kernel": Slot("kernel", {"causal": True, "arbitrary_mask": True},
                       "causal and padding masks", default="sdpa"),
        "positional": Slot("positional", default="learned"),
        "norm": Slot("norm", default="layernorm"),
        "ffn": Slot("ffn", default="gelu"),
        "block": Slot("block", {"role": "encoder"}, default="encoder"),
    }

    def __init__(self, settings: CLIPSettings, parts) -> None:
        super().__init__()
        s = self.settings = settings
        if not s.text.causal or s.text.head != "hidden" or s.text.pooler:
            raise ValueError("CLIP's text tower is an encoder with causal: true, head: "
                             "hidden and pooler: false")
        if s.vision.num_classes:
            raise ValueError("CLIP's image tower gives its vector: vision num_classes: 0")
        self.text = Encoder(s.text, parts)
        self.vision = VisionTransformer(s.vision, parts)
        self.text_projection = Linear(s.text.d_model, s.projection_dim, bias=False)
        self.visual_projection = Linear(s.vision.d_model, s.projection_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(s.logit_scale))

    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, L) True at the text tower's ``pad_id``, or None without one."""
        return self.text.padding_mask(tokens)

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> (B, projection_dim), not normalised."""
        return self.visual_projection(self.vision(images))

    def text_features(self, tokens: torch.Tensor,
                      padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, L) -> (B, projection_dim), not normalised: the causal tower's
        vector at the end of each text."""
        hidden = self.text.hidden_states(tokens, padding_mask)
        if self.settings.eos_id is None:
            end = tokens.argmax(-1)
        else:
            end = tokens.eq(self.settings.eos_id).int().argmax(-1)
        # gathered, not indexed by arange(B): an exporter keeps the batch dynamic
        at_end = hidden.gather(1, end[:, None, None].expand(-1, 1, hidden.shape[-1]))
        return self.text_projection(at_end.squeeze(1))

    def forward(self, images: torch.Tensor, tokens: torch.Tensor,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """images (Bi, C, H, W), tokens (Bt, L) -> logits (Bi, Bt)."""
        image = nn.functional.normalize(self.image_features(images), dim=-1)
        text = nn.functional.normalize(self.text_features(tokens, padding_mask), dim=-1)
        return image @ text.T * self.logit_scale.exp()
