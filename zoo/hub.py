"""The Hugging Face Hub: push an artifact, pull one by name, and published weights
of pretrained recipes.

Everything goes through ``huggingface_hub`` (``HfApi.create_repo``,
``upload_folder``, ``snapshot_download``, ``hf_hub_download``), so tokens
(``HF_TOKEN``), the cache (``HF_HOME``, ``HF_HUB_CACHE``), ``HF_HUB_OFFLINE`` and
revisions behave as they do for transformers and timm. ``HF_ENDPOINT`` is read at
each call, so a mirror set after import is honoured too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .artifact import (
    CONFIG_NAME,
    INDEX_NAME,
    PICKLE_SUFFIXES,
    RUN_FILES,
    WEIGHTS_NAME,
    ArtifactError,
    load_artifact,
    load_weights,
    pickle_refusal,
    read_config,
    read_weights,
    save_pretrained,
)

HF_HUB_PREFIX = "hf-hub:"
LOCAL_DIR_PREFIX = "local-dir:"
PREFIXES = (HF_HUB_PREFIX, LOCAL_DIR_PREFIX)
ARTIFACT_FILES = [CONFIG_NAME, WEIGHTS_NAME, INDEX_NAME, "model-*.safetensors", "README.md",
                  *RUN_FILES]


def endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: huggingface_hub's default, https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or None


def parse_hub_name(name: str) -> tuple[str, str | None]:
    """``hf-hub:owner/repo@revision`` -> ``("owner/repo", "revision")``."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    body = name[len(HF_HUB_PREFIX):] if name.startswith(HF_HUB_PREFIX) else name
    repo_id, _, revision = body.partition("@")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ArtifactError(f"{name!r}: {repo_id!r} is not a Hub repository id ({exc}). "
                            "Write hf-hub:owner/name or hf-hub:owner/name@revision.") from None
    return repo_id, revision or None


@contextlib.contextmanager
def _hub_errors(what: str):
    """huggingface_hub's not-found, gated and offline errors as one ArtifactError naming
    ``what``; any other error as it is."""
    try:
        yield
    except Exception as exc:
        error = _describe_hub_error(exc, what)
        if error is None:
            raise
        raise error from None


def _describe_hub_error(exc: Exception, what: str) -> ArtifactError | None:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint() or "https://huggingface.co"
    if isinstance(exc, GatedRepoError):
        return ArtifactError(f"{what} is gated on {where}: accept its terms there and set HF_TOKEN.")
    if isinstance(exc, RepositoryNotFoundError):
        return ArtifactError(f"{what}: no such model repository on {where} (if it is private, "
                             "log in or set HF_TOKEN).")
    if isinstance(exc, RevisionNotFoundError):
        return ArtifactError(f"{what}: the repository has no such revision (a branch, tag or "
                             "commit).")
    if isinstance(exc, LocalEntryNotFoundError):
        return ArtifactError(
            f"{what} is not in the local Hub cache and the Hub cannot be reached"
            f"{' (HF_HUB_OFFLINE is set)' if _offline() else ''}. Pull it once while online.")
    if isinstance(exc, EntryNotFoundError):
        return ArtifactError(f"{what}: the repository has no such file.")
    return None


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def download(repo_id: str, revision: str | None = None, *, token: str | None = None,
             cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The artifact files of a Hub repo, in the local cache (downloaded when not there)."""
    from huggingface_hub import HfApi, snapshot_download

    what = f"hf-hub:{repo_id}" + (f"@{revision}" if revision else "")
    with _hub_errors(what):
        folder = Path(snapshot_download(
            repo_id, revision=revision, allow_patterns=ARTIFACT_FILES, endpoint=endpoint(),
            token=token, cache_dir=cache_dir))
    if not (folder / WEIGHTS_NAME).is_file() and not (folder / INDEX_NAME).is_file():
        try:
            files = HfApi(endpoint=endpoint()).list_repo_files(repo_id, revision=revision,
                                                               token=token)
        except Exception:
            files = []
        pickles = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
        if pickles:
            raise ArtifactError(pickle_refusal(what, pickles))
    return folder


def load_named(
    name: str,
    *,
    pretrained: bool = True,
    device: Any = None,
    dtype: torch.dtype | None = None,
    token: str | None = None,
    **overrides: Any,
) -> nn.Module:
    """A model from ``hf-hub:owner/repo[@revision]`` or ``local-dir:path``; without
    ``pretrained`` only its config is read (no weights are downloaded)."""
    if not pretrained:
        from .builder import build

        return build(recipe_of(name), device=device, dtype=dtype, **overrides)
    if name.startswith(LOCAL_DIR_PREFIX):
        folder = _local_folder(name)
    else:
        folder = download(*parse_hub_name(name), token=token)
    return load_artifact(folder, source=name, device=device, dtype=dtype, **overrides)


def _local_folder(name: str) -> Path:
    return Path(name[len(LOCAL_DIR_PREFIX):]).expanduser()


def recipe_of(name: str):
    """The recipe of ``hf-hub:`` or ``local-dir:`` name (only its config is fetched)."""
    if name.startswith(LOCAL_DIR_PREFIX):
        return read_config(_local_folder(name), name)[0]
    from huggingface_hub import hf_hub_download

    repo_id, revision = parse_hub_name(name)
    with _hub_errors(name):
        path = Path(hf_hub_download(repo_id, CONFIG_NAME, revision=revision, endpoint=endpoint()))
    return read_config(path.parent, name)[0]


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
    from huggingface_hub import HfApi

    parse_hub_name(repo_id)
    api = HfApi(endpoint=endpoint(), token=token)
    with tempfile.TemporaryDirectory(prefix="zoo-push-") as tmp:
        folder = _artifact_folder(model, Path(tmp) / "artifact", repo_id, max_shard_size)
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        return api.upload_folder(
            folder_path=folder, repo_id=repo_id, revision=revision,
            commit_message=commit_message or "Upload zoo model",
            allow_patterns=ARTIFACT_FILES, delete_patterns=["model*.safetensors", INDEX_NAME],
        )


def _artifact_folder(model: Any, out: Path, repo_id: str, max_shard_size: int | str) -> Path:
    if isinstance(model, nn.Module):
        return save_pretrained(model, out, max_shard_size=max_shard_size, repo_id=repo_id)
    path = Path(model)
    if (path / "train.yaml").is_file():
        from .training.runs import load_run

        return save_pretrained(load_run(path).model, out, run=path, max_shard_size=max_shard_size,
                               repo_id=repo_id)
    if (path / CONFIG_NAME).is_file():
        read_config(path, str(path))  # refuse to publish what zoo could not load back
        return path
    raise ArtifactError(f"{path} is neither a run folder (train.yaml) nor a saved model "
                        f"({CONFIG_NAME}); push a model, a run or a save_pretrained folder.")


# -- pretrained recipes --------------------------------------------------------------------------
def load_pretrained_weights(model: nn.Module, weights: Any) -> nn.Module:
    """Download a recipe's published weights and load them, converted, into ``model``."""
    from huggingface_hub import hf_hub_download

    from .convert import CONVERTERS

    what = f"hf-hub:{weights.hub}/{weights.filename}@{weights.revision}"
    with _hub_errors(what):
        path = hf_hub_download(weights.hub, weights.filename, revision=weights.revision,
                               endpoint=endpoint())
    state = read_weights([Path(path)], what)
    state = CONVERTERS[weights.converter](state)
    return load_weights(model, state, what)
