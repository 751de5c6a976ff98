"""The one loader of a model by any name, carrying its text: ``zoo.load(name)``.

- a transformers folder (``local-dir:``, ``hf-hub:``) is built through its format, with
  its own tokenizer (``model.tokenizer``, read at first use and kept) and generation
  settings;
- a run folder, or a run saved with ``zoo save`` / ``zoo push``, gives its trained model
  with its task's tokenizer and settings;
- any other name ``zoo.build`` reads (a recipe, a recipe file, a model saved without its
  run) gives that model, carrying what it was saved with (``model.tokenizer`` None: it
  has no text of its own).

``zoo translate``, ``zoo generate`` and ``zoo embed`` call it once and take what the
model carries, whatever kind of name it came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from .artifact import CONFIG_NAME
from .builder import LOCAL_DIR_PREFIX, build, imported_model, saved_model
from .errors import RecipeError
from .recipe import RECIPE_SUFFIXES, Recipe
from .training.runs import TRAIN_RECIPE, is_run, load_run


def _names_a_run(name: str | os.PathLike[str]) -> bool:
    """True for a run folder, or a saved model that holds its run's training files (from
    the Hub: downloaded, as building it would)."""
    if is_run(name):
        return True
    saved = saved_model(name)
    return saved is not None and (saved.files_folder() / TRAIN_RECIPE).is_file()


def load(name: str | os.PathLike[str] | Recipe, *, device: Any = None) -> nn.Module:
    """The model ``name`` names, carrying its text (``model.tokenizer``, ``model.generation``
    and, for an encoder, ``model.pooling``)."""
    if isinstance(name, Recipe):
        return build(name, device=device)
    model = imported_model(name, device=device)
    if model is not None:
        return model
    if _names_a_run(name):
        return load_run(name, device=device).model
    path = Path(os.fspath(name))
    folder_like = not path.exists() and len(path.parts) > 1 and path.suffix not in RECIPE_SUFFIXES
    if saved_model(name) is None and (path.is_dir() or folder_like):
        if (path / CONFIG_NAME).is_file():  # a saved model named by its path
            return build(f"{LOCAL_DIR_PREFIX}{path}", device=device)
        what = ("no such folder" if not path.exists() else f"a folder that holds neither "
                f"a run ({TRAIN_RECIPE}) nor a saved model ({CONFIG_NAME})")
        raise RecipeError(f"{path}: {what}. A model is named by a run folder (zoo train "
                          "writes runs/NAME), a saved model (local-dir:PATH, hf-hub:OWNER/NAME) "
                          "or a recipe (zoo list recipes).")
    return build(name, device=device)
