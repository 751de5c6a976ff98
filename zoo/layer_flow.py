"""How a block computes, said by the block itself: :class:`DataFlow`, which a block's
``data_flow()`` returns and zoo's native decoding step reads (a plugin's block reaches
the native step as zoo's own do), and :func:`flow_of`, the one reader of it.

A block's ``forward`` is the truth; ``data_flow()`` is its description, in the parts the
native step computes: one self-attention (queries, keys and values from the block's
input), a feed-forward network, a norm before (pre-norm) or after (post-norm) each, and
how the two sublayers meet the residual stream:

- ``sequential`` (the paper's, Llama's): ``x = x + attn(n1(x)); x = x + ffn(n2(x))``;
- ``parallel`` (GPT-J, GPT-NeoX, Falcon, Phi-2, Cohere; Wang & Komatsuzaki 2021):
  ``x = x + attn(n1(x)) + ffn(n2(x))``, both from the same input (GPT-J's one norm is
  ``n1`` and ``n2`` the same module); pre-norm only.

``after`` holds a sandwich block's norms of the sublayers' outputs (Gemma 2 and 3), and
``cross_attention`` with its norm a seq2seq decoder's layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

RESIDUALS = ("sequential", "parallel")


@dataclass(frozen=True)
class DataFlow:
    """One block's parts and how they are wired, for zoo's native step. The modules are
    the block's own (the plan reads their weights); a part the native step cannot compute
    is refused by name when the plan is made, never guessed."""

    attention: Any
    """The self-attention (zoo's attention modules: ``q_proj``, ``kv_proj``, ``out_proj``)."""
    ffn: Any
    """The feed-forward network (``fc1``/``fc2``, or ``fc1_g``/``fc1_x``/``fc2``)."""
    norms: tuple[Any, Any]
    """The norms of the attention's and the network's inputs (pre-norm) or outputs
    (post-norm); with ``parallel`` the one before each (one module twice for GPT-J)."""
    norm_first: bool
    """Pre-norm (``x + f(norm(x))``) or post-norm (``norm(x + f(x))``)."""
    residual: Literal["sequential", "parallel"] = "sequential"
    """How the attention and the network meet the residual stream (see the module)."""
    after: tuple[Any, Any] = (None, None)
    """A sandwich block's norms of the attention's and the network's outputs, or Nones."""
    cross_attention: Any = None
    """A seq2seq decoder layer's cross-attention, between the two, or None."""
    cross_norm: Any = None
    """The norm of the cross-attention's input (or output, post-norm), with it."""


def flow_of(block: Any, i: int) -> DataFlow | str:
    """``block``'s :class:`DataFlow` (layer ``i`` of its stack), or why there is none to
    trust: the class that writes the block's ``forward`` must write ``data_flow`` too (a
    subclass that changes ``forward`` and not its description is not read), and the
    description must be one the native step computes."""
    for cls in type(block).__mro__:
        if "forward" in cls.__dict__:
            if "data_flow" in cls.__dict__:
                break
            legacy = _flagged(block, cls)
            if legacy is not None:
                return legacy
            return (f"layer {i}'s block ({type(block).__name__}) is not the paper's layout and "
                    "does not describe its data flow (data_flow(), docs/contract/block.md)")
    flow = block.data_flow()
    if not isinstance(flow, DataFlow):
        return (f"layer {i}'s block ({type(block).__name__}).data_flow() gave "
                f"{type(flow).__name__}, not a zoo.plugin_api.DataFlow")
    if flow.residual not in RESIDUALS:
        return f"layer {i}'s block has residual {flow.residual!r}, not one of {RESIDUALS}"
    if flow.residual == "parallel" and (not flow.norm_first or flow.cross_attention is not None
                                        or flow.after != (None, None)):
        return (f"layer {i}'s block is parallel and post-norm, sandwiched or with "
                "cross-attention: the native step runs parallel layers pre-norm only")
    return flow


def _flagged(block: Any, cls: type) -> DataFlow | None:
    """The flow of a block of an earlier contract, which said its layout with a flag on the
    class that writes its ``forward`` (``static_layout``: the paper's sequential layer of
    ``attn`` (or ``self_attn``, ``cross_attn``), ``ffn`` and ``norm1``-``norm3``;
    ``sandwich_layout``: with ``norm1_out`` and ``norm2_out``), or None."""
    if cls.__dict__.get("sandwich_layout", False):
        return DataFlow(block.attn, block.ffn, (block.norm1, block.norm2), True,
                        after=(block.norm1_out, block.norm2_out))
    if not cls.__dict__.get("static_layout", False):
        return None
    if hasattr(block, "cross_attn"):
        return DataFlow(block.self_attn, block.ffn, (block.norm1, block.norm3),
                        block.norm_first, cross_attention=block.cross_attn,
                        cross_norm=block.norm2)
    return DataFlow(block.attn, block.ffn, (block.norm1, block.norm2), block.norm_first)
