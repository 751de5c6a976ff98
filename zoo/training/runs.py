"""The run folder: what ``zoo train`` writes, and a run loaded back.

This module owns the folder's layout. A run folder holds ``train.yaml`` (the
training recipe as run), ``model.yaml`` (the model recipe as built, with the
task's overrides), ``metrics.jsonl`` (one JSON object per log line),
``checkpoints/`` (:mod:`zoo.training.checkpoint`), the task's own files (the
translation task writes ``tokenizer.json``, which a saved model carries: see
``artifact.TRAINING_FILES``), and at the end ``model.safetensors`` and
``results.json``. ``load_run`` turns a run into its model, task and recipe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import artifact
from .._text import format_bytes
from ..builder import SavedModel, build, load_artifact, saved_model
from ..decoding import settings_for
from ..errors import MemoryBudgetError, RecipeError
from ..hardware import memory_available
from ..files import atomic_write, atomic_write_text
from ..recipe import Recipe, dump_recipe, load_recipe
from ..registry import registry
from ..record import record_of, update_record
from ..task import Task, check_task
from .checkpoint import WEIGHTS_NAME, latest_checkpoint
from .config import TrainRecipe, load_train_recipe, save_train_recipe

TRAIN_RECIPE = artifact.TRAIN_RECIPE_NAME
"""``train.yaml``: the training recipe as run (a saved model carries it too)."""
MODEL_RECIPE = "model.yaml"
"""The model recipe as built, with the task's overrides."""
WEIGHTS = WEIGHTS_NAME
"""``model.safetensors``: the final weights."""
RESULTS = artifact.RESULTS_NAME
"""``results.json``: the test metrics, steps and seconds."""
SAMPLES = "samples.md"
"""Test inputs, their references and the model's outputs, for a person to judge (tasks
that have ``samples``)."""
METRICS = "metrics.jsonl"
"""One JSON object per log line (train, valid and test rows)."""
TENSORBOARD = "tensorboard"
"""TensorBoard's event files, when tensorboard is installed."""


def is_run(path: str | Path) -> bool:
    """True when ``path`` is a run folder (it holds ``train.yaml``)."""
    return (Path(path) / TRAIN_RECIPE).is_file()


def new_run_dir(name: str, root: Path = Path("runs")) -> Path:
    """runs/NAME, or runs/NAME-2, -3, ... when taken."""
    path, n = root / name, 1
    while path.exists() and any(path.iterdir()):
        n += 1
        path = root / f"{name}-{n}"
    return path


class RunFolder:
    """The files of one run folder, read and written by name."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        """True when the folder holds a run (``train.yaml``)."""
        return is_run(self.path)

    def train_recipe(self) -> TrainRecipe:
        """The training recipe as run."""
        return load_train_recipe(self.path / TRAIN_RECIPE)

    def model_recipe(self) -> Recipe:
        """The model recipe as built."""
        return load_recipe(self.path / MODEL_RECIPE)

    def results(self) -> dict[str, Any]:
        """``results.json``, or an empty dict before the run has finished."""
        path = self.path / RESULTS
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def metrics(self) -> list[dict[str, Any]]:
        """Every row of ``metrics.jsonl``."""
        path = self.path / METRICS
        if not path.exists():
            raise RecipeError(f"{path} does not exist: is {self.path} a run folder made by "
                              "zoo train?")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def published_files(self) -> dict[str, Path]:
        """The run's files a saved model carries (training recipe, results, tokenizer)."""
        return {name: self.path / name for name in artifact.TRAINING_FILES
                if (self.path / name).is_file()}

    def weights(self) -> Path | None:
        """The final weights, else the latest checkpoint's, else None."""
        if (self.path / WEIGHTS).exists():
            return self.path / WEIGHTS
        checkpoint = latest_checkpoint(self.path)
        return checkpoint / WEIGHTS_NAME if checkpoint is not None else None

    # -- writing ------------------------------------------------------------------------------
    def write_train_recipe(self, recipe: TrainRecipe) -> None:
        """Write ``train.yaml`` (creating the folder)."""
        self.path.mkdir(parents=True, exist_ok=True)
        save_train_recipe(recipe, self.path / TRAIN_RECIPE)

    def write_model_recipe(self, recipe: Recipe) -> None:
        """Write ``model.yaml``."""
        atomic_write_text(self.path / MODEL_RECIPE, dump_recipe(recipe))

    def truncate_metrics(self, after_step: int) -> None:
        """Drop the rows of ``metrics.jsonl`` past ``after_step`` (those of an attempt that was
        killed after its last checkpoint, and is being done again)."""
        path = self.path / METRICS
        if not path.is_file():
            return
        kept = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # a line cut short by the kill
            if isinstance(row, dict) and isinstance(row.get("step"), int) and \
                    row["step"] <= after_step:
                kept.append(line)
        atomic_write_text(path, "".join(f"{line}\n" for line in kept))

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Add one row to ``metrics.jsonl``."""
        with open(self.path / METRICS, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")

    def write_final(self, model: Any, results: dict[str, Any]) -> None:
        """Write the final weights, then ``results.json`` (each atomically)."""
        atomic_write(self.path / WEIGHTS, lambda tmp: artifact.save_weights_file(model, tmp))
        atomic_write_text(self.path / RESULTS, json.dumps(results, indent=2) + "\n")


    def write_samples(self, rows: list[dict[str, str]]) -> None:
        """Write ``samples.md``: one block per sample, each of its fields on a line."""
        blocks = []
        for i, row in enumerate(rows, 1):
            blocks.append(f"{i}.\n" + "".join(f"    - {k}: {v}\n" for k, v in row.items()))
        atomic_write_text(self.path / SAMPLES, "# Samples from the test split\n\n"
                          + "\n".join(blocks))


def format_samples(rows: list[dict[str, str]]) -> str:
    """Samples as text for a terminal: each sample's fields, one per line."""
    width = max((len(k) for row in rows for k in row), default=0)
    return "\n\n".join("\n".join(f"{k.rjust(width)}: {v}" for k, v in row.items())
                       for row in rows)


def build_task(recipe: TrainRecipe, run_dir: Path | None) -> Task:
    """The recipe's task, built with its settings, seed and working folder (the run's)."""
    component = registry.get("task", recipe.task.name)
    settings = component.validate_settings(recipe.task.settings)
    task = component.load()(settings, seed=recipe.seed, workdir=run_dir)
    check_task(task, recipe.task.name, component.plugin)
    _check_data_memory(task, recipe.task.name)
    return task


def _check_data_memory(task: Any, name: str) -> None:
    """Refuse, before ``prepare`` allocates anything, a task whose data would need more
    memory than the machine has (the task says how much through ``data_bytes()``)."""
    estimate = getattr(task, "data_bytes", None)
    if not callable(estimate):
        return
    need, have = estimate(), memory_available("cpu")
    if need is not None and need > have:
        raise MemoryBudgetError(
            f"task {name!r} would hold about {format_bytes(need)} of data in memory with "
            f"these settings, more than the {format_bytes(have)} this machine has. Nothing "
            "was allocated. Ask for fewer examples (task.num_samples, say).")


def build_loss(recipe: TrainRecipe, task: Any) -> Any:
    """The recipe's loss (family ``loss``), refused when the task pads its targets and the
    loss does not claim ``ignore_index``."""
    component = registry.get("loss", recipe.loss.name)
    pad = getattr(task, "pad_id", None)
    if pad is not None and not component.capabilities.ignore_index:
        raise RecipeError(
            f"loss {recipe.loss.name!r} (plugin {component.plugin!r}) does not claim "
            f"ignore_index, and task {recipe.task.name!r} pads its targets with id {pad}: "
            "padding would be trained on. Use a loss that ignores padding (cross-entropy, "
            "focal), or declare ignore_index if it does.")
    return component.build(recipe.loss.settings)


def adopt_task_text(model: Any, task: Any) -> Any:
    """``model`` carrying its task's text: decoding as the task says (``task.generation()``:
    the task's token ids, beam and length limit, as generation settings by name), for a
    task and model that generate; reading and writing text by the task's tokenizer
    (``task.text_tokenizer()``, as ``model.tokenizer``), for a task that reads text."""
    settings = getattr(task, "generation", None)
    if callable(settings) and record_of(model).generation is not None:
        update_record(model, generation=settings_for(model, **settings()))
    text = getattr(task, "text_tokenizer", None)
    if callable(text):
        update_record(model, tokenizer=text())
    return model


@dataclass
class Run:
    """A run loaded back: its folder, training recipe, trained model and task."""

    path: Path
    recipe: TrainRecipe
    model: Any
    task: Any


def load_run(path: str | Path, device: str | None = None) -> Run:
    """The model of run folder ``path`` (its final weights, else its latest checkpoint),
    or of a saved run (``local-dir:path``, ``hf-hub:owner/repo``: a model saved from a run
    carries its training recipe and its task's files, such as the tokenizer)."""
    saved = saved_model(path)  # strings and paths alike, as zoo.build reads them
    if saved is not None:
        return _load_saved_run(saved, device)
    run = RunFolder(path)
    if not run.exists() or not (run.path / MODEL_RECIPE).exists():
        raise RecipeError(f"{run.path} is not a run folder (no {TRAIN_RECIPE} and "
                          f"{MODEL_RECIPE}); zoo train writes them in runs/NAME.")
    recipe = run.train_recipe()
    task = build_task(recipe, run.path)  # tasks read their data when it is first asked for
    model = build(run.model_recipe(), device=device)
    weights = run.weights()
    if weights is None:
        raise RecipeError(f"{run.path} has no trained weights yet (no {WEIGHTS} and no "
                          "checkpoint).")
    artifact.load_weights_file(model, weights)
    return Run(run.path, recipe, adopt_task_text(model.eval(), task), task)


def _load_saved_run(saved: SavedModel, device: str | None) -> Run:
    """A run saved with its training files: its model, and its task reading those files."""
    folder = saved.files_folder()
    if not (folder / TRAIN_RECIPE).is_file():
        raise RecipeError(
            f"{saved.name} holds no {TRAIN_RECIPE}: it was saved from a model, not from a "
            f"zoo train run, so there is no task (or tokenizer) to decode with. Save a run "
            "with its training files: zoo save runs/NAME OUT.")
    recipe = load_train_recipe(folder / TRAIN_RECIPE)
    task = build_task(recipe, folder)  # reads what the run's task saved (tokenizer.json)
    model = load_artifact(folder, source=saved.name, device=device)
    return Run(folder, recipe, adopt_task_text(model.eval(), task), task)
