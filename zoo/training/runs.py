"""A finished (or checkpointed) run, loaded back: its model with the trained
weights, its task (with the run's tokenizer) and its recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_model

from ..errors import RecipeError
from ..recipe import load_recipe
from .checkpoint import latest_checkpoint
from .config import TrainRecipe, load_train_recipe


@dataclass
class Run:
    path: Path
    recipe: TrainRecipe
    model: Any
    task: Any


def load_run(path: str | Path, device: str | None = None) -> Run:
    """The model of run folder ``path`` (its final weights, else its latest checkpoint)."""
    from ..builder import build
    from .loop import build_task

    path = Path(path)
    if not (path / "train.yaml").exists() or not (path / "model.yaml").exists():
        raise RecipeError(f"{path} is not a run folder (no train.yaml and model.yaml); "
                          "zoo train writes them in runs/NAME.")
    recipe = load_train_recipe(path / "train.yaml")
    task = build_task(recipe, path)  # tasks read their data when it is first asked for
    model = build(load_recipe(path / "model.yaml"), device=device)
    weights = path / "model.safetensors"
    if not weights.exists():
        checkpoint = latest_checkpoint(path)
        if checkpoint is None:
            raise RecipeError(f"{path} has no trained weights yet (no model.safetensors and no "
                              "checkpoint).")
        weights = checkpoint / "model.safetensors"
    load_model(model, str(weights), strict=True)
    return Run(path, recipe, model.eval(), task)
