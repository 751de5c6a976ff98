"""Performer's FAVOR+ attention (Choromanski et al. 2021, "Rethinking Attention
with Performers", sec. 2-3).

exp(q . k / sqrt(d)) is estimated without bias by phi(q) . phi(k) with positive
random features phi(x) = exp(w_i . x - |x|^2 / 2) / sqrt(m), the m rows w_i drawn
orthogonal in blocks (and rescaled to Gaussian norms), so attention costs O(L m).
More features, smaller error. Causal attention by prefix sums, decoding with a
recurrent state. ``redraw_interval`` draws new features every so many training
steps, as the paper does; the features are a buffer, saved with the weights.

For numerical range, key features are divided by exp of their largest logit (a
constant that cancels between numerator and denominator); while decoding the
state is rescaled whenever a new key raises that maximum.
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from zoo.plugin_api import AttentionSettings
from ._linear import FeatureMapAttention, causal_linear_attention, linear_attention


def orthogonal_features(m: int, d: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(m, d) random features, orthogonal within each block of d rows, with the row
    norms of Gaussian vectors (the paper's positive orthogonal random features)."""
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, _ = torch.linalg.qr(torch.randn(d, d, generator=generator))
        blocks.append(q.T)
    norms = torch.randn(m, d, generator=generator).norm(dim=1, keepdim=True)
    return torch.cat(blocks)[:m] * norms


def favor_features(
    x: torch.Tensor, projection: torch.Tensor, *, is_query: bool,
    keep: torch.Tensor | None = None, shift: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive random features of x (B, H, L, d), already scaled by d^-1/4. Returns the
    features (B, H, L, m) and the shift subtracted from their logits."""
    logits = x @ projection.T - x.square().sum(-1, keepdim=True) / 2
    if is_query:
        shift = logits.amax(-1, keepdim=True).detach()
    elif shift is None:
        seen = logits if keep is None else logits.masked_fill(~keep, float("-inf"))
        shift = seen.amax(dim=(-2, -1), keepdim=True).detach()
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return torch.exp(logits - shift) / math.sqrt(projection.shape[0]), shift


def favor_attention(q, k, v, projection, *, causal: bool = False) -> torch.Tensor:
    """FAVOR+ estimate of softmax(q k^T / sqrt(d)) v for (B, H, L, d) tensors."""
    scale = q.shape[-1] ** -0.25
    phi_q, _ = favor_features(q * scale, projection, is_query=True)
    phi_k, _ = favor_features(k * scale, projection, is_query=False)
    if causal:
        return causal_linear_attention(phi_q, phi_k, v)[0]
    return linear_attention(phi_q, phi_k, v)


class PerformerSettings(AttentionSettings):
    features: int | None = Field(None, ge=1)
    """Random features m; default head_dim * ln(head_dim), as in the paper's code."""
    redraw_interval: int | None = Field(None, ge=1)
    """Draw new features every this many training forward calls (None: never)."""
    chunk_size: int = Field(64, ge=1)


class PerformerAttention(FeatureMapAttention):
    Settings = PerformerSettings

    def __init__(self, settings: PerformerSettings | None, **kwargs) -> None:
        settings = settings or PerformerSettings()
        super().__init__(settings, **kwargs)
        d = self.head_dim
        m = settings.features or max(1, round(d * math.log(d)))
        self.chunk_size, self.redraw_interval = settings.chunk_size, settings.redraw_interval
        self.register_buffer("projection", orthogonal_features(m, d))
        self._calls = 0

    @torch.no_grad()
    def redraw(self, generator: torch.Generator | None = None) -> None:
        """Draw a new set of random features."""
        m, d = self.projection.shape
        self.projection.copy_(orthogonal_features(m, d, generator))

    def forward(self, x, context=None, **kwargs):
        if self.training and self.redraw_interval:
            if self._calls and self._calls % self.redraw_interval == 0:
                self.redraw()
            self._calls += 1
        return super().forward(x, context, **kwargs)

    def _features(self, x, is_query, mask=None, cache=None) -> torch.Tensor:
        x = x * self.head_dim**-0.25
        projection = self.projection.float()
        if is_query or cache is None:
            return favor_features(x, projection, is_query=is_query, keep=mask)[0]
        # decoding: one shift for all keys so far; raise it (and rescale the state) as needed
        _, shift = favor_features(x, projection, is_query=False, keep=mask)
        if "shift" in cache.state:
            old = cache.state["shift"]
            new = torch.maximum(old, shift)
            factor = torch.exp(old - new)  # (B, H, 1, 1)
            cache.state["s"] = cache.state["s"] * factor
            cache.state["z"] = cache.state["z"] * factor[..., 0]
            shift = new
        cache.state["shift"] = shift
        return favor_features(x, projection, is_query=False, shift=shift)[0]
