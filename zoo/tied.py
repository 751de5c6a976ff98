"""Tied weights: the state-dict names that share one tensor (a model's embeddings and its
output layer, say), and the state dict with each such tensor once: what a saved model and
every export hold."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def tied_groups(model: nn.Module) -> list[list[str]]:
    """State-dict names that share one storage (tied embeddings), each group in order."""
    groups: dict[tuple[Any, int, tuple[int, ...]], list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=False).items():
        if tensor.device.type == "meta" or tensor.numel() == 0:
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        groups.setdefault(key, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def apart(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` as safetensors stores them, none sharing memory with another: a tensor
    whose storage an earlier one holds (the same tensor under two names, a tied pair, two
    views into one fused matrix) is a copy of its own; each is contiguous."""
    held: set[int] = set()
    out = {}
    for name, tensor in weights.items():
        storage = tensor.untyped_storage().data_ptr()
        out[name] = tensor.clone().contiguous() if storage in held else tensor.contiguous()
        if tensor.numel():
            held.add(storage)
    return out


def weights_to_save(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tied tensor stored once (under its first name), contiguous."""
    state = model.state_dict()
    for group in tied_groups(model):
        for name in group[1:]:
            del state[name]
    return {name: t.detach().contiguous() for name, t in state.items()}
