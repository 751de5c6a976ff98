"""Checkpoints that survive being interrupted.

A checkpoint is a folder ``checkpoints/step-NNNNNNNN/`` with the weights
(``model.safetensors``) and the rest of the state (``state.pt``: optimizer,
scheduler, step, data position, random generators; loaded with
``torch.load(weights_only=True)``, which builds no objects). It is written under
a temporary name, flushed, and renamed into place; then the ``latest`` file is
replaced atomically to name it. A process killed at any moment leaves ``latest``
naming a whole checkpoint.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model

from ..recipe import atomic_write_text


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> dict[str, Any]:
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
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), *rest))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model, optimizer, scheduler, extra: dict,
                    keep: int = 2) -> Path:
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step-{step:08d}"
    tmp = folder / f".step-{step:08d}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_model(model, str(tmp / "model.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "rng": rng_state(), **extra}, tmp / "state.pt")
    for name in ("model.safetensors", "state.pt"):
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(folder)
    atomic_write_text(folder / "latest", final.name + "\n")
    older = sorted(p for p in folder.glob("step-*") if p.name != final.name)
    for old in older[: max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / "state.pt").exists() else None


def load_checkpoint(path: Path, model, optimizer=None, scheduler=None) -> dict:
    load_model(model, str(Path(path) / "model.safetensors"), strict=True)
    state = torch.load(Path(path) / "state.pt", weights_only=True, map_location="cpu")
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    return state
