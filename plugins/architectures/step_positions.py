"""What zoo's native decoding step is given of its position at each step, made in Python
from the layers' own position modules: each layer's rotation of its queries and keys as
a matrix (RoPE, Su et al. 2021: any layout, scaling or rotated share of the head, since
the rotation is linear in the head vector), and each layer's bias of its self-attention
scores (T5's relative positions, Raffel et al. 2020). The plans of :mod:`.native_plan`
keep, per decoding call, what a module gave, so that layers sharing a module cost one
call of it, and a rotation's matrices are made for several steps at once.
"""

from __future__ import annotations

import torch
from torch import nn

ROTATION_STEPS = 32
"""Steps whose rotations a module gives in one call (:func:`rotations_at`)."""


def rotations_at(plan: dict, rotary: list, pos: int) -> list[torch.Tensor | None]:
    """Each layer's rotation matrix of step ``pos`` (None for a layer that does not
    rotate). Each module gives its matrices once however many layers share it, for
    :data:`ROTATION_STEPS` steps at a time (one call of its ``rotate`` cost a
    decoding step of llama-110m-shape 0.2 ms of its 10)."""
    tables = plan["rotation_tables"]
    width = plan["shape"][1]
    out = []
    for m in rotary:
        if m is None:
            out.append(None)
            continue
        kept = tables.get(id(m))  # (its first step, its matrices from there)
        if kept is None or not kept[0] <= pos < kept[0] + kept[1].shape[0]:
            kept = tables[id(m)] = pos, rotation_matrices(m, pos, ROTATION_STEPS, width)
        out.append(kept[1][pos - kept[0]])
    return out


def layer_rotations(attentions: list[nn.Module]) -> list[nn.Module | None] | None:
    """Each layer's rotary position module, whose rotation the native step applies to its
    queries and keys (None for a layer that does not rotate); layers whose modules rotate
    alike share the first's, so that a step computes each rotation once (Gemma 3's local
    and global layers: two). None when no layer rotates."""
    modules = [a.positional if a.position_kind == "rotary" else None for a in attentions]
    if all(m is None for m in modules):
        return None
    kept: list[tuple[nn.Module, torch.Tensor]] = []
    out = []
    for m, a in zip(modules, attentions):
        if m is None:
            out.append(None)
            continue
        probe = rotation_matrix(m, 1, a.head_dim)
        same = next((k for k, matrix in kept if k is m or torch.equal(matrix, probe)), None)
        if same is None:
            kept.append((m, probe))
            same = m
        out.append(same)
    return out


def rotation_matrix(module: nn.Module, pos: int, width: int) -> torch.Tensor:
    """(width, width) M with ``module.rotate(x, [pos]) == x @ M`` for every head vector x:
    each row is the rotation of one unit vector (RoPE is linear in x, whatever its layout,
    scaling or rotated share of the width)."""
    return rotation_matrices(module, pos, 1, width)[0]


def rotation_matrices(module: nn.Module, pos: int, steps: int, width: int) -> torch.Tensor:
    """(steps, width, width): :func:`rotation_matrix` of positions ``pos`` to
    ``pos + steps - 1``, from one call of ``module.rotate``."""
    eye = torch.eye(width)[:, None, None, :].expand(width, 1, steps, width)
    turned = module.rotate(eye, torch.arange(pos, pos + steps))  # (rows, 1, steps, width)
    return turned[:, 0].float().transpose(0, 1).contiguous()


def position_biases(plan: dict, pos: int) -> list[torch.Tensor | None]:
    """Each layer's bias of step ``pos``'s self-attention scores, (heads, pos + 1): its
    module's ``bias`` of the keys' positions less the query's. A bias depends on the
    distance alone, so each module (T5's layers share one) gives it once for every distance
    the plan's buffers hold, and a step takes the last ``pos + 1`` of them."""
    tables = plan["bias_tables"]
    length = plan["k"][0].shape[2]
    out = []
    for module in plan["bias_of"]:
        if module is None:
            out.append(None)
            continue
        table = tables.get(id(module))
        if table is None:  # (heads, length): column j is the distance j - (length - 1)
            rel = torch.arange(1 - length, 1)[None]
            table = tables[id(module)] = module.bias(rel)[:, 0].float().contiguous()
        out.append(table[:, length - 1 - pos:].contiguous())
    return out
