"""Decoding steps of the seq2seq architecture in preallocated buffers, with
self-attention's queries, keys and values in one product.

A decoding step of the general path (:class:`zoo.plugin_api.DecoderCache`, each
attention's ``forward``) is thousands of small operators and module calls: at one
sentence a step, their overhead costs about as much as the products themselves.
When every part of the decoder says it is plain (below), the step is written out
here instead, over the same parameters and modules:

- each layer's self-attention keys and values go into buffers of fixed size,
  allocated once for the longest output (rows x heads x length x head width);
- the queries, keys and values of self-attention come from one product, of a
  weight that joins ``q_proj`` and ``kv_proj`` (made once and kept while those
  weights stay the same; int8 ones join too);
- the encoder's output is projected for cross-attention once, one row per source,
  and the beams of a source attend to it together;
- the scores go through each attention's own ``_dense`` (its scale, its kernel), as
  the general path's ``_attend`` sends them;
- the norms, the feed-forward networks, the embeddings and the output are the
  model's own modules, called as they are.

Where this plugin's C++ step is built (:mod:`.native_step`, by ``zoo native build``), a step
whose layers are all of the kinds it computes (below, :func:`native_plan`: the paper's,
Marian's, BART's and T5's layers) runs through them in one call of the plan's C++ object
(``torch.classes.zoo_decoder.Plan``, made once for the decoder and copied with each
decoding call's buffers): the same operators
in C++, without the Python of each layer, on the same buffers
(``StaticDecoder.native_step = False`` keeps Python).

Plain means: the decoder block's ``forward`` is the paper's layout (``static_layout``,
see :class:`zoo.plugins.blocks.decoder.DecoderBlock`), each attention's ``_attend``
is softmax attention over every key (``softmax_attention``, see
:class:`zoo.plugin_api.MultiHeadAttention`), and positions act on the embeddings, rotate
queries and keys, or add a bias to self-attention's scores (T5's, ALiBi); cross-attention
has none. Anything else (Shaw's relative positions, a mechanism of its own, a sliding
window, recorded attention maps, training mode) decodes by the general path, which gives
the same tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from .native_plan import (Refusal, add_layer, for_call, fused_qkv, kept_plan, may_run, new_plan,
                          refused, run, seal_kept)
from .static_steps import StaticSteps, layer_refusal


def refusal(model: nn.Module) -> str | None:
    """Why :class:`StaticDecoder` may not run ``model``'s decoder (see the module), or
    None when it may."""
    if model.training:
        return "the model is in training mode"
    for i, block in enumerate(model.decoder.layers):
        why = layer_refusal(i, block, (block.self_attn, block.cross_attn))
        if why is not None:
            return why
        if (block.self_attn.position_kind not in (None, "rotary", "bias")
                or block.cross_attn.position_kind is not None):
            return f"layer {i}'s attention holds positions of its own"
    return None


class _Layer:
    """What one decoder layer keeps between steps."""

    def __init__(self, block: nn.Module, memory: torch.Tensor, rows: int, length: int) -> None:
        self.block = block
        k, v = block.cross_attn._keys_values(memory)
        # (sources, heads, source length, head width), laid out once
        self.cross_k, self.cross_v = k.contiguous(), v.contiguous()
        attn = block.self_attn
        shape = (rows, attn.n_kv_heads, length, attn.head_dim)
        self.k = self.cross_k.new_empty(shape)
        self.v = self.cross_v.new_empty(shape)


PLAN = "_native_decoder_plan"
"""The name the decoder's sealed plan is kept by beside its stack
(:func:`.native_plan.kept_plan`)."""


def decoder_plan(decoder: nn.Module) -> dict | Refusal:
    """The sealed plan of the ``decoder`` stack's layers, without buffers (each decoding
    call gives its own: :func:`native_plan`), or the :class:`Refusal` saying why the
    native step may not run them (:mod:`.native_plan` says what it runs)."""
    blocks = list(decoder.layers)
    plan = new_plan([block.self_attn for block in blocks])
    for block in blocks:
        why = add_layer(plan, attn=block.self_attn, cross=block.cross_attn,
                        norms=(block.norm1, block.norm2, block.norm3), ffn=block.ffn,
                        norm_first=block.norm_first, rows=None)
        if why is not None:
            return why
    return seal_kept(plan, blocks, cross=True)


def gate(model: nn.Module) -> dict | Refusal:
    """The seq2seq model's one gate (its ``native_plan()``): the kept plan of its
    decoder's layers, or the :class:`Refusal` saying why its steps stay in Python."""
    why = ("static_decoding is off" if not model.static_decoding else refusal(model)
           or native_refusal(next(model.parameters()).dtype))
    return Refusal(why) if why is not None else kept(model.decoder)


def native_refusal(dtype: torch.dtype) -> str | None:
    """Why a static decoding (which :func:`refusal` allows) keeps its steps in Python
    rather than the native step, for a model computing in ``dtype``, or None."""
    if not StaticDecoder.native_step:
        return "StaticDecoder.native_step is False"
    if dtype != torch.float32:
        return f"it runs in float32, and the model computes in {dtype}"
    return None


def kept(decoder: nn.Module) -> dict | Refusal:
    """The ``decoder`` stack's plan made once and kept (:func:`decoder_plan`), or its
    :class:`Refusal`."""
    return kept_plan(decoder, PLAN, lambda: decoder_plan(decoder))


def native_plan(decoder: nn.Module, layers: list["_Layer"], rows: int,
                keep: torch.Tensor | None, plan: dict | None = None) -> dict | None:
    """The native step's plan of the ``decoder`` stack's layers for one decoding call over
    their buffers ``layers`` (made once and kept: :func:`decoder_plan`), for ``rows`` rows
    (``keep``: the sources' padding; ``plan``: the kept one, when the caller holds it),
    or None when it may not run them."""
    return for_call((plan or kept(decoder)) if rows else None, rows, keep,
                    k=[layer.k for layer in layers], v=[layer.v for layer in layers],
                    cross_k=[layer.cross_k for layer in layers],
                    cross_v=[layer.cross_v for layer in layers])


class StaticDecoder(StaticSteps):
    """Next-token logits, one step at a time, for ``sources`` x ``groups`` rows (the
    beams of each source are consecutive rows), for at most ``length`` steps.

    ``memory`` (sources, Ls, d) is the encoder's output and ``memory_mask`` (sources,
    Ls) True at its padding. :meth:`__call__` takes the new tokens (rows, 1) and
    returns logits (rows, 1, vocab); :meth:`reorder` keeps rows as a beam search does,
    each moved only among the beams of its own source."""

    def __init__(self, model: nn.Module, memory: torch.Tensor,
                 memory_mask: torch.Tensor | None, *, groups: int, length: int) -> None:
        super().__init__(model, length)
        self.groups, self.sources = groups, memory.shape[0]
        self.rows = self.sources * groups
        self.keep = None if memory_mask is None else ~memory_mask[:, None, None, :]
        self.layers = [_Layer(block, memory, self.rows, length)
                       for block in model.decoder.layers]
        # (the model's static_decoder has checked refusal(): the native step's part of the
        # gate is left)
        why = native_refusal(memory.dtype)
        plan = Refusal(why) if why is not None else kept(model.decoder)
        if not plan:
            refused(plan.reason)
        else:
            self.native = native_plan(model.decoder, self.layers, self.rows, self.keep,
                                      plan=plan)

    native_step = True
    """Set False (on the class or one decoder) to keep every step in Python."""

    # -- one step -------------------------------------------------------------------------------
    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        m, pos = self.model, self.next_step()
        x = m._embed(m.tgt_embed, m.decoder, m.positional, tokens, pos)
        plan = self.current_plan()
        if plan is not None and may_run(x):
            x = run(plan, x, pos)
        else:
            for layer in self.layers:
                x = self._layer(layer, x, pos)
        self.filled = pos + 1
        if m.decoder.norm is not None:
            x = m.decoder.norm(x)
        if m.output_scale is not None:
            x = x * m.output_scale
        return m.lm_head(x)

    def _layer(self, layer: _Layer, x: torch.Tensor, pos: int) -> torch.Tensor:
        block = layer.block
        if block.norm_first:
            x = x + self._self_attention(layer, block.norm1(x), pos)
            x = x + self._cross_attention(layer, block.norm2(x))
            return x + block.ffn(block.norm3(x))
        x = block.norm1(x + self._self_attention(layer, x, pos))
        x = block.norm2(x + self._cross_attention(layer, x))
        return block.norm3(x + block.ffn(x))

    def _self_attention(self, layer: _Layer, h: torch.Tensor, pos: int) -> torch.Tensor:
        attn = layer.block.self_attn
        rows, heads, kv_heads, width = h.shape[0], attn.n_heads, attn.n_kv_heads, attn.head_dim
        fused = fused_qkv(attn)  # kept by derived_copy while q and k|v are as they were
        qkv = fused(h) if fused is not None else torch.cat(
            [attn.q_proj(h), attn.kv_proj(h)], -1)
        q = qkv[..., :attn.inner_dim].reshape(rows, heads, width)
        k, v = qkv[..., attn.inner_dim:].reshape(rows, 2, kv_heads, width).unbind(1)
        q, k = q[:, :, None], k[:, :, None]  # (rows, heads, 1, width)
        if attn.position_kind == "rotary":
            at = torch.tensor([pos], device=h.device)
            q, k = attn.positional.rotate(q, at), attn.positional.rotate(k, at)
        layer.k[:, :, pos: pos + 1] = k
        layer.v[:, :, pos: pos + 1] = v[:, :, None]
        out = attn._dense(q, *attn._shared_heads(layer.k[:, :, : pos + 1],
                                                 layer.v[:, :, : pos + 1]), None, offset=pos)
        return attn.out_proj(out.view(rows, 1, attn.inner_dim))

    def _cross_attention(self, layer: _Layer, h: torch.Tensor) -> torch.Tensor:
        attn = layer.block.cross_attn
        s, g, heads, width = self.sources, self.groups, attn.n_heads, attn.head_dim
        # the beams of a source are one longer query sequence over its keys
        q = attn.q_proj(h).view(s, g, heads, width).transpose(1, 2)
        out = attn._dense(q, layer.cross_k, layer.cross_v, self.keep)  # (s, heads, g, width)
        return attn.out_proj(out.transpose(1, 2).reshape(self.rows, 1, attn.inner_dim))

    def sealed_again(self) -> dict | None:
        return native_plan(self.model.decoder, self.layers, self.rows, self.keep)

    def buffers(self) -> list[torch.Tensor]:
        return [buf for layer in self.layers for buf in (layer.k, layer.v)]
