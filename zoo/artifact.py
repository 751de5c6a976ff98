"""The artifact format: a saved model as a folder of ``config.json``, safetensors
weights, a model card ``README.md`` and, for a trained run, its training files.

This module is the format only: it writes and reads configs and weights and loads
weights strictly into a model it is given; it never builds a model (``zoo.build``
does, one layer up). Weights come only from safetensors, a config can only name
registered components, and loading is strict: a missing, unexpected or misshapen
tensor is named. Nothing half-written is left: the folder is written beside its
destination and moved into place.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._text import quoted
from .errors import ArtifactError, MissingPluginError
from .files import folder_beside
from .recipe import Recipe
from .registry import registry
from .version import __version__

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_PATTERN = "model{suffix}.safetensors"
CARD_NAME = "README.md"
TRAIN_RECIPE_NAME = "train.yaml"
RESULTS_NAME = "results.json"
TOKENIZER_NAME = "tokenizer.json"
TRAINING_FILES = (TRAIN_RECIPE_NAME, RESULTS_NAME, TOKENIZER_NAME)
"""A trained run's files that its saved model carries (the run folder uses the same names)."""
FILES = [CONFIG_NAME, WEIGHTS_NAME, INDEX_NAME, "model-*.safetensors", CARD_NAME,
         *TRAINING_FILES]
"""Everything an artifact may hold, as patterns (what a download fetches, an upload sends)."""
FORMAT = "zoo"
FORMAT_VERSION = 1
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
MAX_CONFIG_BYTES = 1 << 20


# -- config ------------------------------------------------------------------------------------
def artifact_config(recipe: Recipe, components: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What ``config.json`` holds: the recipe, zoo's version and each component's origin
    (``components``: slot -> family, name, plugin, distribution, version)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "zoo_version": __version__,
        "recipe": recipe.to_dict(),
        "components": components,
    }


def read_config(folder: Path, source: str) -> tuple[Recipe, dict[str, Any]]:
    """The recipe of an artifact folder, after checking that every component can be found."""
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise ArtifactError(f"{source} has no {CONFIG_NAME}; a zoo model folder holds "
                            f"{CONFIG_NAME}, {WEIGHTS_NAME} and README.md (zoo.save_pretrained).")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ArtifactError(f"{source}: {CONFIG_NAME} is {path.stat().st_size:,} bytes; a zoo "
                            "config is a small recipe (under 1 MiB). Refusing to read it.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{source}: {CONFIG_NAME} is not valid JSON ({exc}).") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "recipe" not in data:
        hint = ""
        if isinstance(data, dict) and ("architectures" in data or "model_type" in data):
            hint = " It looks like a Hugging Face transformers config; load it with transformers."
        elif isinstance(data, dict) and "architecture" in data and "num_classes" in data:
            hint = " It looks like a timm config; zoo converts timm ViTs through pretrained recipes."
        raise ArtifactError(
            f"{source}: {CONFIG_NAME} is not a zoo config (it needs \"format\": \"zoo\" and a "
            f"\"recipe\").{hint}"
        )
    if data.get("format_version", 0) > FORMAT_VERSION:
        raise ArtifactError(
            f"{source} was saved by zoo {data.get('zoo_version')} in artifact format "
            f"{data['format_version']}; this zoo reads format {FORMAT_VERSION}. Upgrade zoo."
        )
    recipe = Recipe.from_dict(data["recipe"], f"{source}: {CONFIG_NAME} recipe")
    check_plugins(recipe, data.get("components"), source)
    return recipe, data


def check_plugins(recipe: Recipe, components: Any, source: str) -> None:
    """Refuse, naming the package to install, a recipe whose components are not registered."""
    missing: dict[str, list[str]] = {}
    for dist in recipe.requires:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            missing.setdefault(dist, [])
    for entry in (components or {}).values() if isinstance(components, dict) else ():
        if not isinstance(entry, dict):
            continue
        family, name = entry.get("family"), entry.get("name")
        if isinstance(family, str) and isinstance(name, str) and (family, name) not in registry:
            dist = entry.get("distribution") or entry.get("plugin") or "?"
            missing.setdefault(str(dist), []).append(f"{family} {name!r}")
    if missing:
        parts = [f"plugin {dist!r} (pip install {dist})" + (f" for {', '.join(what)}" if what else "")
                 for dist, what in missing.items()]
        raise MissingPluginError(f"{source}: this model needs {'; '.join(parts)}.")


# -- weights -----------------------------------------------------------------------------------
def _tied_groups(model: nn.Module) -> list[list[str]]:
    """State-dict names that share one storage (tied embeddings), each group in order."""
    groups: dict[tuple[Any, int, tuple[int, ...]], list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=False).items():
        if tensor.device.type == "meta" or tensor.numel() == 0:
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        groups.setdefault(key, []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def weights_to_save(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict with each tied tensor stored once (under its first name), contiguous."""
    state = model.state_dict()
    for group in _tied_groups(model):
        for name in group[1:]:
            del state[name]
    return {name: t.detach().contiguous() for name, t in state.items()}


def save_weights_file(model: nn.Module, path: str | os.PathLike[str]) -> None:
    """All of ``model``'s weights in one safetensors file (tied tensors stored once)."""
    from safetensors.torch import save_file

    save_file(weights_to_save(model), str(path), metadata={"format": "pt"})


def save_weights(model: nn.Module, folder: Path, max_shard_size: int | str = "5GB") -> list[str]:
    """``model.safetensors``, or shards plus ``model.safetensors.index.json`` above the limit."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    state = weights_to_save(model)
    split = split_torch_state_dict_into_shards(
        state, filename_pattern=SHARD_PATTERN, max_shard_size=max_shard_size)
    written = []
    for filename, names in split.filename_to_tensors.items():
        save_file({n: state[n] for n in names}, str(folder / filename), metadata={"format": "pt"})
        written.append(filename)
    if split.is_sharded:
        index = {"metadata": {"total_size": split.metadata["total_size"]},
                 "weight_map": split.tensor_to_filename}
        (folder / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
        written.append(INDEX_NAME)
    return written


def weight_files(folder: Path, source: str) -> list[Path]:
    """The safetensors files of an artifact; pickles are refused with the reason."""
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ArtifactError(f"{source}: {INDEX_NAME} is malformed ({exc!r}); it maps each "
                                "tensor name to its shard file.") from None
        for name in names:
            if "/" in name or "\\" in name or not name.endswith(".safetensors"):
                raise ArtifactError(f"{source}: {INDEX_NAME} names shard {name!r}; shards are "
                                    ".safetensors files beside the index.")
        files = [folder / n for n in names]
        absent = [f.name for f in files if not f.is_file()]
        if absent:
            raise ArtifactError(f"{source}: shards named in {INDEX_NAME} are missing: "
                                f"{quoted(absent)}.")
        return files
    if (folder / WEIGHTS_NAME).is_file():
        return [folder / WEIGHTS_NAME]
    pickles = sorted(p.name for p in folder.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
    raise ArtifactError(pickle_refusal(source, pickles) if pickles else
                        f"{source} has no {WEIGHTS_NAME} (nor a sharded {INDEX_NAME}).")


def pickle_refusal(source: str, pickles: list[str]) -> str:
    """Why pickled weights are refused, and what to do instead."""
    return (f"{source} holds weights only as pickle ({quoted(pickles)}); zoo loads weights only "
            "from safetensors, because unpickling can run any code. Ask the author for a "
            f"{WEIGHTS_NAME}, or convert a file you trust yourself.")


def read_weights(files: list[Path], source: str) -> dict[str, torch.Tensor]:
    """Every tensor of ``files``; an unreadable (e.g. truncated) file is named."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in files:
        try:
            part = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ArtifactError(
                f"{source}: {path.name} is not a readable safetensors file ({exc}). It may be "
                "truncated or corrupt; download or save it again."
            ) from None
        clash = state.keys() & part.keys()
        if clash:
            raise ArtifactError(f"{source}: tensors stored twice across shards: "
                                f"{quoted(sorted(clash)[:5])}.")
        state.update(part)
    return state


def load_weights(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> nn.Module:
    """Load ``state`` into ``model`` strictly: every tensor present, none extra, shapes equal.

    A tensor tied to another (shared embeddings) may be stored under any one of its names."""
    expected = model.state_dict()
    state = dict(state)
    for group in _tied_groups(model):
        present = [n for n in group if n in state]
        if present:
            for name in group:
                state.setdefault(name, state[present[0]])
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k}: expected {tuple(expected[k].shape)}, file has {tuple(state[k].shape)}"
             for k in expected if k in state and state[k].shape != expected[k].shape]
    problems = []
    if missing:
        problems.append(f"missing tensors {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected tensors {_few(unexpected)}")
    if wrong:
        problems.append(f"wrong shapes: {'; '.join(wrong[:5])}{' ...' if len(wrong) > 5 else ''}")
    if problems:
        raise ArtifactError(
            f"{source}: the weights do not fit the model its config builds ({', '.join(problems)}). "
            "The config and weights must come from the same save_pretrained; overrides that "
            "change shapes cannot be applied to saved weights."
        )
    model.load_state_dict(state, strict=True)
    return model


def _few(names: list[str]) -> str:
    return quoted(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


# -- folders -----------------------------------------------------------------------------------
def _stale_weights(name: str) -> bool:
    """Weight files of an earlier save that a new one replaces (e.g. shards of a larger model)."""
    return (name.startswith("model") and name.endswith(".safetensors")) or name == INDEX_NAME


def write_artifact(
    model: nn.Module,
    folder: str | os.PathLike[str],
    *,
    config: dict[str, Any],
    card: str,
    extra_files: Mapping[str, Path] | None = None,
    max_shard_size: int | str = "5GB",
) -> Path:
    """Write ``config`` as ``config.json``, the weights (sharded above ``max_shard_size``),
    ``card`` as ``README.md`` and copies of ``extra_files`` (name -> file) to ``folder``.

    The files are written beside ``folder`` and moved into place; over an existing folder
    they replace their namesakes and the weight files of the earlier save."""
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ArtifactError("The model is on the meta device and has no weights to save; build "
                            "it on a real device (or load weights into it) first.")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"{folder} exists and is not a folder.")
    with folder_beside(folder, replace="files", stale=_stale_weights) as tmp:
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_weights(model, tmp, max_shard_size)
        for name, path in (extra_files or {}).items():
            shutil.copyfile(path, tmp / name)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
    return folder


def copy_artifact(source: Path, folder: str | os.PathLike[str]) -> Path:
    """Copy a saved model's files (following the Hub cache's links) to ``folder``, written
    beside it first and moved into place like :func:`write_artifact`'s."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"{folder} exists and is not a folder.")
    with folder_beside(folder, replace="files", stale=_stale_weights) as tmp:
        for path in source.iterdir():
            if path.is_file():
                shutil.copyfile(path, tmp / path.name)
    return folder
