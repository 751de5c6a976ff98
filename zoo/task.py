"""What a training task is (the ``task`` family), and the pieces the built-in tasks share.

A task is built as ``cls(settings, *, seed, workdir)`` (``workdir``: the run folder,
where it may keep files such as a tokenizer) and offers what :class:`Task` lists.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ._text import quoted, with_article
from .errors import PluginError, ZooError


class TaskDataError(ZooError):
    """A task's data is missing or unreadable; the message says how to get it."""


@runtime_checkable
class Task(Protocol):
    """The members the training loop uses. ``unit``: ``tokens`` or ``images``, for
    throughput; ``metric``: the name of the metric that says how well the task is done."""

    unit: str
    metric: str

    def prepare(self) -> None:
        """Read or make the data (and tokenizer), once."""

    def model_overrides(self) -> dict[str, Any]:
        """What the model must be told: vocabulary size, pad id, classes."""

    def dataset(self, split: str) -> Any:
        """A sized, indexable dataset for ``train``, ``valid`` or ``test``."""

    def collate(self, items: list) -> dict:
        """A list of items -> a batch (a dict of tensors)."""

    def loss(self, model: Any, batch: dict, criterion: Any) -> Any:
        """``(mean loss, count of units)``: the units (tokens, images) the mean is over.
        ``criterion`` is the training recipe's loss (family ``loss``): called as
        ``criterion(logits (N, C), target (N,), ignore_index=pad)`` it gives the mean."""

    def evaluate(self, model: Any, split: str, *, device: Any = None,
                 limit: int | None = None) -> dict[str, float]:
        """Metrics on ``split`` (at most ``limit`` examples), including ``metric``."""


# Optional: ``lower_is_better = True`` when a smaller ``metric`` is the better one
# (perplexity): the loop's best checkpoint, ``target`` and patience then follow it down.
# Optional: ``data_bytes() -> int | None``, about how much memory ``prepare`` will hold.
# The training loop calls it before ``prepare`` and refuses, with MemoryBudgetError,
# data larger than the machine's memory (a typo of num_samples, say).

TASK_MEMBERS = (*Task.__annotations__, *(name for name, value in vars(Task).items()
                                         if callable(value) and not name.startswith("_")))
"""What :class:`Task` asks of a task object."""


def check_task(task: Any, name: str, plugin: str) -> None:
    """Refuse, naming what is missing, a task object that lacks members :class:`Task` lists."""
    if isinstance(task, Task):
        _check_loss_signature(task, name, plugin)
        return
    missing = [m for m in TASK_MEMBERS if not hasattr(task, m)]
    raise PluginError(
        f"task {name!r} from plugin {plugin!r} is {with_article(type(task).__name__)} without "
        f"{quoted(missing)}; a task offers {quoted(TASK_MEMBERS)} (see zoo.task.Task)."
    )


def _check_loss_signature(task: Any, name: str, plugin: str) -> None:
    """Refuse a task written for the contract before the loss family, whose ``loss`` took
    ``label_smoothing``: it would be handed a loss module in its place."""
    try:
        params = list(inspect.signature(task.loss).parameters)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    if len(params) >= 3 and params[2] == "label_smoothing":
        raise PluginError(
            f"task {name!r} from plugin {plugin!r} defines loss(model, batch, "
            "label_smoothing): the contract before losses became a family. A task's loss is "
            "now loss(model, batch, criterion), criterion being the training recipe's loss "
            "(criterion(logits, target, ignore_index=pad) -> the mean); label smoothing is "
            "its setting (loss: {name: cross-entropy, settings: {label_smoothing: 0.1}}).")


def missing_debian_package(package: str, path: Path, what: str) -> TaskDataError:
    """The error for task data read from a Debian package that is not installed."""
    return TaskDataError(
        f"{what} is read from Debian's {package!r} package, and {path} is missing. Install it "
        f"with: sudo apt-get install -y {package}  (then `dpkg -L {package}` lists its files)"
    )
