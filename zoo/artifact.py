"""Artifacts: a model as a folder of ``config.json``, safetensors weights and a card.

``save_pretrained(model, folder)`` writes what the Hub holds; ``load_artifact(folder)``
reads it back. Weights come only from safetensors, a config can only name
registered components, and loading is strict: a missing, unexpected or misshapen
tensor is named. Nothing half-written is left: the folder is written beside its
destination and moved into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._text import quoted
from .errors import ArtifactError, MissingPluginError
from .recipe import Recipe

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SHARD_PATTERN = "model{suffix}.safetensors"
FORMAT = "zoo"
FORMAT_VERSION = 1
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
RUN_FILES = ("train.yaml", "results.json", "tokenizer.json")
MAX_CONFIG_BYTES = 1 << 20


# -- config ------------------------------------------------------------------------------------
def provenance(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """For the architecture and each slot: the component and the distribution that supplied it."""
    from .plugin_manager import get_manager
    from .resolver import resolve

    resolved = resolve(recipe, {})
    infos = get_manager().infos
    parts = {"architecture": resolved.architecture}
    parts.update({slot: part.component for slot, part in resolved.parts.items()})
    out = {}
    for slot, component in parts.items():
        info = infos.get(component.plugin)
        out[slot] = {
            "family": component.family,
            "name": component.name,
            "plugin": component.plugin,
            "distribution": info.distribution if info else None,
            "version": info.version if info else None,
        }
    return out


def artifact_config(recipe: Recipe) -> dict[str, Any]:
    """What ``config.json`` holds: the recipe, zoo's version and each component's origin."""
    from . import __version__

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "zoo_version": __version__,
        "recipe": recipe.to_dict(),
        "components": provenance(recipe),
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
    from .registry import registry

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
def save_pretrained(
    model: nn.Module,
    folder: str | os.PathLike[str],
    *,
    max_shard_size: int | str = "5GB",
    run: str | os.PathLike[str] | None = None,
    repo_id: str | None = None,
) -> Path:
    """Write ``config.json``, ``model.safetensors`` (sharded above ``max_shard_size``) and a
    model card ``README.md`` to ``folder``; with ``run`` (a ``zoo train`` run folder) also
    its training recipe, results and tokenizer, which the card then describes.
    ``repo_id`` is the Hub name the card's usage snippet shows.

    >>> import zoo, tempfile
    >>> m = zoo.build("transformer-tiny")
    >>> out = zoo.save_pretrained(m, tempfile.mkdtemp() + "/tiny")
    >>> sorted(p.name for p in out.iterdir())
    ['README.md', 'config.json', 'model.safetensors']
    """
    from .card import model_card

    recipe = getattr(model, "recipe", None)
    if not isinstance(recipe, Recipe):
        raise ArtifactError(
            f"save_pretrained saves models built by zoo.build (they carry their recipe as "
            f"`.recipe`); got a {type(model).__name__} without one."
        )
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ArtifactError("The model is on the meta device and has no weights to save; build "
                            "it on a real device (or load weights into it) first.")
    folder = Path(folder)
    run_dir = Path(run) if run is not None else None
    if run_dir is not None and not (run_dir / "train.yaml").is_file():
        raise ArtifactError(f"{run_dir} is not a run folder (no train.yaml).")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        config = artifact_config(recipe)
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        written = [CONFIG_NAME, *save_weights(model, tmp, max_shard_size)]
        for name in RUN_FILES if run_dir is not None else ():
            if (run_dir / name).is_file():
                shutil.copyfile(run_dir / name, tmp / name)
                written.append(name)
        model_card(config, model, run_dir, repo_id).save(tmp / "README.md")
        written.append("README.md")
        _move_into_place(tmp, folder, written)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def copy_artifact(source: Path, folder: str | os.PathLike[str]) -> Path:
    """Copy a saved model's files (following the Hub cache's links) to ``folder``, written
    beside it first and moved into place like :func:`save_pretrained`'s."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        written = [p.name for p in source.iterdir() if p.is_file()]
        for name in written:
            shutil.copyfile(source / name, tmp / name)
        _move_into_place(tmp, folder, written)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _move_into_place(tmp: Path, folder: Path, written: list[str]) -> None:
    if not folder.exists():
        os.replace(tmp, folder)
        return
    if not folder.is_dir():
        raise ArtifactError(f"{folder} exists and is not a folder.")
    for name in written:
        os.replace(tmp / name, folder / name)
    # weights of an earlier save that this one replaces (e.g. shards of a larger model)
    for old in folder.iterdir():
        stale = old.name.startswith("model") and old.name.endswith(".safetensors")
        if (stale or old.name == INDEX_NAME) and old.name not in written:
            old.unlink()


def load_artifact(
    folder: str | os.PathLike[str],
    *,
    source: str | None = None,
    weights: bool = True,
    device: Any = None,
    dtype: torch.dtype | None = None,
    **overrides: Any,
) -> nn.Module:
    """The model saved in ``folder``: built from its config, its weights loaded strictly."""
    from .builder import build

    folder = Path(folder)
    source = source or f"local-dir:{folder}"
    if not folder.is_dir():
        raise ArtifactError(f"{source}: no such folder.")
    recipe, _ = read_config(folder, source)
    files = weight_files(folder, source) if weights else []
    state = read_weights(files, source) if weights else None
    model = build(recipe, device=device, dtype=dtype, **overrides)
    if state is not None:
        load_weights(model, state, source)
    return model
