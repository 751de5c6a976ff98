"""An encoder's pass over a few texts in zoo's native code (``Plan.encode`` of
:mod:`.native_step`, ``csrc/encoder_layers.cpp``): the layers of the decoding step
(:mod:`.native_plan` builds and checks them) run as an encoder's, each token attending to
every real token of its text. Padding is left out: the products, norms and networks take
the real tokens only, and only attention (PyTorch's fused kernel) sees the texts padded;
the output is zero at padding.

It runs where the model's weights are fixed (:func:`zoo.plugin_api.fixed_weights`: each
``zoo.embed`` or ``zoo.rerank`` call of an int8 model, each decoding call of a seq2seq
model, or a caller's own block around many calls), in fp32 inference (eval mode, no
autograd, not inside ``torch.compile``), and where every layer is the paper's encoder layer
(``plain_encoder_layer``) with softmax attention over every token of its text and no
positions inside it (BERT's, DistilBERT's, MiniLM's, XLM-R's: positions are added to the
embeddings), plain norms and a plain network, and each product gives its rows (every
real token of the batch) to zoo's native product. Anything else, and a batch of more real
tokens than the products take or than :data:`MAX_ROWS`, runs in Python.

The sealed plan is kept beside the model (:func:`zoo.plugin_api.derived_copy`) while its
layers' modules and tensors are the ones it was made from, their bytes read again once in
each fixed-weights block; inside a block that has checked it, a call reads only the
tensors' versions (:func:`zoo.plugin_api.held_copy`), so a server's calls inside one
block pay for the plan once. Measured on a 2-core Xeon (Sapphire Rapids class) with the
real all-MiniLM-L6-v2: see docs/bench.md ("An encoder's pass in C++").
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.plugin_api import weights_fixed

from .native_plan import (Refusal, add_layer, declares, kept_plan, may_run, new_plan,
                          refused, seal_kept, takes_rows)
from .static_steps import attention_refusal

PLAN = "_native_encoder_plan"
"""The name the sealed plan is kept by beside the model (:func:`zoo.plugin_api.derived_copy`)."""

LAYER_METHODS = ("forward", "_attend", "_feed")
"""The methods of an encoder layer that a block saying ``plain_encoder_layer`` writes (a
subclass that rewrites one, ViT's with its layer scale, is not run natively)."""

MAX_ROWS = 8192
"""The most real tokens (padding is left out) a native pass takes: the most rows zoo's int8
products take on AMX's tiles (:func:`zoo.native.default_rows`), which bind first elsewhere.
Measured with the real all-MiniLM-L6-v2 in int8 on a 2-core Xeon (Sapphire Rapids class),
one call of ``zoo.embed``'s texts: 32 texts (639 real tokens of 1,056 padded) 23.5 ms
natively against 30 ms in Python, 64 texts 46 against 117 ms, 128 texts 120 against 245 ms.
(When attention ran as the decoding step's loops, torch's fused attention won from about
128 tokens, and this was 128.)"""

def encoder_plan(model: nn.Module) -> dict | Refusal:
    """The sealed plan of ``model``'s encoder layers, or the :class:`Refusal` saying why
    the pass stays in Python. Its ``products`` are the linear layers whose row limits
    a pass must keep (:func:`encode` checks them at each call)."""
    blocks = list(model.layers)
    for i, block in enumerate(blocks):
        why = None
        if not all(declares(block, "plain_encoder_layer", method) for method in LAYER_METHODS):
            why = f"layer {i}'s block ({type(block).__name__}) is not the paper's encoder layer"
        elif getattr(block.attn, "causal", False):
            why = f"layer {i}'s attention is causal"
        elif not all(hasattr(n, "weight") for n in (block.norm1, block.norm2)):
            why = f"layer {i} has no norm before or after a sublayer"
        else:
            why = attention_refusal(i, block.attn)
            if why is None and block.attn.position_kind is not None:
                why = f"layer {i} puts positions inside its attention"
        if why:
            return Refusal(f"{why} (an encoder's pass)")
    plan = new_plan([block.attn for block in blocks])
    for block in blocks:
        why = add_layer(plan, attn=block.attn, cross=None, norms=(block.norm1, None, block.norm2),
                        ffn=block.ffn, norm_first=block.norm_first, rows=None)
        if why is not None:
            return why
    return seal_kept(plan, blocks)


def encode(model: nn.Module, x: torch.Tensor,
           padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``x`` (B, L, d), the embeddings, through every layer of ``model`` in zoo's native
    code (``padding_mask`` (B, L) True at padding; the output is zero there), or None where
    the pass stays in Python (see the module)."""
    if (x.device.type != "cpu" or model.training or torch.compiler.is_compiling()
            or not may_run(x) or not model.layers or not weights_fixed(model.layers[0])):
        return None  # (before the tokens are counted: a traced graph reads no sizes)
    rows = x.shape[0] * x.shape[1] - (0 if padding_mask is None else int(padding_mask.sum()))
    if not 0 < rows <= MAX_ROWS:
        return None
    plan = kept_plan(model, PLAN, lambda: encoder_plan(model))
    if not plan:
        refused(plan.reason)
        return None
    if not takes_rows(plan, rows):
        return None
    keep = (torch.ones(x.shape[:2], dtype=torch.bool) if padding_mask is None
            else ~padding_mask)
    return plan["op"].encode(x.contiguous(), keep)
