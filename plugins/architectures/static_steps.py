"""What the two static decodings share (:mod:`.static_decoder` for the seq2seq decoder,
:mod:`.static_lm` for a decoder-only model after its prompts): keys and values in buffers
of fixed size, allocated once for the longest decoding; a count of the steps taken,
refused past the buffers; rows reordered in place as a beam search asks, only the rows
that change copied; and the native step's plan (:mod:`.native_plan`), made once for the
model's layers and copied with each decoding call's buffers (:func:`.native_plan.for_call`),
or None where the step runs in Python or not at all."""

from __future__ import annotations

import torch
from torch import nn

from zoo.plugin_api import HeadNorm

from .native_plan import declares, outdated


def layer_refusal(i: int, block: nn.Module, attentions: tuple) -> str | None:
    """Why a seq2seq decoder's static decoding may not run layer ``i`` (its ``block`` and
    the block's ``attentions``), or None: the block says the paper's layout, each
    attention softmax over every key, recording no maps. (A language model's layers are
    read through their blocks' ``data_flow()``: :mod:`.static_lm`.)"""
    if not declares(block, "static_layout", "forward"):
        return f"layer {i}'s block ({type(block).__name__}) is not the paper's layout"
    return next((why for why in (attention_refusal(i, attn) for attn in attentions) if why),
                None)


def attention_refusal(i: int, attn: nn.Module, *, native_only: bool = False) -> str | None:
    """Why layer ``i``'s attention ``attn`` may not run in a static decoding or zoo's
    native code (None: it may): softmax over every key, recording no maps; a sliding
    window, zoo's ``HeadNorm`` on queries and keys and soft-capped scores only with
    ``native_only`` (see :func:`layer_refusal`)."""
    if not declares(attn, "softmax_attention", "_attend") or attn.record_weights:
        return (f"layer {i}'s {type(attn).__name__} is not softmax attention over every "
                "key, or records its maps")
    if getattr(attn, "window", None) is not None and not native_only:
        return f"layer {i} attends through a sliding window"
    normed = (attn.q_norm, attn.k_norm)
    if normed != (None, None) and not (native_only and all(
            type(n) is HeadNorm for n in normed)):
        return f"layer {i}'s {type(attn).__name__} norms its queries and keys"
    if getattr(attn, "softcap", None) is not None and not native_only:
        return f"layer {i}'s {type(attn).__name__} soft-caps its scores"
    return None


class StaticSteps:
    """Next-token logits one step at a time over fixed buffers (see the module). A
    subclass says which buffers hold keys and values (:meth:`buffers`), how many of
    their positions are filled (:attr:`used`), and what else a reorder moves
    (:meth:`reorder_rows`)."""

    native: dict | None = None
    """The sealed plan of the native step (:func:`.native_plan.seal`), or None."""

    def __init__(self, model: nn.Module, length: int) -> None:
        self.model, self.length, self.filled = model, length, 0

    def next_step(self) -> int:
        """The index of the step about to be taken; one ValueError past the buffers."""
        if self.filled >= self.length:
            raise ValueError(f"the decoder's buffers hold {self.length} steps; make a "
                             f"{type(self).__name__} with a larger length")
        return self.filled

    def buffers(self) -> list[torch.Tensor]:
        """Every buffer of keys and values, (rows, heads, positions, head width)."""
        raise NotImplementedError

    def current_plan(self) -> dict | None:
        """The sealed plan of this step, made again over the same buffers
        (:meth:`sealed_again`) when a weight it was made from changed since, as torch
        counts changes (:func:`.native_plan.outdated`: ``w.mul_(3)`` between two steps)."""
        if self.native is not None and outdated(self.native):
            self.native = self.sealed_again()
        return self.native

    def sealed_again(self) -> dict | None:
        """A plan of the model's layers as they are now, over the same buffers, sealed (or
        None where the native step cannot run them now)."""
        raise NotImplementedError

    @property
    def used(self) -> int:
        """How many positions of the buffers hold keys and values now."""
        return self.filled

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (a beam search's choice). Only the rows that change are
        copied: in a beam search's usual step most beams go on from themselves. With the
        native step's plan, its buffers are these, and it moves them in one call."""
        if self.native is not None:
            self.native["op"].reorder(index, self.used)
            self.reorder_rows(index)
            return
        moved = (index != torch.arange(index.numel(), device=index.device)).nonzero().flatten()
        if moved.numel():
            sources, n = index.index_select(0, moved), self.used
            for buf in self.buffers():
                filled = buf[:, :, :n]
                # every source row is read before any is written (a row may be both)
                filled.index_copy_(0, moved, filled.index_select(0, sources))
        self.reorder_rows(index)

    def reorder_rows(self, index: torch.Tensor) -> None:
        """What else a subclass keeps per row, reordered (nothing here)."""
