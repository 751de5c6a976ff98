"""The conformance kit's checks of the positional family: offsets (a cache's later
steps), padding-aware numbering, and the interface of positions that act inside attention."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..registry import Component
from .contract import D, Failed, H, Seed, check, close, differs, shape


def _positional(component: Component, settings: Any, *, causal: bool = False) -> nn.Module:
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        return component.build(settings, d_model=D, max_len=32)
    return component.build(settings, d_model=D, n_heads=H, max_len=32, causal=causal)


@check("positional")
def _offset(component, settings):
    """module(x, offset=k) continues the positions of module(x) (absolute, none); a
    position inside attention adds nothing to the embeddings."""
    with Seed(0):
        module = _positional(component, settings)
        x = torch.randn(2, 10, D)
        full = module(x)
    shape(full, (2, 10, D), "module(x)")
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        close(module(x[:, 6:], offset=6), full[:, 6:], "module(x[:, 6:], offset=6)")
    if kind == "absolute":
        differs(full[:, 0] - x[:, 0], full[:, 1] - x[:, 1], "what two positions add")
    elif kind != "none":
        close(full, x, "module(x) for a position inside attention")


@check("positional", "padding_aware")
def _positions_see_padding(component, settings):
    """padding_aware: module(x, offset=, padding_mask=) takes the mask; no padding (an
    all-False mask) changes nothing, and a row's real tokens do not depend on what its
    padding holds."""
    with Seed(0):
        module = _positional(component, settings)
        x = torch.randn(2, 10, D)
        mask = torch.zeros(2, 10, dtype=torch.bool)
        close(module(x, offset=2, padding_mask=mask), module(x, offset=2),
               "module(x, offset=2, padding_mask=<no padding>)")
        mask[1, :3] = True  # left padding
        other = x.clone()
        other[1, :3] = torch.randn(3, D)
    shape(module(x, padding_mask=mask), (2, 10, D), "module(x, padding_mask=mask)")
    close(module(other, padding_mask=mask)[1, 3:], module(x, padding_mask=mask)[1, 3:],
           "real tokens beside other padding")


@check("positional")
def _inside_interface(component, settings):
    """rotary: rotate(x, positions) keeps shapes and norms, and q·k depends only on the
    offset; bias: bias(rel) is (H, Lq, Lk); relative: scores, content_query and values_term
    (or None) shapes, and the scores of a query depend only on the offsets;
    disentangled: table() of the model's width, and rows(Lq, Lk, offset) whole row
    numbers of it that depend only on the offsets."""
    kind = component.capabilities.kind
    if kind in ("absolute", "none"):
        return
    with Seed(0):
        module = _positional(component, settings, causal=True)
        if getattr(module, "kind", None) != kind:
            raise Failed(f"the module's kind is {getattr(module, 'kind', None)!r}, its "
                          f"capabilities say {kind!r}")
        rel = torch.arange(7)[None, :] - torch.arange(2, 7)[:, None]  # (5, 7)
        if kind == "rotary":
            q, k = torch.randn(1, H, 1, D // H), torch.randn(1, H, 1, D // H)
            x = torch.randn(2, H, 5, D // H)
            rotated = module.rotate(x, torch.arange(5))
            shape(rotated, tuple(x.shape), "rotate(x, positions)")
            close(rotated.norm(dim=-1), x.norm(dim=-1), "norms after rotate")

            def dot(m: int, n: int) -> torch.Tensor:
                return (module.rotate(q, torch.tensor([m])) *
                        module.rotate(k, torch.tensor([n]))).sum(-1)
            close(dot(7, 3), dot(4, 0), "q·k at (7, 3) vs (4, 0)")
        elif kind == "bias":
            shape(module.bias(rel), (H, 5, 7), "bias(rel)")
            blocks = rel.view(1, 5, 7).expand(3, 5, 7)  # sparse mechanisms pass blocks of rel
            shape(module.bias(blocks), (H, 3, 5, 7), "bias(rel) of a 3-d rel")
        elif kind == "relative":
            q = torch.randn(2, H, 5, D // H)
            scores = module.scores(q, rel)
            shape(scores, (2, H, 5, 7), "scores(q, rel)")
            shape(module.content_query(q), (2, H, 5, D // H), "content_query(q)")
            weights = torch.rand(2, H, 5, 7).softmax(-1)
            term = module.values_term(weights, rel)
            if term is not None:
                shape(term, (2, H, 5, D // H), "values_term(weights, rel)")
            same = torch.randn(2, H, 1, D // H).expand(2, H, 5, D // H)  # one query, moved
            scores = module.scores(same, rel)
            close(scores[..., 1:, 1:], scores[..., :-1, :-1],
                   "scores(q, rel) of one query at two positions, keys moved with it")
        elif kind == "disentangled":
            table = module.table()
            if table.dim() != 2 or table.shape[-1] != D:
                raise Failed(f"table() is {tuple(table.shape)}, not (rows, {D}): a vector "
                             "of the model's width for each distance")
            rows = module.rows(5, 7, 2, torch.device("cpu"))
            shape(rows, (5, 7), "rows(5, 7, offset=2)")
            if rows.dtype != torch.long or rows.min() < 0 or rows.max() >= len(table):
                raise Failed(f"rows(...) holds {rows.dtype} from {int(rows.min())} to "
                             f"{int(rows.max())}: whole row numbers of table()'s "
                             f"{len(table)}")
            close(rows[1:, 1:].float(), rows[:-1, :-1].float(),
                  "rows of one query and its keys, all moved one place")
