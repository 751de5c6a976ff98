"""The Hugging Face Hub, as transfer only: download a saved model's files, one file,
or only its config, and upload a folder. Every function returns paths or
huggingface_hub's answers, never a model (``zoo.build`` builds, one layer up).

Everything goes through ``huggingface_hub`` (``HfApi.create_repo``,
``upload_folder``, ``snapshot_download``, ``hf_hub_download``), so tokens
(``HF_TOKEN``), the cache (``HF_HOME``, ``HF_HUB_CACHE``), ``HF_HUB_OFFLINE`` and
revisions behave as they do for transformers and timm. ``HF_ENDPOINT`` is read at
each call, so a mirror set after import is honoured too.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from .artifact import CONFIG_NAME, FILES, INDEX_NAME, PICKLE_SUFFIXES, WEIGHTS_NAME, pickle_refusal
from ._text import is_git_ref, short_repr
from .errors import ArtifactError


def endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: huggingface_hub's default, https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or None


def parse_repo(text: str, what: str | None = None) -> tuple[str, str | None]:
    """``owner/repo@revision`` -> ``("owner/repo", "revision")``; ``what`` is the name as the
    user wrote it, for the error."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo_id, _, revision = text.partition("@")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ArtifactError(f"{what or text!r}: {repo_id!r} is not a Hub repository id ({exc}). "
                            "Write owner/name or owner/name@revision.") from None
    check_revision(revision or None, what or text)
    return repo_id, revision or None


def parse_repo_id(text: str) -> str:
    """``owner/repo``, with no revision: where a repository is created or pushed to, the
    branch is a separate argument."""
    repo_id, revision = parse_repo(text)
    if revision is not None:
        raise ArtifactError(f"{short_repr(text, 120)}: push to a repository id, owner/name, "
                            f"and give the branch as revision={revision!r} (zoo push "
                            f"--revision {revision}).")
    return repo_id


def check_revision(revision: str | None, what: str) -> None:
    """Refuse a revision that is not a git ref name: huggingface_hub joins it into the
    cache's paths, so ``../..`` in one could write outside the cache."""
    if revision is not None and not is_git_ref(revision):
        raise ArtifactError(f"{short_repr(what, 120)}: {short_repr(revision, 80)} is not a "
                            "branch, tag or commit name (no '..', no leading '/', no spaces "
                            "or control characters).")


def _what(repo_id: str, revision: str | None) -> str:
    return repo_id + (f"@{revision}" if revision else "")


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
             cache_dir: str | os.PathLike[str] | None = None, what: str | None = None,
             patterns: list[str] | None = None) -> Path:
    """The folder, in the local cache, of a saved model's files (downloaded when not there);
    ``patterns``: which files (a zoo artifact's by default; a foreign format names its
    own). A repository holding weights only as pickle is refused."""
    from huggingface_hub import HfApi, snapshot_download

    what = what or _what(repo_id, revision)
    check_revision(revision, what)
    with _hub_errors(what):
        folder = Path(snapshot_download(
            repo_id, revision=revision, allow_patterns=patterns or FILES, endpoint=endpoint(),
            token=token, cache_dir=cache_dir))
    wants_weights = patterns is None or any("safetensors" in p for p in patterns)
    if wants_weights and not (folder / WEIGHTS_NAME).is_file() and not (
            folder / INDEX_NAME).is_file():
        try:
            files = HfApi(endpoint=endpoint()).list_repo_files(repo_id, revision=revision,
                                                               token=token)
        except Exception:
            files = []
        pickles = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
        if pickles and not any(f.endswith(".safetensors") for f in files):
            raise ArtifactError(pickle_refusal(what, pickles))
    return folder


def download_file(repo_id: str, filename: str, revision: str | None = None, *,
                  token: str | None = None, what: str | None = None) -> Path:
    """One file of a repository, in the local cache (downloaded when not there)."""
    from huggingface_hub import hf_hub_download

    what = what or f"{_what(repo_id, revision)}/{filename}"
    check_revision(revision, what)
    with _hub_errors(what):
        return Path(hf_hub_download(repo_id, filename, revision=revision, endpoint=endpoint(),
                                    token=token))


def download_config(repo_id: str, revision: str | None = None, *, token: str | None = None,
                    what: str | None = None) -> Path:
    """The cache folder holding a saved model's ``config.json``, fetching that file alone."""
    return download_file(repo_id, CONFIG_NAME, revision, token=token,
                         what=what or _what(repo_id, revision)).parent


def upload(
    folder: str | os.PathLike[str],
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
) -> Any:
    """Upload a saved model's folder to ``repo_id`` (created if needed) in one commit that
    also deletes weights of an earlier upload this one no longer has (other shards).
    ``revision`` names a branch, created from main when it does not exist. Returns
    huggingface_hub's ``CommitInfo``."""
    from huggingface_hub import HfApi

    repo_id = parse_repo_id(repo_id)
    check_revision(revision, f"{repo_id}@{revision}")
    api = HfApi(endpoint=endpoint(), token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision is not None and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    return api.upload_folder(
        folder_path=folder, repo_id=repo_id, revision=revision,
        commit_message=commit_message or "Upload zoo model",
        allow_patterns=FILES, delete_patterns=["model*.safetensors", INDEX_NAME],
    )
