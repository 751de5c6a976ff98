"""The conformance kit's checks of the block family: encoder and decoder blocks in the
norm placements they declare, masks and a cache."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import nn

from ..cache import KVCache
from ..layer_flow import flow_of
from ..registry import Component
from .contract import D, H, Failed, Seed, Skip, check, close, gradients_reach, shape
from .references import (ReferenceAttention, reference_ffn, reference_flow, reference_kernel,
                         reference_norm)


def _block(component: Component, settings: Any, norm_first: bool) -> nn.Module:
    make_attention = partial(ReferenceAttention, None, d_model=D, n_heads=H,
                             kernel=reference_kernel)
    return component.build(settings, d_model=D, dropout=0.0, norm_first=norm_first,
                           make_attention=make_attention, make_norm=reference_norm,
                           make_ffn=reference_ffn).eval()


@check("block")
def _block_contract(component, settings):
    """encoder: module(x, key_padding_mask) keeps shapes and ignores padded keys;
    decoder: module(x, memory, ...) is causal over x, ignores padded memory, and decodes
    with a cache ({"self": KVCache, "cross": KVCache}) as it computes the whole; causal:
    module(x, key_padding_mask, cache=KVCache) is causal, ignores left padding and decodes
    with a cache as it computes the whole; in each norm placement the block declares
    (``norm_placements``: both by default); gradients reach every parameter."""
    role = component.capabilities.role
    for norm_first in [p == "pre" for p in ("post", "pre")
                       if p in component.capabilities.norm_placements]:
        with Seed(0):
            block = _block(component, settings, norm_first)
            x = torch.randn(2, 6, D)
            where = f"norm_first={norm_first}"
            if role == "encoder":
                pad = torch.zeros(2, 6, dtype=torch.bool)
                pad[0, 4:] = True
                y = x.clone()
                y[0, 4:] += 3.0
                a, b = block(x, key_padding_mask=pad), block(y, key_padding_mask=pad)
                shape(a, (2, 6, D), f"output ({where})")
                close(a[0, :4], b[0, :4], f"real tokens when padded ones change ({where})")
                loss = block(x).square().mean()
            elif role == "causal":
                y = x.clone()
                y[:, 3] += 3.0
                a, b = block(x), block(y)
                shape(a, (2, 6, D), f"output ({where})")
                close(a[:, :3], b[:, :3], f"positions before a changed one ({where})")
                # a prompt padded on the left: its real tokens ignore the padding (what
                # padded queries give, attending to nothing, is not asked)
                pad = torch.zeros(2, 6, dtype=torch.bool)
                pad[1, :2] = True
                z = x.clone()
                z[1, :2] += 3.0
                padded = block(x, key_padding_mask=pad)
                close(block(z, key_padding_mask=pad)[1, 2:], padded[1, 2:],
                      f"real tokens when the padding before them changes ({where})")
                close(padded[0], a[0], f"a row without padding beside a padded one ({where})")
                cache = KVCache()
                steps = torch.cat([block(x[:, t:t + 1], key_padding_mask=pad[:, :t + 1],
                                         cache=cache) for t in range(6)], 1)
                close(steps[0], a[0], f"decoding with a cache ({where})")
                close(steps[1, 2:], padded[1, 2:], f"decoding a padded row with a cache ({where})")
                loss = block(x).square().mean()
            else:
                memory = torch.randn(2, 5, D)
                y = x.clone()
                y[:, 3] += 3.0
                a, b = block(x, memory), block(y, memory)
                shape(a, (2, 6, D), f"output ({where})")
                close(a[:, :3], b[:, :3], f"positions before a changed one ({where})")
                cache = {"self": KVCache(), "cross": KVCache()}
                steps = [block(x[:, t:t + 1], memory, cache=cache) for t in range(6)]
                close(torch.cat(steps, 1), a, f"decoding with a cache ({where})")
                loss = block(x, memory).square().mean()
            gradients_reach(block, loss, f"gradients ({where})")


@check("block")
def _described_flow(component, settings):
    """A block that describes its data flow (``data_flow()``, which zoo's native step runs
    in its place) computes what the description says: its ``forward`` equals the flow
    written out over the block's own modules, in each norm placement it declares. A
    parallel block described as sequential would decode other tokens natively, in
    silence."""
    if not callable(getattr(component.load(), "data_flow", None)):
        raise Skip("describes no data flow")
    role = component.capabilities.role
    for norm_first in [p == "pre" for p in ("post", "pre")
                       if p in component.capabilities.norm_placements]:
        with Seed(0):
            block = _block(component, settings, norm_first)
            flow = flow_of(block, 0)
            if isinstance(flow, str):
                raise Failed(f"data_flow() (norm_first={norm_first}): {flow}")
            x = torch.randn(2, 6, D)
            memory = torch.randn(2, 5, D) if role == "decoder" else None
            with torch.no_grad():
                got = block(x, memory) if role == "decoder" else block(x)
                want = reference_flow(flow, x, memory)
            close(got, want, f"forward against its data_flow() (norm_first={norm_first}, "
                             f"residual={flow.residual!r})")
