"""Checkpoints that survive being interrupted: the ``checkpoints/`` part of a run folder.

A checkpoint is a folder ``checkpoints/step-NNNNNNNN/`` with the weights
(``model.safetensors``) and the rest of the state (``state.pt``: optimizer,
scheduler, step, data position, random generators; loaded with
``torch.load(weights_only=True)``, which builds no objects). It is written beside
its place, flushed, and moved into place (:func:`zoo.files.folder_beside`); then the
``latest`` file is replaced atomically to name it. A process killed at any moment
leaves ``latest`` naming a whole checkpoint.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..artifact import WEIGHTS_NAME, load_weights, read_weights, save_weights_file
from ..files import atomic_write_text, folder_beside

CHECKPOINTS = "checkpoints"
"""The run folder's sub-folder of checkpoints."""
LATEST = "latest"
"""The file in it naming the newest whole checkpoint."""
STATE = "state.pt"
"""A checkpoint's optimizer, scheduler, position and random state."""


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
    newest ``keep`` checkpoints."""
    folder = Path(run_dir) / CHECKPOINTS
    final = folder / f"step-{step:08d}"
    with folder_beside(final, replace="folder") as tmp:
        save_weights_file(model, tmp / WEIGHTS_NAME)
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "rng": rng_state(), **extra}, tmp / STATE)
    atomic_write_text(folder / LATEST, final.name + "\n")
    older = sorted(p for p in folder.glob("step-*") if p.name != final.name)
    for old in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint ``latest`` names, or None when there is none (or it is not whole)."""
    pointer = Path(run_dir) / CHECKPOINTS / LATEST
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / STATE).exists() else None


def load_checkpoint_weights(path: Path, model) -> None:
    """Load a checkpoint's weights into ``model``, strictly."""
    source = str(Path(path) / WEIGHTS_NAME)
    load_weights(model, read_weights([Path(path) / WEIGHTS_NAME], source), source)


def load_checkpoint(path: Path, model, optimizer=None, scheduler=None) -> dict:
    """Load a checkpoint into ``model`` (and ``optimizer``, ``scheduler``); returns its state."""
    load_checkpoint_weights(path, model)
    state = torch.load(Path(path) / STATE, weights_only=True, map_location="cpu")
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    return state
