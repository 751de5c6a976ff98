"""The conformance kit's checks, family by family: each clause of a contract that a
component's capabilities claim (registered in :data:`zoo.kit_base.CHECKS` by
importing this module, which :mod:`zoo.testing` does)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from .cache import DecoderCache, KVCache
from .kit_base import (
    REFERENCE_POSITIONS,
    D,
    H,
    Skip,
    _check,
    _close,
    _differs,
    _Failed,
    _gradients_reach,
    _reference_ffn,
    _ReferenceAttention,
    _reference_norm,
    _Seed,
    _shape,
    reference_kernel,
)
from .registry import Component


# -- attention --------------------------------------------------------------------------------
def _attention(component: Component, settings: Any, *, causal: bool = False, cross: bool = False,
               positional: nn.Module | None = None) -> nn.Module:
    module = component.build(settings, d_model=D, n_heads=H, kernel=reference_kernel,
                             dropout=0.0, causal=causal, cross=cross, positional=positional)
    return module.eval()


@_check("attention")
def _shapes(component, settings):
    """Self-attention maps (B, L, d) to (B, L, d), finite."""
    with _Seed(0):
        out = _attention(component, settings)(torch.randn(2, 7, D))
    _shape(out, (2, 7, D), "self-attention output")


@_check("attention")
def _gradients(component, settings):
    """Every parameter and the input get a gradient."""
    with _Seed(0):
        attn = _attention(component, settings, causal=component.capabilities.causal).train()
        x = torch.randn(2, 7, D, requires_grad=True)
        _gradients_reach(attn, attn(x).square().mean(), "gradients")
    if x.grad is None or not bool(x.grad.abs().sum() > 0):
        raise _Failed("gradients: none reaches the input")


@_check("attention", "causal")
def _causal(component, settings):
    """Built with causal=True, position t never sees a later position."""
    with _Seed(0):
        attn = _attention(component, settings, causal=True)
        x = torch.randn(2, 9, D)
        y = x.clone()
        y[:, 5] += 1.0
        a, b = attn(x), attn(y)
    _close(a[:, :5], b[:, :5], "outputs before a changed position")
    _differs(a[:, 5:], b[:, 5:], "outputs at and after a changed position")


@_check("attention", "padding_mask")
def _padding_mask(component, settings):
    """Keys marked True in key_padding_mask change nothing (causal or not)."""
    for causal in sorted({False, bool(component.capabilities.causal)}):
        with _Seed(0):
            attn = _attention(component, settings, causal=causal)
            x = torch.randn(2, 9, D)
            pad = torch.zeros(2, 9, dtype=torch.bool)
            pad[0, 6:] = True
            y = x.clone()
            y[0, 6:] = torch.randn(3, D) * 5
            a, b = attn(x, key_padding_mask=pad), attn(y, key_padding_mask=pad)
        _close(a[0, :6], b[0, :6], f"outputs of real tokens when padded keys change "
                                   f"(causal={causal})")
        _close(a[1], b[1], f"outputs of an unpadded row (causal={causal})")


@_check("attention", "arbitrary_mask")
def _arbitrary_mask(component, settings):
    """Keys that attn_mask (Lq, Lk, True: may attend) hides change no other output."""
    with _Seed(0):
        attn = _attention(component, settings)
        x = torch.randn(2, 9, D)
        allowed = torch.ones(9, 9, dtype=torch.bool)
        allowed[:, 3:5] = False
        allowed[3:5, 3:5] = True  # hidden tokens may still see themselves
        y = x.clone()
        y[:, 3:5] = torch.randn(2, 2, D) * 5
        a, b = attn(x, attn_mask=allowed), attn(y, attn_mask=allowed)
    keep = [i for i in range(9) if i not in (3, 4)]
    _close(a[:, keep], b[:, keep], "outputs when keys hidden by attn_mask change")


@_check("attention", "cross_attention")
def _cross_attention(component, settings):
    """Built with cross=True, queries (B, Lq, d) attend to a context (B, Lk, d) and its
    padding; the output depends on the context."""
    with _Seed(0):
        attn = _attention(component, settings, cross=True)
        x, memory = torch.randn(2, 5, D), torch.randn(2, 8, D)
        out = attn(x, memory)
        other = memory.clone()
        other[:, 2] += 1.0
        changed = attn(x, other)
    _shape(out, (2, 5, D), "cross-attention output")
    _differs(out, changed, "cross-attention output when the context changes")
    if component.capabilities.padding_mask:
        pad = torch.zeros(2, 8, dtype=torch.bool)
        pad[0, 6:] = True
        noisy = memory.clone()
        noisy[0, 6:] = torch.randn(2, D) * 5
        _close(attn(x, noisy, key_padding_mask=pad), attn(x, memory, key_padding_mask=pad),
               "cross-attention output when padded context keys change")


def _decodes_like_the_whole(attn: nn.Module, x: torch.Tensor, what: str) -> None:
    full = attn(x)
    cache = KVCache()
    steps = [attn(x[:, :3], cache=cache)]
    steps += [attn(x[:, t:t + 1], cache=cache) for t in range(3, x.shape[1])]
    _close(torch.cat(steps, 1), full, what)
    if len(cache) != x.shape[1]:
        raise _Failed(f"{what}: the cache counts {len(cache)} positions after "
                      f"{x.shape[1]}")


@_check("attention", "kv_cache")
def _kv_cache(component, settings):
    """Decoding step by step with a KVCache (a prefix, then one token at a time) equals
    the whole sequence at once; for cross-attention too, when claimed."""
    with _Seed(0):
        x = torch.randn(2, 8, D)
        if component.capabilities.causal:
            _decodes_like_the_whole(_attention(component, settings, causal=True), x,
                                    "causal self-attention decoded with a KVCache")
        if component.capabilities.cross_attention:
            attn = _attention(component, settings, cross=True)
            memory = torch.randn(2, 6, D)
            cache = KVCache()
            steps = [attn(x[:, t:t + 1], memory, cache=cache) for t in range(8)]
            _close(torch.cat(steps, 1), attn(x, memory),
                   "cross-attention decoded with a KVCache")


@_check("attention", "kv_cache")
def _grouped_beams(component, settings):
    """Beam search's shared context: a cross-attention cache holding one row per source
    with ``groups`` beams to a row (``KVCache.groups``, set by ``DecoderCache.spread``)
    gives each beam what a cache of one row per beam gives (the grouped path when the
    class sets ``groups_queries``, the base class's repeat otherwise)."""
    if not component.capabilities.cross_attention:
        raise Skip("does not claim cross_attention")
    with _Seed(0):
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
    _close(out, expected, "cross-attention over a grouped cache (3 beams per source)")


@_check("attention", "positions")
def _positions(component, settings):
    """With each kind of position it claims to apply (rotary, bias, relative), built from
    the kit's reference positions: positions change the output, causal stays causal, and
    cached decoding still equals the whole sequence (the position offset is kept)."""
    caps = component.capabilities
    for kind in caps.positions:
        if kind not in REFERENCE_POSITIONS:
            continue
        with _Seed(0):
            positional = REFERENCE_POSITIONS[kind]()
            attn = _attention(component, settings, causal=caps.causal, positional=positional)
            plain = _attention(component, settings, causal=caps.causal)
            plain.load_state_dict(attn.state_dict(), strict=False)
            x = torch.randn(2, 8, D)
            _differs(attn(x), plain(x), f"output with {kind} positions vs without")
            if caps.causal:
                y = x.clone()
                y[:, 5] += 1.0
                _close(attn(x)[:, :5], attn(y)[:, :5],
                       f"outputs before a changed position, with {kind} positions")
            if caps.kv_cache and caps.causal:
                _decodes_like_the_whole(attn, x, f"decoding with a KVCache and {kind} positions")


# -- kernels ----------------------------------------------------------------------------------
def _kernel(component: Component) -> Callable[..., torch.Tensor]:
    caps = component.capabilities
    if caps.needs_cuda and not torch.cuda.is_available():
        raise Skip("needs a CUDA device")
    if caps.requires_package:
        import importlib.util

        if importlib.util.find_spec(caps.requires_package) is None:
            raise Skip(f"needs the package {caps.requires_package!r}")
    return component.load()


def _qkv(lq: int = 6, lk: int = 9, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(2, H, n, 8, device=device) for n in (lq, lk, lk))


def _device(component: Component) -> str:
    return "cuda" if component.capabilities.needs_cuda else "cpu"


def _agrees(component: Component, what: str, *, lq: int = 6, lk: int = 9,
            extra: Callable[[torch.Tensor], dict] = lambda q: {}) -> None:
    """``fn(q, k, v, **extra(q))`` equals the reference kernel's, on random q, k, v."""
    fn = _kernel(component)
    with _Seed(0):
        q, k, v = _qkv(lq, lk, _device(component))
        kwargs = extra(q)
        _close(fn(q, k, v, **kwargs), reference_kernel(q, k, v, **kwargs), what)


def _allowed(q: torch.Tensor) -> dict:
    allowed = torch.rand(2, 1, 6, 9, device=q.device) > 0.3
    allowed[..., 0] = True  # every query may attend somewhere
    return {"attn_mask": allowed}


@_check("kernel")
def _formula(component, settings):
    """fn(q, k, v) and fn(q, k, v, scale=s) equal softmax(q kᵀ·scale) v."""
    _agrees(component, "fn(q, k, v)")
    _agrees(component, "scale=0.1", extra=lambda q: {"scale": 0.1})


@_check("kernel", "causal")
def _kernel_causal(component, settings):
    """is_causal=True hides later keys (square scores)."""
    _agrees(component, "is_causal=True", lq=6, lk=6, extra=lambda q: {"is_causal": True})


@_check("kernel", "arbitrary_mask")
def _kernel_mask(component, settings):
    """A boolean attn_mask (True: may attend), broadcast over heads, is honoured."""
    _agrees(component, "boolean attn_mask", extra=_allowed)


@_check("kernel", "bias")
def _kernel_bias(component, settings):
    """A float attn_mask is added to the scores (ALiBi, T5 bias)."""
    _agrees(component, "float attn_mask",
            extra=lambda q: {"attn_mask": torch.randn(1, H, 6, 9, device=q.device)})


@_check("kernel", "dropout")
def _kernel_dropout(component, settings):
    """dropout_p > 0 drops attention weights (the output changes); 0 is exact."""
    fn = _kernel(component)
    with _Seed(0):
        q, k, v = _qkv(device=_device(component))
        _close(fn(q, k, v, dropout_p=0.0), reference_kernel(q, k, v), "dropout_p=0.0")
        _differs(fn(q, k, v, dropout_p=0.5), reference_kernel(q, k, v), "dropout_p=0.5")


# -- positions --------------------------------------------------------------------------------
def _positional(component: Component, settings: Any, *, causal: bool = False) -> nn.Module:
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        return component.build(settings, d_model=D, max_len=32)
    return component.build(settings, d_model=D, n_heads=H, max_len=32, causal=causal)


@_check("positional")
def _offset(component, settings):
    """module(x, offset=k) continues the positions of module(x) (absolute, none); a
    position inside attention adds nothing to the embeddings."""
    with _Seed(0):
        module = _positional(component, settings)
        x = torch.randn(2, 10, D)
        full = module(x)
    _shape(full, (2, 10, D), "module(x)")
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        _close(module(x[:, 6:], offset=6), full[:, 6:], "module(x[:, 6:], offset=6)")
    if kind == "absolute":
        _differs(full[:, 0] - x[:, 0], full[:, 1] - x[:, 1], "what two positions add")
    elif kind != "none":
        _close(full, x, "module(x) for a position inside attention")


@_check("positional", "padding_aware")
def _positions_see_padding(component, settings):
    """padding_aware: module(x, offset=, padding_mask=) takes the mask; no padding (an
    all-False mask) changes nothing, and a row's real tokens do not depend on what its
    padding holds."""
    with _Seed(0):
        module = _positional(component, settings)
        x = torch.randn(2, 10, D)
        mask = torch.zeros(2, 10, dtype=torch.bool)
        _close(module(x, offset=2, padding_mask=mask), module(x, offset=2),
               "module(x, offset=2, padding_mask=<no padding>)")
        mask[1, :3] = True  # left padding
        other = x.clone()
        other[1, :3] = torch.randn(3, D)
    _shape(module(x, padding_mask=mask), (2, 10, D), "module(x, padding_mask=mask)")
    _close(module(other, padding_mask=mask)[1, 3:], module(x, padding_mask=mask)[1, 3:],
           "real tokens beside other padding")


@_check("positional")
def _inside_interface(component, settings):
    """rotary: rotate(x, positions) keeps shapes and norms, and q·k depends only on the
    offset; bias: bias(rel) is (H, Lq, Lk); relative: scores, content_query and values_term
    (or None) shapes, and the scores of a query depend only on the offsets."""
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        return
    with _Seed(0):
        module = _positional(component, settings, causal=True)
        if getattr(module, "kind", None) != kind:
            raise _Failed(f"the module's kind is {getattr(module, 'kind', None)!r}, its "
                          f"capabilities say {kind!r}")
        rel = torch.arange(7)[None, :] - torch.arange(2, 7)[:, None]  # (5, 7)
        if kind == "rotary":
            q, k = torch.randn(1, H, 1, D // H), torch.randn(1, H, 1, D // H)
            x = torch.randn(2, H, 5, D // H)
            rotated = module.rotate(x, torch.arange(5))
            _shape(rotated, tuple(x.shape), "rotate(x, positions)")
            _close(rotated.norm(dim=-1), x.norm(dim=-1), "norms after rotate")

            def dot(m: int, n: int) -> torch.Tensor:
                return (module.rotate(q, torch.tensor([m])) *
                        module.rotate(k, torch.tensor([n]))).sum(-1)
            _close(dot(7, 3), dot(4, 0), "q·k at (7, 3) vs (4, 0)")
        elif kind == "bias":
            _shape(module.bias(rel), (H, 5, 7), "bias(rel)")
            blocks = rel.view(1, 5, 7).expand(3, 5, 7)  # sparse mechanisms pass blocks of rel
            _shape(module.bias(blocks), (H, 3, 5, 7), "bias(rel) of a 3-d rel")
        elif kind == "relative":
            q = torch.randn(2, H, 5, D // H)
            scores = module.scores(q, rel)
            _shape(scores, (2, H, 5, 7), "scores(q, rel)")
            _shape(module.content_query(q), (2, H, 5, D // H), "content_query(q)")
            weights = torch.rand(2, H, 5, 7).softmax(-1)
            term = module.values_term(weights, rel)
            if term is not None:
                _shape(term, (2, H, 5, D // H), "values_term(weights, rel)")
            same = torch.randn(2, H, 1, D // H).expand(2, H, 5, D // H)  # one query, moved
            scores = module.scores(same, rel)
            _close(scores[..., 1:, 1:], scores[..., :-1, :-1],
                   "scores(q, rel) of one query at two positions, keys moved with it")


# -- norms and feed-forward networks ------------------------------------------------------------
def _position_wise(module: nn.Module, what: str) -> None:
    with _Seed(0):
        x = torch.randn(2, 6, D)
        y = x.clone()
        y[:, 2] *= 3.0
        y[:, 2] += 1.0
        a, b = module(x), module(y)
    keep = [0, 1, 3, 4, 5]
    _shape(a, (2, 6, D), f"{what}(x)")
    _close(a[:, keep], b[:, keep], f"{what} at other positions when one position changes")


@_check("norm")
def _norm(component, settings):
    """Normalises each position on its own: shape and dtype (fp32, bf16) kept; gradients
    reach every parameter."""
    with _Seed(0):
        norm = component.build(settings, dim=D)
        _position_wise(norm, "norm")
        low = norm.to(torch.bfloat16)(torch.randn(2, 3, D, dtype=torch.bfloat16))
        if low.dtype != torch.bfloat16 or tuple(low.shape) != (2, 3, D):
            raise _Failed(f"norm of a bf16 (2, 3, {D}) input returns {low.dtype} "
                          f"{tuple(low.shape)}, expected torch.bfloat16 of the same shape")
        norm = component.build(settings, dim=D)
        _gradients_reach(norm, norm(torch.randn(2, 3, D)).pow(3).sum(), "gradients")


@_check("ffn")
def _ffn(component, settings):
    """Position-wise: (B, L, d) -> (B, L, d), each position on its own; gradients reach
    every parameter."""
    with _Seed(0):
        ffn = component.build(settings, d_model=D, d_ff=2 * D, dropout=0.0).eval()
        _position_wise(ffn, "ffn")
        ffn = component.build(settings, d_model=D, d_ff=2 * D, dropout=0.0)
        _gradients_reach(ffn, ffn(torch.randn(2, 3, D)).square().sum(), "gradients")


# -- losses -----------------------------------------------------------------------------------
@_check("loss")
def _loss(component, settings):
    """criterion(logits (N, C), target (N,)) is a finite 0-d mean (a batch repeated twice
    gives the same value), accepts bf16 logits, and its gradient reaches the logits."""
    with _Seed(0):
        loss = component.build(settings)
        logits, target = torch.randn(12, 7, requires_grad=True), torch.randint(0, 7, (12,))
        value = loss(logits, target)
        _shape(value, (), "criterion(logits, target)")
        _close(loss(logits.detach().repeat(2, 1), target.repeat(2)), value.detach(),
               "the loss of the batch repeated twice (a mean, not a sum)")
        value.backward()
        if logits.grad is None or not bool(logits.grad.abs().sum() > 0):
            raise _Failed("no gradient reaches the logits")
        _shape(loss(logits.detach().bfloat16(), target).float(), (), "the loss of bf16 logits")


@_check("loss", "ignore_index")
def _loss_ignore_index(component, settings):
    """Targets equal to ``ignore_index`` add nothing: the loss equals the loss over the
    other rows alone, whatever the ignored rows' logits."""
    with _Seed(0):
        loss = component.build(settings)
        logits, target = torch.randn(12, 7), torch.randint(1, 7, (12,))
        target[[2, 5, 6, 11]] = 0
        keep = target != 0
        other = logits.clone()
        other[~keep] = torch.randn(int((~keep).sum()), 7) * 10
        alone = loss(logits[keep], target[keep])
        _close(loss(logits, target, ignore_index=0), alone, "the loss with ignored rows")
        _close(loss(other, target, ignore_index=0), alone,
               "the loss when the ignored rows' logits change")


# -- blocks -----------------------------------------------------------------------------------
def _block(component: Component, settings: Any, norm_first: bool) -> nn.Module:
    make_attention = partial(_ReferenceAttention, None, d_model=D, n_heads=H,
                             kernel=reference_kernel)
    return component.build(settings, d_model=D, dropout=0.0, norm_first=norm_first,
                           make_attention=make_attention, make_norm=_reference_norm,
                           make_ffn=_reference_ffn).eval()


@_check("block")
def _block_contract(component, settings):
    """encoder: module(x, key_padding_mask) keeps shapes and ignores padded keys;
    decoder: module(x, memory, ...) is causal over x, ignores padded memory, and decodes
    with a cache ({"self": KVCache, "cross": KVCache}) as it computes the whole; both
    norm placements; gradients reach every parameter."""
    role = component.capabilities.role
    for norm_first in (False, True):
        with _Seed(0):
            block = _block(component, settings, norm_first)
            x = torch.randn(2, 6, D)
            where = f"norm_first={norm_first}"
            if role == "encoder":
                pad = torch.zeros(2, 6, dtype=torch.bool)
                pad[0, 4:] = True
                y = x.clone()
                y[0, 4:] += 3.0
                a, b = block(x, key_padding_mask=pad), block(y, key_padding_mask=pad)
                _shape(a, (2, 6, D), f"output ({where})")
                _close(a[0, :4], b[0, :4], f"real tokens when padded ones change ({where})")
                loss = block(x).square().mean()
            else:
                memory = torch.randn(2, 5, D)
                y = x.clone()
                y[:, 3] += 3.0
                a, b = block(x, memory), block(y, memory)
                _shape(a, (2, 6, D), f"output ({where})")
                _close(a[:, :3], b[:, :3], f"positions before a changed one ({where})")
                cache = {"self": KVCache(), "cross": KVCache()}
                steps = [block(x[:, t:t + 1], memory, cache=cache) for t in range(6)]
                _close(torch.cat(steps, 1), a, f"decoding with a cache ({where})")
                loss = block(x, memory).square().mean()
            _gradients_reach(block, loss, f"gradients ({where})")
