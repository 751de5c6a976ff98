"""The conformance kit's checks of the task family: a task offers what the training loop
calls, with today's signatures, and gives batches of tensors from its data.

The kit builds the task as the loop does (``cls(settings, seed=0, workdir=FOLDER)``); a
task whose data is not on this machine (:class:`~zoo.task.TaskDataError`) skips the
checks that read it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from .._text import with_article
from ..task import TaskDataError, check_task
from .contract import Failed, Skip, check


def _built(component, settings, workdir: Path):
    return component.load()(settings, seed=0, workdir=workdir)


@check("task")
def _task_members(component, settings):
    """The built task offers every member of ``zoo.task.Task`` (``unit``, ``metric``,
    ``prepare``, ``model_overrides``, ``dataset``, ``collate``, ``loss``, ``evaluate``),
    its ``loss`` takes the training recipe's criterion, and ``unit`` names what the loop
    counts (``tokens``, ``images``, ``pairs``)."""
    with tempfile.TemporaryDirectory(prefix="zoo-kit-") as work:
        task = _built(component, settings, Path(work))
        try:
            check_task(task, component.name, component.plugin)
        except Exception as exc:
            raise Failed(str(exc)) from None
        if not isinstance(task.unit, str) or not task.unit:
            raise Failed(f"unit {task.unit!r}: the loop counts units by this name "
                         "('tokens', 'images', 'pairs')")


@check("task")
def _task_batches(component, settings):
    """After ``prepare()``, each split is a sized dataset (the training one not empty),
    ``collate`` makes a dict of tensors with one row per item, and
    ``model_overrides()`` is a dict of what the model must be told."""
    with tempfile.TemporaryDirectory(prefix="zoo-kit-") as work:
        task = _built(component, settings, Path(work))
        try:
            task.prepare()
        except TaskDataError as exc:
            raise Skip(f"its data is not here ({exc})") from None
        overrides = task.model_overrides()
        if not isinstance(overrides, dict):
            raise Failed(f"model_overrides() gave {with_article(type(overrides).__name__)}, "
                         "not a dict")
        train = task.dataset("train")
        if len(train) == 0:
            raise Failed("the training split is empty")
        batch = task.collate([train[i] for i in range(min(2, len(train)))])
        if not isinstance(batch, dict) or not batch:
            raise Failed(f"collate gave {type(batch).__name__}, not a dict of tensors")
        tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
        if not tensors or any(t.shape[0] != min(2, len(train)) for t in tensors):
            raise Failed(f"collate's tensors {[tuple(t.shape) for t in tensors]} do not hold "
                         "one row per item")
