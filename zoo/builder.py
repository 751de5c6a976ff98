"""``zoo.build``: a recipe name, file or object (plus overrides) to an ``nn.Module``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ._text import quoted
from .errors import MemoryBudgetError, RecipeError
from .recipe import Recipe, get_recipe
from .resolver import Resolved, resolve


def _instantiate(resolved: Resolved) -> nn.Module:
    model = resolved.architecture.load()(resolved.settings, resolved)
    model.recipe = resolved.recipe
    return model


def build(
    name: str | os.PathLike[str] | Recipe,
    *,
    pretrained: bool | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    **overrides: Any,
) -> nn.Module:
    """Build a model from a named recipe, a recipe file or a :class:`Recipe`.

    Keyword overrides replace a slot's component (``norm="rmsnorm"``), an
    architecture setting (``encoder_layers=3``) or a component setting
    (``**{"norm.eps": 1e-5}``); each is validated before anything is built.
    ``device="meta"`` builds without allocating memory.

    ``hf-hub:owner/repo[@revision]`` and ``local-dir:path`` name saved models (see
    ``zoo.save_pretrained``): their recipe and, unless ``pretrained=False``, their
    weights. ``pretrained=True`` on a named recipe loads its published weights
    (``zoo.list_recipes(pretrained=True)``), converted to zoo's names.

    >>> import zoo
    >>> m = zoo.build("transformer-tiny", norm="rmsnorm")
    >>> type(m.encoder.layers[0].norm1).__name__
    'RMSNorm'
    """
    if isinstance(name, str) and name.startswith(("hf-hub:", "local-dir:")):
        from .hub import load_named

        return load_named(name, pretrained=pretrained is not False, device=device, dtype=dtype,
                          **overrides)
    recipe = get_recipe(name)
    if pretrained and recipe.weights is None:
        from .recipe import list_recipes

        raise RecipeError(
            f"Recipe {recipe.name!r} names no published weights, so pretrained=True has nothing "
            f"to load. Recipes with weights: {quoted(list_recipes(pretrained=True))}; a saved "
            "model is built from 'hf-hub:owner/repo' or 'local-dir:path'."
        )
    if pretrained and str(device) == "meta":
        raise RecipeError("pretrained=True cannot load weights into a model on the meta device.")
    resolved = resolve(recipe, overrides, device=device)
    if str(device) != "meta":
        check_memory(resolved, device=device, dtype=dtype)
    with torch.device(device or "cpu"):
        model = _instantiate(resolved)
    if pretrained:
        from .hub import load_pretrained_weights

        load_pretrained_weights(model, recipe.weights)
    if dtype is not None:
        model = model.to(dtype)
    return model


@dataclass
class Footprint:
    """Parameter count and the bytes the weights need."""

    parameters: int
    buffers: int
    dtype: torch.dtype

    def bytes_in(self, dtype: torch.dtype) -> int:
        """Bytes of parameters and buffers stored in ``dtype``."""
        return (self.parameters + self.buffers) * dtype.itemsize

    @property
    def bytes(self) -> int:
        return self.bytes_in(self.dtype)


class _NoInit(torch.overrides.TorchFunctionMode):
    """Skips the in-place initialisers (``normal_``, ``uniform_``, ...) while a model is
    built on the meta device only to be counted: on meta tensors they go through
    torch's reference implementations, whose first use imports torch._dynamo (about
    two seconds of a fresh process's ``zoo.build``)."""

    SKIPPED = {torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.zero_,
               torch.Tensor.fill_, torch.Tensor.copy_,
               torch.Tensor.exponential_, torch.Tensor.bernoulli_}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        skip = func in self.SKIPPED or getattr(func, "__module__", "") == "torch.nn.init"
        if skip and getattr(target, "is_meta", False):
            return target
        return func(*args, **kwargs)


def footprint(resolved: Resolved, dtype: torch.dtype | None = None) -> Footprint:
    """Count the parameters of a resolved recipe by building it on the meta device."""
    with torch.device("meta"), _NoInit():
        model = _instantiate(resolved)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return Footprint(params, buffers, dtype or torch.get_default_dtype())


def memory_available(device: str | torch.device | None = None) -> int:
    """Bytes of memory of the device a model is built on (RAM for the CPU)."""
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError


def check_memory(resolved: Resolved, *, device: Any = None, dtype: torch.dtype | None = None) -> Footprint:
    """Refuse a recipe whose weights need more memory than the device has."""
    fp = footprint(resolved, dtype)
    have = memory_available(device)
    if fp.bytes > have:
        raise MemoryBudgetError(
            f"Recipe {resolved.recipe.name!r} needs about {format_bytes(fp.bytes)} for its "
            f"weights alone ({fp.parameters:,} parameters in {fp.dtype}), more than the "
            f"{format_bytes(have)} of memory on {device or 'cpu'}. Nothing was allocated. "
            "Make it smaller (d_model, layers, vocab_size) or build it on device='meta'."
        )
    return fp
