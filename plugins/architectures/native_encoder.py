"""An encoder's pass over a few texts in zoo's native code (``Plan.encode`` of
:mod:`.native_step`, ``csrc/encoder_layers.cpp``): the layers of the decoding step
(:mod:`.native_plan` builds and checks them) run as an encoder's, each token attending to
every real token of its text. Padding is left out: the products, norms and networks take
the real tokens only, attention each text's own (``csrc/packed_attention.cpp``); the
output is zero at padding.

It runs where the model's weights are fixed (:func:`zoo.plugin_api.fixed_weights`: each
``zoo.embed`` or ``zoo.rerank`` call of an int8 model, each decoding call of a seq2seq
model, or a caller's own block around many calls), in fp32 inference (eval mode, no
autograd, not inside ``torch.compile``), and where every layer is the paper's encoder layer
(``plain_encoder_layer``) with softmax attention over every token of its text and no
positions inside it (BERT's, DistilBERT's, MiniLM's, XLM-R's: positions are added to the
embeddings), plain norms and a plain network, and each product gives its rows (every
real token of the batch, or :data:`LEVEL_ROWS` of a larger batch) to zoo's native product.
Anything else, and a batch of more real tokens than :data:`MAX_ROWS`, runs in Python.

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
products take on AMX's tiles (:func:`zoo.native.default_rows`). Measured with the real
all-MiniLM-L6-v2 in int8 on a 2-core Xeon (Sapphire Rapids class), one call of
``zoo.embed``'s texts: 32 texts (639 real tokens of 1,056 padded) 23.5 ms natively against
30 ms in Python, 64 texts 46 against 117 ms, 128 texts 120 against 245 ms."""

LEVEL_ROWS = 128
"""A pass of more real tokens than this runs natively where every product gives this many
rows to zoo's native product (:func:`zoo.native.default_rows`: 128 on AVX2 and on Intel's
AVX-512, 8,192 on AMX's tiles; AMD's AVX-512 int8 gives 4, and its pass of more stays in
Python, on FBGEMM's product). From about 128 rows zoo's products run at the rate they keep
for thousands, at or above the library's product of the same rows (measured on a 2-core
AVX2 EPYC with all-MiniLM-L6-v2's four products: fp32 1.05 to 1.06x oneDNN's from 320 to
1,056 rows, int8 0.92 to 1.13x FBGEMM's), and a pass that leaves out padding multiplies
fewer rows: 639 for 32 sentences, where the Python layers multiply 1,056. On that EPYC, in
one run of ``python benchmarks/encoder_pass.py`` (a slow hour), 32 sentences took 258 ms
in Python in fp32 and 150 natively, 193 and 124 in int8."""


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
    if not takes_rows(plan, min(rows, LEVEL_ROWS)):
        return None
    keep = (torch.ones(x.shape[:2], dtype=torch.bool) if padding_mask is None
            else ~padding_mask)
    return plan["op"].encode(x.contiguous(), keep)
