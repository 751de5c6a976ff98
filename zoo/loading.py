"""The one loader of a model by any name that carries its text: ``load(name)``.

A transformers folder (``local-dir:``, ``hf-hub:``) is built through its format, with its
own tokenizer (read once, at first use) and generation settings; a run folder, or a run
saved with ``zoo save`` / ``zoo push``, gives its model with its task's tokenizer as
``model.tokenizer`` where the task reads text. ``zoo generate`` and ``zoo embed`` call
it once and take what the model carries, whatever kind of folder it came from.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from .builder import imported_model
from .training.runs import load_run


def load(name: str | os.PathLike[str], *, device: Any = None) -> nn.Module:
    """The model ``name`` names, carrying its text: ``model.generation``, and its
    tokenizer (an imported model's own; a run's task's as ``model.tokenizer``)."""
    model = imported_model(name, device=device)
    if model is not None:
        return model
    run = load_run(name, device=device)
    text = getattr(run.task, "text_tokenizer", None)
    if text is not None:
        run.model.tokenizer = text()
    return run.model
