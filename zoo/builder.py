"""``zoo.build``: a name or a recipe, plus overrides, to an ``nn.Module``.

This is the one place that reads a name. A name is a built-in recipe, a recipe
file, or a saved model: ``local-dir:path`` or ``hf-hub:owner/repo[@revision]``
(as a string or any ``os.PathLike``). The call travels once, downward: read the
name -> fetch what is remote (``hub``: paths only) -> read the config and the
weights (``artifact``: the format only) -> validate (``resolve``) -> build the
modules -> load the weights strictly. ``build`` is entered once; nothing below it
builds a model.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import hub
from .foreign import (
    GENERATION_NAME,
    FolderTokenizer,
    convert_weights,
    file_patterns,
    foreign_config,
    foreign_recipe,
    read_foreign,
)
from ._text import format_bytes, quoted, with_article
from .artifact import check_digests, load_weights, read_config, read_weights, weight_files
from .decoding import fits_vocabulary, parse_settings
from .embedding import pooling_of, read_pooling
from .errors import ArtifactError, CorruptFileError, FormatError, MemoryBudgetError, RecipeError
from .files import recover
from .hardware import memory_available, memory_limits
from .kinds import Kind
from .quantization import MODES as QUANTIZE_MODES
from .quantization import quantize as quantize_model
from .recipe import PretrainedWeights, Recipe, list_recipes
from .recipe import catalogue_recipe
from .record import ModelRecord, record_of, stamp, update_record
from .reranking import read_activation
from .resolver import Resolved, resolve

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"


@dataclass(frozen=True)
class SavedModel:
    """A saved model named by ``local-dir:path`` or ``hf-hub:owner/repo[@revision]``."""

    name: str
    """The name as the user wrote it (errors quote it)."""
    folder: Path | None = None
    """``local-dir:``: the folder."""
    repo_id: str | None = None
    """``hf-hub:``: the repository, and its revision."""
    revision: str | None = None

    def config_folder(self, force: bool = False) -> Path:
        """A folder holding the saved model's ``config.json`` (from the Hub: only that file;
        ``force``: downloaded again even when cached)."""
        if self.folder is not None:
            return self._local()
        return hub.download_config(self.repo_id, self.revision, what=self.name, force=force)

    def files_folder(self, patterns: list[str] | None = None, force: bool = False) -> Path:
        """A folder holding all the saved model's files (from the Hub: downloaded or cached;
        ``patterns``: a foreign format's files instead of a zoo artifact's; ``force``:
        downloaded again even when cached)."""
        if self.folder is not None:
            return self._local()
        return hub.download(self.repo_id, self.revision, what=self.name, patterns=patterns,
                            force=force)

    def _local(self) -> Path:
        recover(self.folder)  # a save killed halfway through its swap: the old one is back
        if not self.folder.is_dir():
            raise ArtifactError(f"{self.name}: no such folder.")
        return self.folder


def saved_model(name: str | os.PathLike[str] | Recipe) -> SavedModel | None:
    """The saved model ``name`` names, or None when it names a recipe (a name, a file or
    a :class:`Recipe`). Strings and ``os.PathLike`` are read alike."""
    if isinstance(name, Recipe):
        return None
    if not isinstance(name, (str, os.PathLike)):
        raise RecipeError(f"A model is named by a recipe's name, a recipe file, a saved "
                          f"model ('hf-hub:owner/repo', 'local-dir:path') or a zoo.Recipe; got "
                          f"{with_article(type(name).__name__)}. A recipe held as data is built "
                          "through zoo.Recipe.model_validate(data).")
    text = os.fspath(name)
    if not isinstance(text, str):
        raise RecipeError(f"A model is named by a str or a path, got bytes {text!r}.")
    if text.startswith(LOCAL_DIR_PREFIX):
        return SavedModel(text, folder=Path(text[len(LOCAL_DIR_PREFIX):]).expanduser())
    if text.startswith(HF_HUB_PREFIX):
        repo_id, revision = hub.parse_repo(text[len(HF_HUB_PREFIX):], what=text)
        return SavedModel(text, repo_id=repo_id, revision=revision)
    return None


def get_recipe(name: str | os.PathLike[str] | Recipe) -> Recipe:
    """A recipe by name (built-in), from a ``.yaml``/``.json`` path, or the config of a
    saved model (``hf-hub:owner/repo``, ``local-dir:path``: only ``config.json`` is read)."""
    saved = saved_model(name)
    if saved is None:
        return catalogue_recipe(name)
    def read() -> Recipe:
        folder = saved.config_folder()
        config = foreign_config(folder, saved.name)
        if config is not None:  # a transformers folder, mapped by its format plugin
            return foreign_recipe(config, saved.name, folder)
        return read_config(folder, saved.name)[0]

    return _evicting_bad_files(saved, read)


def imported_model(name: str | os.PathLike[str], **kwargs: Any) -> nn.Module | None:
    """The model ``name`` names when it is a folder in a foreign format (a transformers
    folder: built through its format plugin, ``model.imported`` set), else None (a
    recipe, a zoo artifact, a run). ``kwargs`` go to :func:`build`."""
    saved = saved_model(name) if not isinstance(name, Recipe) else None
    if saved is None and isinstance(name, (str, os.PathLike)) and Path(name).is_dir():
        saved = saved_model(f"{LOCAL_DIR_PREFIX}{os.fspath(name)}")
    if saved is None or foreign_config(saved.config_folder(), saved.name) is None:
        return None
    return build(saved.name, **kwargs)


def _instantiate(resolved: Resolved, source: str) -> nn.Module:
    model = resolved.architecture.load()(resolved.settings, resolved)
    stamp(model, ModelRecord(kind=resolved.kind, recipe=resolved.recipe,
                             settings=resolved.settings, source=source))
    if resolved.kind is Kind.ENCODER:  # the default; an imported folder's own files: below
        update_record(model, pooling=pooling_of(model))
    return model


def build(
    name: str | os.PathLike[str] | Recipe,
    *,
    pretrained: bool | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
    **overrides: Any,
) -> nn.Module:
    """Build a model from a named recipe, a recipe file or a :class:`Recipe`.

    Keyword overrides replace a slot's component (``norm="rmsnorm"``), an
    architecture setting (``encoder_layers=3``) or a component setting
    (``**{"norm.eps": 1e-5}``); each is validated before anything is built.
    ``device="meta"`` builds without allocating memory.

    ``hf-hub:owner/repo[@revision]`` and ``local-dir:path`` name saved models (see
    ``zoo.save_pretrained``): their recipe and, unless ``pretrained=False``, their
    weights. ``pretrained=True`` on a named recipe loads its published weights
    (``zoo.list_recipes(pretrained=True)``), converted to zoo's names.

    >>> import zoo
    >>> m = zoo.build("transformer-tiny", norm="rmsnorm")
    >>> type(m.encoder.layers[0].norm1).__name__
    'RMSNorm'
    """
    if quantize is not None:
        _check_quantize(quantize, device)
        model = build(name, pretrained=pretrained, device=device, dtype=dtype, **overrides)
        return quantize_model(model, quantize)
    saved = saved_model(name)
    if saved is not None:
        return _build_saved(saved, weights=pretrained is not False, device=device, dtype=dtype,
                            overrides=overrides)
    recipe = catalogue_recipe(name)
    state = None
    if pretrained:
        if recipe.weights is None:
            raise RecipeError(
                f"Recipe {recipe.name!r} names no published weights, so pretrained=True has "
                f"nothing to load. Recipes with weights: {quoted(list_recipes(pretrained=True))}; "
                "a saved model is built from 'hf-hub:owner/repo' or 'local-dir:path'."
            )
        if str(device) == "meta":
            raise RecipeError("pretrained=True cannot load weights into a model on the meta "
                              "device.")
        state, source = _published_weights(recipe.weights)
    return _assemble(recipe, overrides, device=device, dtype=dtype, state=state,
                     source=source if state is not None else recipe.name)


def load_artifact(
    folder: str | os.PathLike[str],
    *,
    source: str | None = None,
    weights: bool = True,
    device: Any = None,
    dtype: torch.dtype | None = None,
    quantize: str | None = None,
    **overrides: Any,
) -> nn.Module:
    """The model saved in ``folder`` (``zoo.save_pretrained``): built from its config, its
    weights loaded strictly; the same as ``zoo.build("local-dir:" + folder)``. ``source``
    names it in errors; ``quantize="int8"`` quantizes it for inference (``zoo.quantize``)."""
    if quantize is not None:
        _check_quantize(quantize, device)
    folder = Path(folder)
    saved = SavedModel(source or f"{LOCAL_DIR_PREFIX}{folder}", folder=folder)
    model = _build_saved(saved, weights=weights, device=device, dtype=dtype, overrides=overrides)
    return model if quantize is None else quantize_model(model, quantize)


def _check_quantize(mode: str, device: Any) -> None:
    """Refuse, before anything is built, a quantization zoo does not have or a device
    its int8 kernels do not run on."""
    if mode not in QUANTIZE_MODES:
        raise RecipeError(f"quantize={mode!r} is not a quantization zoo has; use one of "
                          f"{quoted(list(QUANTIZE_MODES))}, or leave it out for the "
                          "model's own dtype.")
    if device is not None and torch.device(device).type != "cpu":
        raise RecipeError(f"quantize={mode!r} runs on the CPU (PyTorch's and zoo's CPU kernels); "
                          f"build on device 'cpu', not {str(device)!r}.")


def _build_saved(saved: SavedModel, *, weights: bool, device: Any, dtype: torch.dtype | None,
                 overrides: dict[str, Any]) -> nn.Module:
    """A saved model: its config, then its weights (read before anything is built). A
    folder in a foreign format is read through its format plugin; the model keeps what
    it came with (tokenizer, generation settings) as ``model.imported``.

    From the Hub, a cached file found wrong (a digest that differs, JSON that does not
    parse) never stays in the cache: it is removed, said, and downloaded once more; if
    the new copy is wrong too, it is removed again and the error says so."""
    return _evicting_bad_files(saved, lambda: _build_saved_once(
        saved, weights=weights, device=device, dtype=dtype, overrides=overrides))


def _evicting_bad_files(saved: SavedModel, read: Callable[[], Any]) -> Any:
    """``read()``; from the Hub, a cached file it finds wrong is removed, said, and read
    once more from a new download (see :func:`_build_saved`)."""
    try:
        return read()
    except CorruptFileError as exc:
        if saved.repo_id is None:
            raise
        removed = hub.evict(exc.paths)
        warnings.warn(f"{saved.name}: {quoted(removed)} in the Hub cache "
                      f"{'was' if len(removed) == 1 else 'were'} not what the repository "
                      "holds (a download went wrong); removed, downloading again.",
                      hub.HubWarning, stacklevel=4)
    try:
        return read()
    except CorruptFileError as again:
        removed = hub.evict(again.paths)
        raise CorruptFileError(
            f"{again} Downloaded twice, wrong both times: the repository itself may hold a "
            f"bad file. The bad cached copy ({quoted(removed)}) was removed, so nothing "
            "wrong stays in the cache.", again.paths) from None


def _build_saved_once(saved: SavedModel, *, weights: bool, device: Any,
                      dtype: torch.dtype | None, overrides: dict[str, Any]) -> nn.Module:
    config_folder = saved.config_folder()
    foreign = foreign_config(config_folder, saved.name)
    if foreign is not None:
        patterns = [p for p in file_patterns(foreign, saved.name)
                    if weights or "safetensors" not in p]  # pretrained=False: no weights
        folder = saved.files_folder(patterns)
        recipe, state, imported = read_foreign(folder, foreign, saved.name, weights=weights)
        model = _assemble(recipe, overrides, device=device, dtype=dtype, state=state,
                          source=saved.name)
        record = record_of(model)
        text = dict(imported=imported, tokenizer=FolderTokenizer(imported),  # read at first use
                    generation=imported.generation)
        if record.kind is Kind.ENCODER:  # its sentence-transformers files, read once
            text["pooling"] = read_pooling(imported.folder, saved.name, record.pooling.max_tokens)
            if record.settings.head == "classification":
                text["score_activation"] = read_activation(
                    imported.config, record.settings.num_labels, saved.name)
        update_record(model, **text)
        if imported.generation is not None:
            try:
                fits_vocabulary(model, imported.generation)
            except RecipeError as exc:
                raise FormatError(f"{saved.name}: its generation settings ({GENERATION_NAME}, "
                                  f"or config.json's) cannot decode it: {exc}.") from None
        return model
    folder = saved.files_folder() if weights else config_folder
    recipe, config = read_config(folder, saved.name)
    state = read_weights(weight_files(folder, saved.name), saved.name) if weights else None
    model = _assemble(recipe, overrides, device=device, dtype=dtype, state=state,
                      source=saved.name)
    if weights:  # after the strict load, whose errors name the tensors
        check_digests(folder, config, saved.name)
    if config.get("generation") is not None:
        try:
            update_record(model, generation=fits_vocabulary(
                model, parse_settings(config["generation"], "generation settings")))
        except RecipeError as exc:
            raise ArtifactError(f"{saved.name}: config.json's \"generation\" cannot be used "
                                f"({exc}); remove it to decode by the architecture's "
                                "defaults.") from None
    return model


def _published_weights(weights: PretrainedWeights) -> tuple[dict[str, torch.Tensor], str]:
    """A recipe's published weights, downloaded and converted to zoo's names."""
    what = f"{HF_HUB_PREFIX}{weights.hub}/{weights.filename}@{weights.revision}"
    path = hub.download_file(weights.hub, weights.filename, weights.revision, what=what)
    return convert_weights(weights.converter, read_weights([path], what), what), what


def _assemble(recipe: Recipe, overrides: dict[str, Any], *, device: Any,
              dtype: torch.dtype | None, state: dict[str, torch.Tensor] | None,
              source: str) -> nn.Module:
    """Validate, check the memory, build on ``device``, load ``state`` strictly, cast. A
    model given weights is in eval mode, as transformers' ``from_pretrained`` gives one:
    a pretrained model's dropout is off until ``model.train()``; a recipe's new model is
    in training mode, as a new ``nn.Module`` is."""
    resolved = resolve(recipe, overrides, device=device)
    if str(device) != "meta":
        check_memory(resolved, device=device, dtype=dtype)
    with torch.device(device or "cpu"):
        model = _instantiate(resolved, source)
    if state is not None:
        load_weights(model, state, source)
        model.eval()
    if dtype is not None:
        model = model.to(dtype)
    return model


@dataclass
class Footprint:
    """Parameter count and the bytes the weights need."""

    parameters: int
    buffers: int
    dtype: torch.dtype

    def bytes_in(self, dtype: torch.dtype) -> int:
        """Bytes of parameters and buffers stored in ``dtype``."""
        return (self.parameters + self.buffers) * dtype.itemsize

    @property
    def bytes(self) -> int:
        """Bytes of parameters and buffers in the footprint's dtype."""
        return self.bytes_in(self.dtype)


class _NoInit(torch.overrides.TorchFunctionMode):
    """Skips the in-place initialisers (``normal_``, ``uniform_``, ...) while a model is
    built on the meta device only to be counted: on meta tensors they go through
    torch's reference implementations, whose first use imports torch._dynamo (about
    two seconds of a fresh process's ``zoo.build``)."""

    SKIPPED = {torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.zero_,
               torch.Tensor.fill_, torch.Tensor.copy_,
               torch.Tensor.exponential_, torch.Tensor.bernoulli_}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = args[0] if args else kwargs.get("tensor")
        skip = func in self.SKIPPED or getattr(func, "__module__", "") == "torch.nn.init"
        if skip and getattr(target, "is_meta", False):
            return target
        return func(*args, **kwargs)


def footprint(resolved: Resolved, dtype: torch.dtype | None = None) -> Footprint:
    """Count the parameters of a resolved recipe by building it on the meta device."""
    with torch.device("meta"), _NoInit():
        model = _instantiate(resolved, resolved.recipe.name)
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return Footprint(params, buffers, dtype or torch.get_default_dtype())


def check_memory(resolved: Resolved, *, device: Any = None, dtype: torch.dtype | None = None) -> Footprint:
    """Refuse a recipe whose weights need more memory than the device has."""
    fp = footprint(resolved, dtype)
    have = memory_available(device)
    if fp.bytes > have:
        where = device or "cpu"
        if torch.device(where).type == "cpu":
            name = min(memory_limits(), key=lambda limit: limit[1])[0]
            where = f"cpu (what {name} leaves this process)"
        raise MemoryBudgetError(
            f"Recipe {resolved.recipe.name!r} needs about {format_bytes(fp.bytes)} for its "
            f"weights alone ({fp.parameters:,} parameters in {fp.dtype}), more than the "
            f"{format_bytes(have)} of memory free on {where}. Nothing was allocated. "
            "Make it smaller (d_model, layers, vocab_size) or build it on device='meta'."
        )
    return fp
