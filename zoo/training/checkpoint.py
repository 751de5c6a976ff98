"""Checkpoints that survive being interrupted: the ``checkpoints/`` part of a run folder.

A checkpoint is a folder ``checkpoints/step-NNNNNNNN/`` with the weights
(``model.safetensors``) and the rest of the state (``state.pt``: optimizer,
scheduler, step, data position, random generators; loaded with
``torch.load(weights_only=True)``, which builds no objects). It is written beside
its place, flushed, and moved into place (:func:`zoo.files.folder_beside`: a step
saved twice is swapped in whole, never removed first); then the ``latest`` file is
replaced atomically to name it. A process killed at any moment leaves a whole
checkpoint to resume from: the one ``latest`` names, or, when that is missing or
unreadable, the newest whole one. Leftovers of killed saves go at the next save.
"""

from __future__ import annotations

import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..artifact import (
    WEIGHTS_NAME,
    load_weights,
    load_weights_file,
    read_weights,
    save_weights_file,
    tensor_bytes,
)
from ..errors import ArtifactError, CheckpointError
from ..files import (
    atomic_write_text,
    describe_os_error,
    folder_beside,
    is_write_failure,
    recover,
    remove,
)

CHECKPOINTS = "checkpoints"
"""The run folder's sub-folder of checkpoints."""
LATEST = "latest"
"""The file in it naming the newest whole checkpoint."""
STATE = "state.pt"
"""A checkpoint's optimizer, scheduler, position and random state."""
BEST = "best"
"""The folder in ``checkpoints/`` holding the weights of the best validation."""
BEST_INFO = "best.json"
"""In it: the step and the metric of those weights."""


def rng_state() -> dict[str, Any]:
    """Every random generator's state (torch, CUDA, numpy, Python), as plain tensors and lists."""
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model, optimizer, scheduler, extra: dict,
                    keep: int = 2) -> Path:
    """Save step ``step`` as ``checkpoints/step-NNNNNNNN``, point ``latest`` at it and keep the
    newest ``keep`` checkpoints. A full disk (or any refusal to write) raises
    :class:`~zoo.errors.CheckpointError` and leaves the earlier checkpoints as they were."""
    folder = Path(run_dir) / CHECKPOINTS
    final = folder / f"step-{step:08d}"
    _remove_leftovers(folder)
    try:
        with folder_beside(final, lock=False) as tmp:
            save_weights_file(model, tmp / WEIGHTS_NAME)
            torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                        "rng": rng_state(), **extra}, tmp / STATE)
        atomic_write_text(folder / LATEST, final.name + "\n")
    except Exception as exc:
        if not is_write_failure(exc):
            raise
        previous = latest_checkpoint(run_dir)
        raise CheckpointError(
            f"Could not save the checkpoint of step {step} in {folder}: "
            f"{describe_os_error(exc, folder, _checkpoint_bytes(model, optimizer))}. "
            + (f"The checkpoint of step {step_of(previous)} is kept; free some space and "
               f"resume with: zoo train --resume {run_dir}" if previous is not None else
               "No earlier checkpoint exists.")) from None
    older = sorted(p for p in folder.glob("step-*") if p.name != final.name)
    for old in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _checkpoint_bytes(model, optimizer) -> int:
    """About the bytes a checkpoint takes: the model's tensors and the optimizer's."""
    tensors = list(model.state_dict().values())
    for state in optimizer.state_dict().get("state", {}).values():
        tensors += [t for t in state.values() if isinstance(t, torch.Tensor)]
    return tensor_bytes(tensors)


def step_of(path: Path) -> int:
    """The step a checkpoint folder (``step-NNNNNNNN``) was saved at."""
    return int(Path(path).name.removeprefix("step-"))


def _remove_leftovers(folder: Path) -> None:
    """Temporary and set-aside folders of killed saves (``.step-*``), once whatever
    ``latest`` names has been recovered."""
    if not folder.is_dir():
        return
    named = _named(folder)
    if named is not None:
        recover(named)
    for path in folder.glob(".step-*"):
        remove(path)


def _named(folder: Path) -> Path | None:
    """The folder ``latest`` names, or None when it names nothing readable."""
    try:
        name = (folder / LATEST).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name.startswith("step-") or "/" in name or "\\" in name:
        return None
    return folder / name


def _whole(path: Path | None) -> bool:
    return path is not None and (path / STATE).is_file() and (path / WEIGHTS_NAME).is_file()


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint to resume from: the one ``latest`` names, else (it is missing, or
    ``latest`` is unreadable) the newest whole one; None when there is none."""
    folder = Path(run_dir) / CHECKPOINTS
    if not folder.is_dir():
        return None
    named = _named(folder)
    if named is not None:
        recover(named)
        if _whole(named):
            return named
    whole = checkpoints(run_dir)
    return whole[-1] if whole else None


def load_checkpoint(path: Path, model, optimizer=None, scheduler=None) -> dict:
    """Load a checkpoint into ``model`` (and ``optimizer``, ``scheduler``); returns its state.
    An unreadable or mismatched checkpoint raises :class:`~zoo.errors.CheckpointError`."""
    path = Path(path)
    try:
        load_weights_file(model, path / WEIGHTS_NAME)
        state = torch.load(path / STATE, weights_only=True, map_location="cpu")
        if optimizer is not None:
            optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        for key in ("step", "epoch", "position", "rng"):
            state[key]
    except (ArtifactError, RuntimeError, KeyError, ValueError, TypeError, EOFError, OSError,
            pickle.UnpicklingError) as exc:
        detail = str(exc) if isinstance(exc, ArtifactError) else f"{type(exc).__name__}: {exc}"
        error = CheckpointError(
            f"The checkpoint {path} cannot be resumed from: "
            f"{detail if len(detail) <= 600 else detail[:597] + '...'}. "
            "Remove that folder to resume from the one before it (or from the start).")
        error.reason = detail
        raise error from None
    return state


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's whole checkpoints, oldest first."""
    folder = Path(run_dir) / CHECKPOINTS
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("step-*") if _whole(p)), key=step_of)


def average_checkpoints(model, paths: list[Path]) -> None:
    """Load into ``model`` the element-wise mean of the weights of the checkpoints
    ``paths`` (computed in float64, stored in each tensor's own dtype)."""
    if not paths:
        raise CheckpointError("No checkpoint to average.")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for path in paths:
        weights = read_weights([Path(path) / WEIGHTS_NAME], str(path))
        if dtypes and weights.keys() != dtypes.keys():
            raise CheckpointError(
                f"{path} holds other tensors than {paths[0]}; checkpoints of different models "
                "cannot be averaged.")
        for name, tensor in weights.items():
            dtypes.setdefault(name, tensor.dtype)
            if name in total:
                total[name] += tensor.to(torch.float64)
            else:
                total[name] = tensor.to(torch.float64)
    mean = {name: (value / len(paths)).to(dtypes[name]) for name, value in total.items()}
    load_weights(model, mean, f"the mean of {len(paths)} checkpoints")


def save_best(run_dir: Path, model, step: int, metric: str, value: float) -> None:
    """Keep ``model``'s weights as the run's best (``checkpoints/best``), with their step
    and validation metric; written beside and moved into place like a checkpoint."""
    import json

    final = Path(run_dir) / CHECKPOINTS / BEST
    with folder_beside(final, lock=False) as tmp:
        save_weights_file(model, tmp / WEIGHTS_NAME)
        atomic_write_text(tmp / BEST_INFO, json.dumps(
            {"step": step, "metric": metric, "value": value}) + "\n")


def read_best(run_dir: Path) -> dict | None:
    """The best weights' step, metric and value (None when none were kept)."""
    import json

    path = Path(run_dir) / CHECKPOINTS / BEST
    recover(path)
    try:
        info = json.loads((path / BEST_INFO).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if (path / WEIGHTS_NAME).is_file() else None


def load_best(run_dir: Path, model) -> dict:
    """Load the best weights into ``model``; returns their step, metric and value."""
    info = read_best(run_dir)
    if info is None:
        raise CheckpointError(f"{Path(run_dir) / CHECKPOINTS / BEST} holds no best weights.")
    load_weights_file(model, Path(run_dir) / CHECKPOINTS / BEST / WEIGHTS_NAME)
    return info
