"""What a run needs before its first step: the recipe checked, the threads, the precision
the device can run, the model (pretrained or built for the task), the seeds, the
optimizer, the device and autocast. :mod:`zoo.training.loop` runs the steps."""

from __future__ import annotations

import contextlib
import os
import random
import warnings
from typing import Any

import numpy as np
import torch

from .. import hardware
from ..builder import build, get_recipe, imported_model
from ..errors import RecipeError
from ..registry import registry
from ..resolver import resolve
from .config import TrainRecipe

def check(recipe: TrainRecipe) -> None:
    """Everything about a recipe that can be checked before a run folder exists: the
    task and its settings, the model recipe and its overrides."""
    registry.get("task", recipe.task.name).validate_settings(recipe.task.settings)
    resolve(get_recipe(recipe.model.recipe), dict(recipe.model.overrides))


def set_threads(threads: int | None, device: torch.device) -> int:
    """Torch's intra-op threads for a run on the CPU: ``threads`` when given; else one per
    core this process may use, less the cores other processes keep busy (measured for a
    moment), with a warning. Two torch processes each with a thread per core slow each
    other down many times over (benchmarks/train_under_load.py). One of several
    processes of a job on this machine (torchrun's ``LOCAL_WORLD_SIZE``) takes its share
    of the cores instead. Returns the number set."""
    if device.type != "cpu":
        return torch.get_num_threads()
    if threads is not None and threads < 1:
        raise RecipeError(f"threads is a number of threads, 1 or more; got {threads}.")
    cores = hardware.detect().cpu.cores
    siblings = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    chosen = threads or max(1, cores // siblings)
    if threads is None and siblings == 1 and cores > 1:
        taken = hardware.cores_busy(0.25)
        free = max(1, cores - int(taken + 1 - hardware.BUSY_CORE))
        if free < cores:
            warnings.warn(
                f"other processes keep {taken:.1f} of this machine's {cores} cores busy: "
                f"training with {free} thread{'s' if free > 1 else ''} instead of {cores} "
                "(choose with --threads N, zoo.train(threads=N))", RuntimeWarning,
                stacklevel=3)
            chosen = free
    torch.set_num_threads(chosen)
    return chosen


def check_precision(precision: str, device: torch.device, *, allow_slow_bf16: bool = False) -> None:
    """Refuse a precision the device cannot run well: fp16 off CUDA (it needs a gradient
    scaler), and bf16 where the device has no bf16 units, unless ``allow_slow_bf16``
    (then it warns)."""
    if precision == "fp16" and device.type != "cuda":
        raise RecipeError("precision fp16 needs a CUDA device (it uses a gradient scaler); "
                          "on the CPU use bf16 or fp32 (--set train.precision=fp32).")
    if precision != "bf16":
        return
    why = hardware.detect().why_no_bf16(device)
    if not why:
        return
    if not allow_slow_bf16:
        raise RecipeError(
            f"precision bf16 on {device.type}: {why}. Train in fp32 (precision: fp32 in the "
            "recipe, or --set train.precision=fp32), or insist with --allow-slow-bf16 "
            "(zoo.train(..., allow_slow_bf16=True)).")
    warnings.warn(f"training in bf16 with {why}", RuntimeWarning, stacklevel=3)


def pretrained_model(recipe: TrainRecipe, task, device) -> Any:
    """The model to fine-tune when the recipe names one in a foreign format
    (``--set model=hf-hub:Helsinki-NLP/opus-mt-de-en``): built with its weights and the
    recipe's overrides, its tokenizer and token ids handed to the task
    (``task.use_pretrained``) before the task reads its data. None for a zoo recipe."""
    model = imported_model(recipe.model.recipe, device=device, **recipe.model.overrides)
    if model is None:
        return None
    adopt = getattr(task, "use_pretrained", None)
    if adopt is None:
        raise RecipeError(f"task {recipe.task.name!r} cannot fine-tune {recipe.model.recipe}: "
                          "it has no use_pretrained (a task that takes a pretrained model's "
                          "tokenizer, as translate-de-en does).")
    adopt(model)
    return model


def build_model(recipe: TrainRecipe, task, device) -> Any:
    """The recipe's model, with its overrides and then the task's (vocabulary, classes); an
    override of the recipe's that the task replaces is said, not dropped silently."""
    decided = task.model_overrides()
    for key, value in recipe.model.overrides.items():
        if key in decided and decided[key] != value:
            warnings.warn(f"model.{key}={value!r} is replaced by {decided[key]!r}: task "
                          f"{recipe.task.name!r} decides {key} (from its data)", UserWarning,
                          stacklevel=3)
    overrides = {**recipe.model.overrides, **decided}
    return build(recipe.model.recipe, device=device, **overrides)


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _optimizer(spec, model, *, fused: bool = True) -> torch.optim.Optimizer:
    """The recipe's optimizer; Adam and AdamW in PyTorch's fused kernel (one pass over each
    parameter, where the default runs a dozen operators each) when ``fused`` and every
    parameter is a floating-point tensor on the CPU or a CUDA device."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": spec.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if spec.name == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr, momentum=spec.momentum)
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    fused = fused and all(p.is_floating_point() and p.device.type in ("cpu", "cuda")
                          for p in params)
    return cls(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps, fused=fused or None)


def _device(requested) -> torch.device:
    if requested is not None:
        return torch.device(requested)
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local)
    return torch.device("cpu")


def _autocast(precision: str, device: torch.device):
    """Autocast for bf16 and fp16 (checked beforehand by :func:`check_precision`)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
