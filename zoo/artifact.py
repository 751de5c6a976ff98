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

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._text import DISTRIBUTION_RE, quoted, short_repr
from .env_settings import setting
from .errors import ArtifactError, CorruptFileError, MissingPluginError
from .families import FAMILIES
from .files import describe_os_error, folder_beside, is_write_failure, read_json
from .recipe import Recipe, missing_requirements
from .tied import tied_groups, weights_to_save
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


# -- config ------------------------------------------------------------------------------------
def artifact_config(recipe: Recipe, components: dict[str, dict[str, Any]],
                    generation: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``config.json`` holds: the recipe, zoo's version, each component's origin
    (``components``: slot -> family, name, plugin, distribution, version) and, for a model
    that generates, how it decodes (``generation``: ``model.generation`` as data)."""
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "zoo_version": __version__,
        "recipe": recipe.to_dict(),
        "components": components,
    }
    if generation is not None:
        config["generation"] = generation
    return config


def read_config(folder: Path, source: str) -> tuple[Recipe, dict[str, Any]]:
    """The recipe of an artifact folder, after checking that every component can be found."""
    path = folder / CONFIG_NAME
    if not path.is_file():
        raise ArtifactError(f"{source} has no {CONFIG_NAME}; a zoo model folder holds "
                            f"{CONFIG_NAME}, {WEIGHTS_NAME} and README.md (zoo.save_pretrained).")
    data = read_json(path, source)
    if data.get("format") != FORMAT or "recipe" not in data:
        hint = ""
        if "architectures" in data or "model_type" in data:
            hint = " It looks like a Hugging Face transformers config; load it with transformers."
        elif "architecture" in data and "num_classes" in data:
            hint = " It looks like a timm config; zoo converts timm ViTs through pretrained recipes."
        raise ArtifactError(
            f"{source}: {CONFIG_NAME} is not a zoo config (it needs \"format\": \"zoo\" and a "
            f"\"recipe\").{hint}"
        )
    version = data.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArtifactError(f"{source}: {CONFIG_NAME} has format_version "
                            f"{short_repr(version, 60)}; it is a whole number (this zoo "
                            f"writes {FORMAT_VERSION}).")
    if version > FORMAT_VERSION:
        raise ArtifactError(
            f"{source} was saved by zoo {data.get('zoo_version')} in artifact format "
            f"{data['format_version']}; this zoo reads format {FORMAT_VERSION}. Upgrade zoo."
        )
    recipe = Recipe.from_dict(data["recipe"], f"{source}: {CONFIG_NAME} recipe")
    check_plugins(recipe, data.get("components"), source)
    return as_saved(recipe, data.get("components"), source), data


def as_saved(recipe: Recipe, components: Any, source: str) -> Recipe:
    """``recipe`` with each plain component name as the plugin it was saved with meant it
    (``components`` records each slot's plugin): ``plugin:name`` where a later built-in
    or another plugin took the plain name. A model whose plugin is gone while another
    plugin's component now has the name is refused, naming the package to install,
    before a weight is read."""
    if not isinstance(components, dict):
        return recipe
    refs = dict(recipe.components)
    infos = registry.plugins.infos
    for slot, ref in recipe.components.items():
        entry = components.get(slot)
        if not isinstance(entry, dict) or ":" in ref.name or entry.get("name") != ref.name:
            continue
        family, plugin = entry.get("family"), entry.get("plugin")
        if family not in FAMILIES or not isinstance(plugin, str):
            continue
        now = registry.registrants(family, ref.name)
        if any(c.plugin == plugin for c in now):
            if len(now) > 1:
                refs[slot] = ref.model_copy(update={"name": f"{plugin}:{ref.name}"})
            continue
        if not now:
            continue  # a former name (the registry says so) or none (refused above)
        owner = registry.get(family, ref.name)
        dist = entry.get("distribution")
        owner_info = infos.get(owner.plugin)
        if dist is not None and owner_info is not None and dist == owner_info.distribution:
            continue  # moved between two plugins of one package: the same component
        needs = _needs(str(dist or plugin), [f"{family} {ref.name!r}"])
        raise MissingPluginError(
            f"{source}: this model was saved with the {family} {ref.name!r} of plugin "
            f"{plugin!r}; that plugin is not installed, and {ref.name!r} now names plugin "
            f"{owner.plugin!r}'s ({owner.qualified_name!r}), another component. It needs "
            f"{needs}.")
    return recipe.model_copy(update={"components": refs})


def check_plugins(recipe: Recipe, components: Any, source: str) -> None:
    """Refuse, naming the package to install, a recipe whose components are not registered."""
    missing: dict[str, list[str]] = {dist: [] for dist in missing_requirements(recipe)}
    for entry in (components or {}).values() if isinstance(components, dict) else ():
        if not isinstance(entry, dict):
            continue
        family, name = entry.get("family"), entry.get("name")
        if isinstance(family, str) and isinstance(name, str) and (family, name) not in registry:
            dist = entry.get("distribution") or entry.get("plugin") or "?"
            missing.setdefault(str(dist), []).append(f"{family} {short_repr(name, 60)}")
    if missing:
        raise MissingPluginError(f"{source}: this model needs "
                                 f"{'; '.join(_needs(d, what) for d, what in missing.items())}.")


def _needs(dist: str, what: list[str]) -> str:
    """``plugin 'x' (pip install x) for ...``; a name that is no package name (a hostile
    config's ``x; curl ... | sh``) is quoted, never offered as a command."""
    needed = f" for {', '.join(what)}" if what else ""
    if DISTRIBUTION_RE.match(dist):
        return f"plugin {dist!r} (pip install {dist}){needed}"
    return (f"a plugin its {CONFIG_NAME} names {short_repr(dist, 60)}, which is not a package "
            f"name{needed}")


# -- weights -----------------------------------------------------------------------------------
def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes ``tensors`` hold: about what saving them takes on disk."""
    return sum(t.numel() * t.element_size() for t in tensors)


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
            if not all(isinstance(v, str) for v in weight_map.values()):
                raise TypeError("a shard name that is not a string")
            names = sorted(set(weight_map.values()))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise ArtifactError(f"{source}: {INDEX_NAME} is malformed ({short_repr(exc)}); it "
                                "maps each tensor name to its shard file.") from None
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
            raise CorruptFileError(
                f"{source}: {path.name} is not a readable safetensors file ({exc}). It may be "
                "truncated or corrupt; download or save it again.", [path]
            ) from None
        clash = state.keys() & part.keys()
        if clash:
            raise ArtifactError(f"{source}: tensors stored twice across shards: "
                                f"{quoted(sorted(clash)[:5])}.")
        state.update(part)
    return state


def load_weights_file(model: nn.Module, path: Path) -> nn.Module:
    """Load one safetensors file into ``model`` strictly (a checkpoint's, a run's)."""
    return load_weights(model, read_weights([Path(path)], str(path)), str(path))


def load_weights(model: nn.Module, state: Mapping[str, torch.Tensor], source: str) -> nn.Module:
    """Load ``state`` into ``model`` strictly: every tensor present, none extra, shapes equal.

    A tensor tied to another (shared embeddings) may be stored under any one of its names."""
    expected = model.state_dict()
    state = dict(state)
    for group in tied_groups(model):
        present = [n for n in group if n in state]
        first = state[present[0]] if present else None
        if len(present) > 1 and not all(
                state[n].shape == first.shape and torch.equal(state[n], first)
                for n in present[1:]):
            raise ArtifactError(
                f"{source}: {quoted(present)} are one tensor in the model (tied weights), and "
                "the file stores them with different values. Which one is meant cannot be "
                "known; save the model again.")
        if present:
            for name in group:
                state.setdefault(name, state[present[0]])
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k}: expected {tuple(expected[k].shape)}, file has {tuple(state[k].shape)}"
             for k in expected if k in state and state[k].shape != expected[k].shape]
    kinds = [f"{k}: the model holds {expected[k].dtype}, the file {state[k].dtype}"
             for k in expected if k in state and _kind(state[k]) != _kind(expected[k])]
    problems = []
    if kinds:
        problems.append(f"wrong kinds of number: {'; '.join(kinds[:5])}")
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
    bad = [k for k in expected if k in state and state[k].is_floating_point()
           and not bool(torch.isfinite(state[k]).all())]
    if bad and not setting("ZOO_NONFINITE_WEIGHTS"):
        raise ArtifactError(f"{source}: tensors holding NaN or infinite values: {_few(bad)}. "
                            "The model would compute NaN: these weights are broken (a bad "
                            "conversion, or a training that diverged). Nothing was loaded; "
                            "ZOO_NONFINITE_WEIGHTS=1 loads them anyway, with a warning.")
    if bad:
        warnings.warn(f"{source}: tensors holding NaN or infinite values: {_few(bad)}. The "
                      "model will compute NaN (loaded as ZOO_NONFINITE_WEIGHTS=1 asks).",
                      RuntimeWarning, stacklevel=2)
    model.load_state_dict(state, strict=True)
    return model


def _kind(tensor: torch.Tensor) -> str:
    """float, complex, bool or int: a weight may change precision, never kind."""
    if tensor.is_floating_point():
        return "float"
    if tensor.is_complex():
        return "complex"
    return "bool" if tensor.dtype == torch.bool else "int"


def _few(names: list[str]) -> str:
    return quoted(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


# -- folders -----------------------------------------------------------------------------------
def is_artifact_file(name: str) -> bool:
    """True for a name the format owns (config, weights, card, a run's files)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in FILES)


def _user_file(name: str) -> bool:
    """Files of an existing folder that a new save keeps: whatever the format does not own
    (a file of the previous save, such as its shards or its train.yaml, would describe
    another model)."""
    return not is_artifact_file(name) and not name.endswith(PICKLE_SUFFIXES)


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def weight_digests(folder: Path) -> dict[str, str]:
    """The digest of each weight file (and the shard index) in ``folder``, by name."""
    names = sorted(p.name for p in folder.iterdir()
                   if p.name.endswith(".safetensors") or p.name == INDEX_NAME)
    return {name: file_digest(folder / name) for name in names}


def check_digests(folder: Path, config: dict[str, Any], source: str) -> None:
    """Refuse weights that are not the ones ``config.json`` was saved with (a folder that
    mixes two saves, or a file changed since). Configs without digests (saved by an
    older zoo) pass."""
    written = config.get("weights")
    if not isinstance(written, dict) or not isinstance(written.get("digests"), dict):
        return
    expected = written["digests"]
    found = {name: file_digest(folder / name) for name in expected if (folder / name).is_file()}
    changed = sorted(n for n in expected if found.get(n) != expected[n])
    if changed:
        raise CorruptFileError(
            f"{source}: {quoted(changed)} {'is' if len(changed) == 1 else 'are'} not the "
            f"weights its {CONFIG_NAME} was saved with (their sha256 differs): the folder "
            "mixes two saves, or a file was changed since. Save the model again.",
            [folder / name for name in changed])


def write_artifact(
    model: nn.Module,
    folder: str | os.PathLike[str],
    *,
    config: dict[str, Any],
    card: str,
    extra_files: Mapping[str, Path] | None = None,
    max_shard_size: int | str = "5GB",
) -> Path:
    """Write ``config`` as ``config.json`` (with the digest of each weight file), the
    weights (sharded above ``max_shard_size``), ``card`` as ``README.md`` and copies of
    ``extra_files`` (name -> file) to ``folder``.

    Everything is written beside ``folder`` and replaces it in one atomic swap, so a
    kill at any moment leaves the old save or the new one, never a mix; two saves of
    one folder take turns. Files of an existing folder that the format does not own
    (notes of your own) are kept."""
    if any(p.device.type == "meta" for p in model.parameters()):
        raise ArtifactError("The model is on the meta device and has no weights to save; build "
                            "it on a real device (or load weights into it) first.")
    need = tensor_bytes(model.state_dict().values())
    need += sum(Path(p).stat().st_size for p in (extra_files or {}).values())
    with _replacing(folder, need) as tmp:
        save_weights(model, tmp, max_shard_size)
        config = {**config, "weights": {"digests": weight_digests(tmp)}}
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        for name, path in (extra_files or {}).items():
            shutil.copyfile(path, tmp / name)
        (tmp / CARD_NAME).write_text(card, encoding="utf-8")
    return Path(folder)


def copy_artifact(source: Path, folder: str | os.PathLike[str]) -> Path:
    """Copy a saved model's files (following the Hub cache's links) to ``folder``, written
    beside it and swapped into place like :func:`write_artifact`'s."""
    need = sum(p.stat().st_size for p in source.iterdir() if p.is_file())
    with _replacing(folder, need) as tmp:
        for path in source.iterdir():
            if path.is_file():
                shutil.copyfile(path, tmp / path.name)
    return Path(folder)


@contextlib.contextmanager
def _replacing(folder: str | os.PathLike[str], need: int | None = None):
    """A folder to write a saved model into, which then replaces ``folder`` whole (keeping
    files the format does not own). The file system's refusals (a full disk, no
    permission, a lock held too long) become one ArtifactError naming the folder; nothing
    of the old save is lost."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ArtifactError(f"{folder} exists and is not a folder.")
    try:
        with folder_beside(folder, keep=_user_file) as tmp:
            yield tmp
    except Exception as exc:  # safetensors and torch say "disk full" in their own types
        if not (isinstance(exc, TimeoutError) or is_write_failure(exc)):
            raise
        kept = (" The model saved there before is kept." if (folder / CONFIG_NAME).is_file()
                else " Nothing was changed there.")
        raise ArtifactError(f"Could not save to {folder}: "
                            f"{describe_os_error(exc, folder, need)}.{kept}") from None
