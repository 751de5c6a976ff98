"""What a training task is (the ``task`` family), and the pieces the built-in tasks share.

A task is built as ``cls(settings, *, seed, workdir)`` and offers:

- ``prepare()``: read or make its data (and tokenizer), once;
- ``model_overrides()``: what the model must be told (vocabulary size, pad id, classes);
- ``dataset(split)``: a sized, indexable dataset for ``train``, ``valid`` or ``test``;
- ``collate(items)``: a list of items -> a batch (dict of tensors);
- ``loss(model, batch, label_smoothing=0.0)`` -> (mean loss, count of units), where the units
  are the tokens or images the mean is over;
- ``evaluate(model, split, batch_size=)`` -> metrics (dict of floats), ``metric``: the name of
  the one that says how well the task is done;
- ``unit``: ``tokens`` or ``images``, for throughput.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import ZooError


class TaskDataError(ZooError):
    """A task's data is missing or unreadable; the message says how to get it."""


@runtime_checkable
class Task(Protocol):
    unit: str
    metric: str

    def prepare(self) -> None: ...
    def model_overrides(self) -> dict[str, Any]: ...
    def dataset(self, split: str) -> Any: ...
    def collate(self, items: list) -> dict: ...
    def loss(self, model, batch: dict, label_smoothing: float = 0.0): ...
    def evaluate(self, model, split: str, batch_size: int = 64) -> dict[str, float]: ...


def missing_debian_package(package: str, path: Path, what: str) -> TaskDataError:
    return TaskDataError(
        f"{what} is read from Debian's {package!r} package, and {path} is missing. Install it "
        f"with: sudo apt-get install -y {package}  (then `dpkg -L {package}` lists its files)"
    )
