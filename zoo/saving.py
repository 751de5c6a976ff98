"""Saving and publishing models: ``zoo.save_pretrained`` and ``zoo.push_to_hub``.

Both take a model built by zoo, and also a ``zoo train`` run folder, so they sit
above the layers they compose: the artifact format, the model card, the Hub
transfer and the run folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from torch import nn

from . import artifact, hub
from ._text import with_article
from .card import model_card
from .errors import ArtifactError
from .quantization import is_quantized
from .recipe import Recipe
from .record import record_of
from .registry import registry
from .resolver import resolve
from .training import runs


def provenance(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """For the architecture and each slot: the component and the distribution that supplied it."""
    resolved = resolve(recipe, {})
    infos = registry.plugins.infos
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


def qualified_where_shared(recipe: Recipe, origins: dict[str, dict[str, Any]]) -> Recipe:
    """``recipe`` with ``plugin:name`` for each component whose plain name several plugins
    register (``origins``: :func:`provenance`), so that the saved model means the same
    component whichever plugins are installed when it is read."""
    refs = dict(recipe.components)
    for slot, ref in recipe.components.items():
        origin = origins.get(slot)
        if origin and ":" not in ref.name and len(
                registry.registrants(origin["family"], origin["name"])) > 1:
            refs[slot] = ref.model_copy(update={"name": f"{origin['plugin']}:{origin['name']}"})
    return recipe.model_copy(update={"components": refs})


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
    recipe = record_of(model).recipe
    if not isinstance(recipe, Recipe):
        raise ArtifactError(
            f"save_pretrained saves models built by zoo.build (they carry their recipe as "
            f"`.recipe`); got {with_article(type(model).__name__)} without one."
        )
    if is_quantized(model):
        mode = getattr(model, "quantization", "int8")
        raise ArtifactError(
            f"save_pretrained saves fp32 models; this one is quantized to {mode} "
            "(zoo.quantize). Save the model before quantizing it, and quantize after loading: "
            f"zoo.build('local-dir:FOLDER', quantize='{mode}')."
        )
    train = results = None
    extra: dict[str, Path] = {}
    if run is not None:
        folder_of_run = runs.RunFolder(run)
        if not folder_of_run.exists():
            raise ArtifactError(f"{run} is not a run folder (no {runs.TRAIN_RECIPE}).")
        train, results = folder_of_run.train_recipe(), folder_of_run.results()
        extra = folder_of_run.published_files()
    generation = record_of(model).generation
    origins = provenance(recipe)
    config = artifact.artifact_config(
        qualified_where_shared(recipe, origins), origins,
        generation.model_dump(mode="json") if generation is not None else None)
    card = model_card(config, model, train=train, results=results, repo_id=repo_id)
    return artifact.write_artifact(model, folder, config=config, card=str(card),
                                   extra_files=extra, max_shard_size=max_shard_size)


def push_to_hub(
    model: nn.Module | str | os.PathLike[str],
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    max_shard_size: int | str = "5GB",
) -> Any:
    """Publish ``model`` (a model built by zoo, a ``zoo train`` run folder or a
    ``save_pretrained`` folder) to the Hub repo ``repo_id``, creating it if needed.

    Returns huggingface_hub's ``CommitInfo`` (``.oid``, ``.commit_url``). Weights of an
    earlier push that this one no longer has (other shards) are deleted in the same
    commit. ``revision`` names a branch, created from main when it does not exist.
    """
    repo_id = hub.parse_repo_id(repo_id)  # refused before anything is built or written
    token = hub.check_push_access(repo_id, token)  # a token, and a Hub that takes it
    with tempfile.TemporaryDirectory(prefix="zoo-push-") as tmp:
        folder = _artifact_folder(model, Path(tmp) / "artifact", repo_id, max_shard_size)
        return hub.upload(folder, repo_id, token=token, private=private, revision=revision,
                          commit_message=commit_message)


def _artifact_folder(model: Any, out: Path, repo_id: str, max_shard_size: int | str) -> Path:
    if isinstance(model, nn.Module):
        return save_pretrained(model, out, max_shard_size=max_shard_size, repo_id=repo_id)
    path = Path(model)
    if runs.is_run(path):
        return save_pretrained(runs.load_run(path).model, out, run=path,
                               max_shard_size=max_shard_size, repo_id=repo_id)
    if (path / artifact.CONFIG_NAME).is_file():
        artifact.read_config(path, str(path))  # refuse to publish what zoo could not load back
        return path
    raise ArtifactError(f"{path} is neither a run folder ({runs.TRAIN_RECIPE}) nor a saved "
                        f"model ({artifact.CONFIG_NAME}); push a model, a run or a "
                        "save_pretrained folder.")
