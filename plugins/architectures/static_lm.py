"""A decoder-only model's decoding steps after its prompts, in zoo's native step.

:class:`zoo.plugin_api.LanguageModelCache` decodes through each attention's ``forward``:
at one prompt a step, its operators and module calls cost about as much as the products.
Once the prompts are read (by the general path, once per prompt), :class:`StaticLM`
takes their keys and values into buffers of fixed size (rows x key/value heads x length x
head width), and every later step runs through all layers in one call of the native step
(``torch.classes.zoo_decoder.Plan`` without cross-attention, :mod:`.native_plan`): the
rotation of queries and keys (RoPE) or a bias of the scores, grouped-query attention,
RMSNorm or LayerNorm, SwiGLU or GELU networks, the prompts' left padding skipped as keys.
Positions on the embeddings (GPT-2's learned ones) are the model's own module, each row
going on from its own count of real tokens.

It runs when every block describes its wiring (``data_flow()``: zoo's ``causal`` and
``sandwich`` blocks, or a plugin's, such as GPT-NeoX's parallel block) and every part of
each layer is one the native step computes; anything else (a sliding
window, another mechanism, recorded maps, training mode, more rows than zoo's native
product takes) decodes by the general path, which gives the same tokens
(``model.static_decoding = False`` forces it).
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.plugin_api import LanguageModelCache, flow_of

from .native_plan import (Refusal, add_layer, for_call, kept_plan, may_run, new_plan, run,
                          seal_kept)
from .static_steps import StaticSteps, attention_refusal


def refusal(model: nn.Module) -> str | None:
    """Why :class:`StaticLM` may not run ``model`` (see the module), or None when every
    block and attention of it may be run."""
    if model.training:
        return "the model is in training mode"
    if not model.decodes_incrementally:
        return "its attention does not decode with a cache"
    for i, block in enumerate(model.layers):
        flow = flow_of(block, i)
        why = flow if isinstance(flow, str) else attention_refusal(i, flow.attention,
                                                                   native_only=True)
        if why is not None:
            return why
    return None


PLAN = "_native_lm_plan"
"""The name the layers' sealed plan is kept by beside the model
(:func:`.native_plan.kept_plan`)."""


def lm_plan(model: nn.Module) -> dict | Refusal:
    """The sealed plan of ``model``'s layers, without buffers (each decoding call gives its
    own: :func:`native_plan`), or the :class:`Refusal` saying why the native step cannot
    run them."""
    plan = new_plan([block.attn for block in model.layers])
    for i, block in enumerate(model.layers):
        flow = flow_of(block, i)  # (refusal() found each block's)
        why = add_layer(plan, attn=flow.attention, cross=None,
                        norms=(flow.norms[0], None, flow.norms[1]), ffn=flow.ffn,
                        norm_first=flow.norm_first, rows=None, after=flow.after,
                        parallel=flow.residual == "parallel")
        if why is not None:
            return why
    return seal_kept(plan, list(model.layers))


def kept(model: nn.Module) -> dict | Refusal:
    """``model``'s plan made once and kept (:func:`lm_plan`), or its :class:`Refusal`."""
    return kept_plan(model, PLAN, lambda: lm_plan(model))


def gate(model: nn.Module) -> dict | Refusal:
    """The decoder-only model's one gate (its ``native_plan()``): the kept plan of its
    layers, or the :class:`Refusal` saying why its steps stay in Python."""
    if not model.static_decoding:
        return Refusal("static_decoding is off")
    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        return Refusal(f"it runs in float32, and the model's weights are {dtype}")
    why = refusal(model)
    return Refusal(why) if why is not None else kept(model)


def native_plan(model: nn.Module, rows: int, k: list, v: list) -> dict | None:
    """The native step's plan of ``model``'s layers for one decoding call of ``rows`` rows
    over its key and value buffers ``k`` and ``v`` (made once and kept: :func:`lm_plan`),
    or None where it cannot run them."""
    return for_call(kept(model), rows, None, k=k, v=v)


class StaticLM(StaticSteps):
    """Next-token logits of ``model``'s rows after the prompts its ``cache`` holds, one
    step at a time, for at most ``length`` more steps, through the kept ``plan`` of its
    layers (:func:`gate`); ``native`` is None when the call's rows are more than a product
    takes natively (the caller then keeps the general path).

    :meth:`__call__` takes the new tokens (rows, 1) and returns logits (rows, 1, vocab);
    :meth:`reorder` keeps rows as a beam search does."""

    def __init__(self, model: nn.Module, cache, *, length: int, plan: dict) -> None:
        super().__init__(model, length)
        first = cache[0]
        self.rows, self.start = first.k.shape[0], cache.offset
        if not self.rows:
            return
        total = self.start + length
        buffers = {"k": [], "v": []}
        for layer_cache in cache:
            for name, filled in (("k", layer_cache.k), ("v", layer_cache.v)):
                buffer = filled.new_empty((*filled.shape[:2], total, filled.shape[-1]))
                buffer[:, :, :self.start] = filled
                buffers[name].append(buffer)
        self.native = for_call(plan, self.rows, None, **buffers)
        if self.native is None:  # more rows than a product takes natively
            return
        # False at the prompts' padding: no later query attends to it
        self.keep = torch.ones(self.rows, total, dtype=torch.bool, device=first.k.device)
        if cache.padding is not None:
            self.keep[:, :self.start] = ~cache.padding
        self.counts = cache.real_counts(self.rows, first.k.device)  # each row's real positions

    def sealed_again(self) -> dict:
        """A plan made again over the same buffers; one ValueError where the native step
        cannot run the layers now (StaticLM has no Python steps to fall back on)."""
        plan = native_plan(self.model, self.rows, self.native["k"], self.native["v"])
        if plan is None:
            raise ValueError("a weight of the model changed during this decoding so that the "
                             "native step cannot run it any more; decode it again")
        return plan

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        m, pos = self.model, self.start + self.next_step()
        x = m._embed_at(tokens, pos, self.counts)
        if not may_run(x):
            raise RuntimeError("StaticLM runs without autograd in fp32 (torch.no_grad(), "
                               "no autocast): decode through zoo.generate, which does")
        x = run(self.current_plan(), x, pos, self_keep=self.keep)
        self.filled += 1
        self.counts = self.counts + 1
        return m.logits(x)

    def buffers(self) -> list[torch.Tensor]:
        return [*self.native["k"], *self.native["v"]]

    def cache(self) -> LanguageModelCache:
        """The keys, values and padding so far as a cache of the general path (a copy), to
        go on from in Python or join other rows to (continuous batching,
        :class:`zoo.decoding.batch.RunningBatch`)."""
        out = LanguageModelCache(len(self.native["k"]))
        n = self.used
        for layer, k, v in zip(out, self.native["k"], self.native["v"]):
            layer.append(k[:, :, :n], v[:, :, :n])
        padding = ~self.keep[:, :n]
        out.padding = padding if bool(padding.any()) else None
        return out

    @property
    def used(self) -> int:
        return self.start + self.filled

    def reorder_rows(self, index: torch.Tensor) -> None:
        self.keep = self.keep.index_select(0, index)
        self.counts = self.counts.index_select(0, index)
