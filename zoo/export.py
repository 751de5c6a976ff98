"""Export a zoo model to the engines users deploy on: ``export(model, folder, format)``.

Every export target is a member of the ``format`` family whose ``writes`` capability
names it (``zoo components format`` lists them; a plugin adds its own): zoo's own are
``transformers`` (each transformers family's format: Marian, the paper's base
Transformer among them; GPT-2; Llama, Qwen2, Mistral; BERT, RoBERTa), ``ctranslate2``
and ``onnx`` (zoo's own format plugins). What the core does is the same for each: it
looks the target up in the registry (an imported model's own format first, then the
others that write the target, each tried until one expresses the model), gives the
writer a new folder beside the destination and moves it into place when the writer
returns (a failed export leaves nothing half-written), and writes ``zoo-export.json``
beside the files: the format, the recipe, and how to call what was written.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from torch import nn

from .artifact import tensor_bytes
from .errors import ExportError, ZooError
from .files import describe_os_error, folder_beside, is_write_failure
from .format_base import as_format, default_vocabulary
from .record import record_of
from .registry import Component, registry

__all__ = ["export", "formats", "ExportError", "default_vocabulary", "to_ctranslate2",
           "to_onnx", "to_transformers"]


def formats() -> list[str]:
    """The export targets the installed formats write (``zoo export --format``)."""
    return sorted({c.capabilities.target for c in registry.qualified("format")
                   if c.capabilities.target})


def _writers(model: nn.Module, format: str) -> list[Component]:
    """The formats that write ``format``, an imported model's own first."""
    imported = record_of(model).imported
    own = imported.format if imported is not None else None
    writers = [c for c in registry.qualified("format") if c.capabilities.target == format]
    return sorted(writers, key=lambda c: c.name != own)


def export(model: nn.Module, folder: str | os.PathLike[str], format: str, *,
           force: bool = False, **options: Any) -> Path:
    """Write ``model`` in ``folder`` for the export target ``format`` (:func:`formats`:
    ``transformers``, ``ctranslate2``, ``onnx``, or a plugin's); ``options`` go to the
    format's ``write`` (``quantization=`` for CTranslate2, ``opset=`` for ONNX,
    ``vocabulary=``, ``tokenizer=``, ``bos_id=`` and ``eos_id=`` for every writer that uses
    them; one that does not take an option refuses it by name). A non-empty ``folder`` is
    replaced only with ``force``. Returns the folder."""
    writers = _writers(model, format)
    if not writers:
        raise ExportError(f"unknown export format {format!r}; zoo exports to "
                          f"{', '.join(formats())} (a format plugin adds more)")
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not force:
        raise ExportError(f"{folder} exists and is not empty; choose another folder or "
                          "pass force=True (zoo export --force) to replace it")
    refusals = []
    for component in writers:
        try:
            with _written(folder, model) as tmp:
                extra = as_format(component.load()(None)).write(model, tmp, export=export, **options)
                _describe(tmp, model, format, extra or {})
            return folder
        except ExportError as exc:
            if len(writers) == 1:
                raise
            refusals.append(f"{component.name}: {exc}")
        except ZooError as exc:
            if len(writers) == 1:
                raise ExportError(str(exc)) from None
            refusals.append(f"{component.name}: {exc}")
        except (TypeError, KeyError, AttributeError) as exc:  # a family for other models
            refusals.append(f"{component.name}: cannot write this model ({exc!r})")
    raise ExportError(f"no {format} format expresses this model:\n" + "\n".join(refusals))


# the functions of earlier releases, one target each
def to_ctranslate2(model: nn.Module, folder: str | os.PathLike[str], **options: Any) -> Path:
    """``export(model, folder, "ctranslate2", **options)``."""
    return export(model, folder, "ctranslate2", **options)


def to_onnx(model: nn.Module, folder: str | os.PathLike[str], **options: Any) -> Path:
    """``export(model, folder, "onnx", **options)``."""
    return export(model, folder, "onnx", **options)


def to_transformers(model: nn.Module, folder: str | os.PathLike[str], **options: Any) -> Path:
    """``export(model, folder, "transformers", **options)``."""
    return export(model, folder, "transformers", **options)


@contextlib.contextmanager
def _written(folder: Path, model: nn.Module):
    """A temporary folder beside ``folder`` that takes its place when the block succeeds
    (:func:`zoo.files.folder_beside`). A write the file system refuses (a full disk, in
    whatever words the writer uses) is one ExportError naming the disk, the space free
    and about the space needed (the model's weights)."""
    try:
        with folder_beside(folder) as tmp:
            yield tmp
    except Exception as exc:
        if not is_write_failure(exc):
            raise
        need = tensor_bytes(model.state_dict().values())
        kept = " What was there before is kept." if folder.exists() else ""
        raise ExportError(f"Could not export to {folder}: "
                          f"{describe_os_error(exc, folder, need)}.{kept}") from None


def _describe(folder: Path, model: nn.Module, fmt: str, extra: dict) -> None:
    from .version import __version__

    recipe = record_of(model).recipe
    info = {"format": fmt, "zoo": __version__,
            "recipe": recipe.model_dump(mode="json") if recipe is not None else None, **extra}
    (folder / "zoo-export.json").write_text(json.dumps(info, indent=2) + "\n")
