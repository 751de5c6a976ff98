"""The conformance kit's checks of the attention family: shapes, gradients, and each
capability an attention claims (causal, masks, cross-attention, a KV cache that decodes
as the whole, grouped beams, positions inside attention), and grouped-query attention
for those that take ``n_kv_heads``."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..cache import DecoderCache, KVCache
from ..registry import Component
from .contract import D, Failed, H, Seed, Skip, check, close, differs, gradients_reach, shape
from .references import REFERENCE_POSITIONS, reference_kernel


def _attention(component: Component, settings: Any, *, causal: bool = False, cross: bool = False,
               positional: nn.Module | None = None, **width: int) -> nn.Module:
    module = component.build(settings, d_model=D, n_heads=H, kernel=reference_kernel,
                             dropout=0.0, causal=causal, cross=cross, positional=positional,
                             **width)
    return module.eval()


@check("attention")
def _shapes(component, settings):
    """Self-attention maps (B, L, d) to (B, L, d), finite."""
    with Seed(0):
        out = _attention(component, settings)(torch.randn(2, 7, D))
    shape(out, (2, 7, D), "self-attention output")


@check("attention")
def _gradients(component, settings):
    """Every parameter and the input get a gradient."""
    with Seed(0):
        attn = _attention(component, settings, causal=component.capabilities.causal).train()
        x = torch.randn(2, 7, D, requires_grad=True)
        gradients_reach(attn, attn(x).square().mean(), "gradients")
    if x.grad is None or not bool(x.grad.abs().sum() > 0):
        raise Failed("gradients: none reaches the input")


@check("attention", "causal")
def _causal(component, settings):
    """Built with causal=True, position t never sees a later position."""
    with Seed(0):
        attn = _attention(component, settings, causal=True)
        x = torch.randn(2, 9, D)
        y = x.clone()
        y[:, 5] += 1.0
        a, b = attn(x), attn(y)
    close(a[:, :5], b[:, :5], "outputs before a changed position")
    differs(a[:, 5:], b[:, 5:], "outputs at and after a changed position")


@check("attention", "padding_mask")
def _padding_mask(component, settings):
    """Keys marked True in key_padding_mask change nothing (causal or not)."""
    for causal in sorted({False, bool(component.capabilities.causal)}):
        with Seed(0):
            attn = _attention(component, settings, causal=causal)
            x = torch.randn(2, 9, D)
            pad = torch.zeros(2, 9, dtype=torch.bool)
            pad[0, 6:] = True
            y = x.clone()
            y[0, 6:] = torch.randn(3, D) * 5
            a, b = attn(x, key_padding_mask=pad), attn(y, key_padding_mask=pad)
        close(a[0, :6], b[0, :6], f"outputs of real tokens when padded keys change "
                                   f"(causal={causal})")
        close(a[1], b[1], f"outputs of an unpadded row (causal={causal})")


@check("attention", "arbitrary_mask")
def _arbitrary_mask(component, settings):
    """Keys that attn_mask (Lq, Lk, True: may attend) hides change no other output."""
    with Seed(0):
        attn = _attention(component, settings)
        x = torch.randn(2, 9, D)
        allowed = torch.ones(9, 9, dtype=torch.bool)
        allowed[:, 3:5] = False
        allowed[3:5, 3:5] = True  # hidden tokens may still see themselves
        y = x.clone()
        y[:, 3:5] = torch.randn(2, 2, D) * 5
        a, b = attn(x, attn_mask=allowed), attn(y, attn_mask=allowed)
    keep = [i for i in range(9) if i not in (3, 4)]
    close(a[:, keep], b[:, keep], "outputs when keys hidden by attn_mask change")


@check("attention", "cross_attention")
def _cross_attention(component, settings):
    """Built with cross=True, queries (B, Lq, d) attend to a context (B, Lk, d) and its
    padding; the output depends on the context."""
    with Seed(0):
        attn = _attention(component, settings, cross=True)
        x, memory = torch.randn(2, 5, D), torch.randn(2, 8, D)
        out = attn(x, memory)
        other = memory.clone()
        other[:, 2] += 1.0
        changed = attn(x, other)
    shape(out, (2, 5, D), "cross-attention output")
    differs(out, changed, "cross-attention output when the context changes")
    if component.capabilities.padding_mask:
        pad = torch.zeros(2, 8, dtype=torch.bool)
        pad[0, 6:] = True
        noisy = memory.clone()
        noisy[0, 6:] = torch.randn(2, D) * 5
        close(attn(x, noisy, key_padding_mask=pad), attn(x, memory, key_padding_mask=pad),
               "cross-attention output when padded context keys change")


def _decodes_like_the_whole(attn: nn.Module, x: torch.Tensor, what: str) -> None:
    full = attn(x)
    cache = KVCache()
    steps = [attn(x[:, :3], cache=cache)]
    steps += [attn(x[:, t:t + 1], cache=cache) for t in range(3, x.shape[1])]
    close(torch.cat(steps, 1), full, what)
    if len(cache) != x.shape[1]:
        raise Failed(f"{what}: the cache counts {len(cache)} positions after "
                      f"{x.shape[1]}")


@check("attention", "kv_cache")
def _kv_cache(component, settings):
    """Decoding step by step with a KVCache (a prefix, then one token at a time) equals
    the whole sequence at once; for cross-attention too, when claimed."""
    with Seed(0):
        x = torch.randn(2, 8, D)
        if component.capabilities.causal:
            _decodes_like_the_whole(_attention(component, settings, causal=True), x,
                                    "causal self-attention decoded with a KVCache")
        if component.capabilities.cross_attention:
            attn = _attention(component, settings, cross=True)
            memory = torch.randn(2, 6, D)
            cache = KVCache()
            steps = [attn(x[:, t:t + 1], memory, cache=cache) for t in range(8)]
            close(torch.cat(steps, 1), attn(x, memory),
                   "cross-attention decoded with a KVCache")


@check("attention", "kv_cache")
def _grouped_beams(component, settings):
    """Beam search's shared context: a cross-attention cache holding one row per source
    with ``groups`` beams to a row (``KVCache.groups``, set by ``DecoderCache.spread``)
    gives each beam what a cache of one row per beam gives (the grouped path when the
    class sets ``groups_queries``, the base class's repeat otherwise)."""
    if not component.capabilities.cross_attention:
        raise Skip("does not claim cross_attention")
    with Seed(0):
        attn = _attention(component, settings, cross=True)
        memory, beams = torch.randn(2, 6, D), 3
        pad = torch.zeros(2, 6, dtype=torch.bool)
        pad[0, 4:] = True
        x = torch.randn(2 * beams, 1, D)
        layers = DecoderCache(1)
        grouped = layers[0]["cross"]
        attn(x[::beams], memory, key_padding_mask=pad, cache=grouped)  # one row per source
        layers.spread(beams)  # as beam search's first step does
        rows_pad = pad.repeat_interleave(beams, 0)
        out = attn(x, key_padding_mask=rows_pad, cache=grouped)
        expected = attn(x, memory.repeat_interleave(beams, 0), key_padding_mask=rows_pad)
    close(out, expected, "cross-attention over a grouped cache (3 beams per source)")


@check("attention", "positions")
def _positions(component, settings):
    """With each kind of position it claims to apply (rotary, bias, relative), built from
    the kit's reference positions: positions change the output, causal stays causal, and
    cached decoding still equals the whole sequence (the position offset is kept)."""
    caps = component.capabilities
    for kind in caps.positions:
        if kind not in REFERENCE_POSITIONS:
            continue
        with Seed(0):
            positional = REFERENCE_POSITIONS[kind]()
            attn = _attention(component, settings, causal=caps.causal, positional=positional)
            plain = _attention(component, settings, causal=caps.causal)
            plain.load_state_dict(attn.state_dict(), strict=False)
            x = torch.randn(2, 8, D)
            differs(attn(x), plain(x), f"output with {kind} positions vs without")
            if caps.causal:
                y = x.clone()
                y[:, 5] += 1.0
                close(attn(x)[:, :5], attn(y)[:, :5],
                       f"outputs before a changed position, with {kind} positions")
            if caps.kv_cache and caps.causal:
                _decodes_like_the_whole(attn, x, f"decoding with a KVCache and {kind} positions")


def _heads_repeated(grouped: nn.Module, full: nn.Module, groups: int) -> dict[str, torch.Tensor]:
    """``grouped``'s weights in ``full``'s shapes: a tensor that is ``groups`` times longer
    in ``full`` (the keys' and values' projection, ``[k | v]`` of ``n_kv_heads`` heads
    each) has each key/value head repeated for its group of query heads."""
    target = full.state_dict()
    out = {}
    for name, value in grouped.state_dict().items():
        want = target[name].shape
        if value.shape != want:
            heads = value.reshape(2, H // groups, -1, *value.shape[1:])  # [k | v], heads
            value = heads.repeat_interleave(groups, dim=1).reshape(want)
        out[name] = value
    return out


@check("attention")
def _grouped_queries(component, settings):
    """An attention that takes ``n_kv_heads`` (grouped-query attention, Ainslie et al.
    2023) computes what one of ``n_heads`` key/value heads computes when each of its
    key/value heads is repeated for its group of query heads; multi-query (one head)
    included. With a KV cache, the cache keeps ``n_kv_heads`` heads and decoding equals
    the whole."""
    caps = component.capabilities
    with Seed(0):
        try:
            grouped = _attention(component, settings, causal=caps.causal, n_kv_heads=1)
        except (TypeError, ValueError) as exc:  # refused: by Python, or by name
            if "n_kv_heads" not in str(exc):
                raise
            raise Skip("takes no n_kv_heads") from None
        full = _attention(component, settings, causal=caps.causal)
        full.load_state_dict(_heads_repeated(grouped, full, H))
        x = torch.randn(2, 8, D)
        close(grouped(x), full(x), "multi-query attention against its heads repeated")
        if caps.kv_cache and caps.causal:
            _decodes_like_the_whole(grouped, x, "multi-query attention decoded with a KVCache")
            cache = KVCache()
            grouped(x, cache=cache)
            if torch.is_tensor(cache.k) and cache.k.shape[1] != 1:  # (a cache of keys)
                raise Failed(f"multi-query attention's cache keeps {cache.k.shape[1]} key "
                             "heads; it needs only its one")
