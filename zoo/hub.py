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

import errno
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .artifact import CONFIG_NAME, FILES, INDEX_NAME, PICKLE_SUFFIXES, WEIGHTS_NAME, pickle_refusal
from ._text import is_git_ref, short_repr
from .env_settings import setting
from .errors import ArtifactError
from .files import describe_os_error


DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint() -> str | None:
    """``HF_ENDPOINT`` as it is now (None: huggingface_hub's default, https://huggingface.co)."""
    return os.environ.get("HF_ENDPOINT") or None


def _where() -> str:
    return (endpoint() or DEFAULT_ENDPOINT).rstrip("/")


CLIENT_LOGGERS = ("huggingface_hub", "httpx", "httpx2", "httpcore", "urllib3", "filelock")
"""The loggers of the Hub client and its HTTP libraries that :func:`quiet_client` holds
back (huggingface_hub's own logs each retry of an unreachable Hub: ten lines)."""
_quiet_lock = threading.Lock()
_quiet_depth = 0
_quiet_levels: dict[str, int] = {}


@contextmanager
def quiet_client() -> Iterator[None]:
    """Hold back the log lines of the Hub client and its HTTP libraries (``Retrying in 1s
    [Retry 1/5]``, ten of them for a Hub that cannot be reached) while zoo talks to the
    Hub: zoo says what happened in its own words (a :class:`HubWarning`, an
    :class:`~zoo.errors.ArtifactError`). Their errors still show, and each logger's level
    is put back after, once the last of nested or concurrent users leaves."""
    global _quiet_depth
    with _quiet_lock:
        if _quiet_depth == 0:
            for name in CLIENT_LOGGERS:
                logger = logging.getLogger(name)
                _quiet_levels[name] = logger.level
                logger.setLevel(max(logger.level, logging.ERROR))
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                for name, level in _quiet_levels.items():
                    logging.getLogger(name).setLevel(level)
                _quiet_levels.clear()


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


RETRIES = 3
"""Times a transient failure (a 5xx answer, a connection cut or refused, a timeout) is
retried before it is reported: ``ZOO_HUB_RETRIES`` changes it (0: never)."""
RETRY_WAIT = 1.0
"""Seconds before the first retry, doubling after each (``ZOO_HUB_RETRY_WAIT``)."""


class HubWarning(UserWarning):
    """A transient failure zoo retries, or a bad cached file it removed: said, not raised."""


def _with_retries(what: str, call):
    """``call()``, retried on transient failures (huggingface_hub itself resumes a cut
    download, from where it stopped when the server allows ranges); each retry is said
    (a :class:`HubWarning`). Errors as :func:`_describe_hub_error` words them."""
    retries, wait = setting("ZOO_HUB_RETRIES"), setting("ZOO_HUB_RETRY_WAIT")
    for attempt in range(retries + 1):
        try:
            with quiet_client():
                return call()
        except Exception as exc:
            transient = _transient(exc)
            by_client = _retried_by_the_client(exc)
            if transient is None or attempt == retries or by_client:
                error = _describe_hub_error(
                    exc, what, attempts=(attempt + 1) * (CLIENT_TRIES if by_client else 1))
                if error is None:
                    raise
                raise error from None
            warnings.warn(f"{what}: {transient}; retrying in {wait:g} s ({attempt + 1} of "
                          f"{retries}; ZOO_HUB_RETRIES sets how many)", HubWarning,
                          stacklevel=3)
            time.sleep(wait)
            wait *= 2


def _failed_file(exc: BaseException) -> str:
    """`` (file model.safetensors)``: the file a failed request was for, when it says."""
    for source in (getattr(exc, "response", None), exc):
        try:
            url = str(source.request.url)
        except (AttributeError, RuntimeError):
            continue
        match = re.search(r"/resolve/[^/]+/(.+?)(?:\?|$)", url)
        if match:
            return f" (file {match.group(1)})"
    return ""


_TIMEOUTS = {"TimeoutException", "Timeout", "ReadTimeout", "ConnectTimeout"}
_CUT = {"RemoteProtocolError", "ChunkedEncodingError", "IncompleteRead", "ProtocolError"}
_CONNECTION = {"ConnectError", "ConnectionError", "ReadError", "NetworkError"}
"""Transient failures by class name, as httpx2, httpx and requests (the HTTP clients of
huggingface_hub's releases) call them: no import of a client zoo does not need."""


CLIENT_TRIES = 6
"""How often huggingface_hub's own ``http_get`` tries a download that times out or loses
its connection (once, then five retries a second apart, resuming), before zoo sees the
failure: zoo does not try it again, so a Hub that never answers is given up after about
``CLIENT_TRIES x (HF_HUB_DOWNLOAD_TIMEOUT + 1)`` seconds (66 s by default) instead of
four times that."""


def _retried_by_the_client(exc: BaseException) -> bool:
    """Whether huggingface_hub already retried this failure itself: a timeout or a lost
    connection raised out of its ``http_get`` (metadata requests are not retried there,
    so zoo retries those)."""
    import traceback

    names = {cls.__name__ for cls in type(exc).__mro__}
    if not names & (_TIMEOUTS | _CONNECTION | _CUT):
        return False
    return any(frame.name == "http_get" for frame in traceback.extract_tb(exc.__traceback__))


def _transient(exc: BaseException) -> str | None:
    """What went wrong, in words, when it may go right on a retry; else None."""
    from huggingface_hub.errors import HfHubHTTPError

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, HfHubHTTPError) and status is not None and (status >= 500 or
                                                                   status in (408, 429)):
        reason = getattr(exc.response, "reason_phrase", "") or getattr(
            exc.response, "reason", "") or ""
        return f"the Hub answered {status} {reason}".rstrip() + _failed_file(exc)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _TIMEOUTS:
        from huggingface_hub import constants

        return (f"no answer within HF_HUB_DOWNLOAD_TIMEOUT={constants.HF_HUB_DOWNLOAD_TIMEOUT:g} s"
                f"{_failed_file(exc)} (set HF_HUB_DOWNLOAD_TIMEOUT to wait longer)")
    if names & _CUT:
        return f"the connection closed before the whole file came{_failed_file(exc)}"
    if names & _CONNECTION and not isinstance(exc, HfHubHTTPError):
        return f"the connection failed ({exc}){_failed_file(exc)}"
    return None


def _describe_hub_error(exc: Exception, what: str, attempts: int = 1) -> ArtifactError | None:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = _where()
    if isinstance(exc, GatedRepoError):
        return ArtifactError(f"{what} is gated on {where}: accept its terms there and set HF_TOKEN.")
    if isinstance(exc, RepositoryNotFoundError):
        return ArtifactError(f"{what}: no such model repository on {where} (if it is private, "
                             "log in or set HF_TOKEN).")
    if isinstance(exc, RevisionNotFoundError):
        return ArtifactError(f"{what}: the repository has no such revision (a branch, tag or "
                             "commit).")
    if isinstance(exc, LocalEntryNotFoundError) or (
            isinstance(exc, ValueError) and _unreachable(exc) is not None):
        return ArtifactError(_not_reached(what, exc))
    if isinstance(exc, EntryNotFoundError):
        return ArtifactError(f"{what}: the repository has no such file.")
    transient = _transient(exc)
    if transient is not None:
        tried = f" (tried {attempts} times)" if attempts > 1 else ""
        return ArtifactError(
            f"{what}: could not download it from {where}: {transient}{tried}. Try again "
            "later: what was downloaded stays in the cache and the next pull goes on from "
            "there (ZOO_HUB_RETRIES sets how often zoo retries).")
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS,
                                                  errno.EACCES, errno.EPERM):
        from huggingface_hub import constants

        cache = constants.HF_HUB_CACHE
        return ArtifactError(f"{what}: could not write it into the Hub cache: "
                             f"{describe_os_error(exc, cache)}. Nothing already cached was "
                             "changed; free some space (or set HF_HUB_CACHE to another disk) "
                             "and pull again.")
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError):
        status = getattr(exc.response, "status_code", "?")
        return ArtifactError(f"{what}: the Hub at {where} answered {status}"
                             f"{_failed_file(exc)}: {str(exc).splitlines()[0]}")
    return None


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _unreachable(exc: BaseException) -> str | None:
    """Why the Hub could not be reached (``[Errno 111] Connection refused``): ``exc`` when
    it is a connection error or timeout (or HF_HUB_OFFLINE's refusal), else the one it
    was raised from (``raise ... from``); None when there is none."""
    for _ in range(8):
        if exc is None:
            return None
        names = {cls.__name__ for cls in type(exc).__mro__}
        if names & (_TIMEOUTS | _CONNECTION) or "OfflineModeIsEnabled" in names:
            return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        exc = exc.__cause__
    return None


def _not_reached(what: str, exc: BaseException) -> str:
    """Why ``what`` could be had neither from the Hub nor from the cache, and what to
    check: words that also read right for ``zoo pull``, whose very work is to reach the
    Hub. A ``force`` download (a ValueError from huggingface_hub) is not said to be
    missing from the cache: it was not looked for there."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    missing = (f"{what} is not in the local Hub cache, and " if isinstance(
        exc, LocalEntryNotFoundError) else f"{what}: could not download it again: ")
    if _offline():
        return (f"{missing}HF_HUB_OFFLINE is set, so the Hub was not asked: unset "
                "HF_HUB_OFFLINE to download it.")
    reason = _unreachable(exc)
    return (f"{missing}the Hub at {_where()} cannot be reached"
            f"{f' ({reason})' if reason else ''}. Check the network connection and "
            f"HF_ENDPOINT (the Hub's address; {_endpoint_said()}). A model downloaded once "
            "(zoo pull) then loads from the cache, and with HF_HUB_OFFLINE=1 without asking "
            "the Hub.")


def _endpoint_said() -> str:
    return f"now {endpoint()}" if endpoint() else f"unset: {DEFAULT_ENDPOINT}"


def download(repo_id: str, revision: str | None = None, *, token: str | None = None,
             cache_dir: str | os.PathLike[str] | None = None, what: str | None = None,
             patterns: list[str] | None = None, force: bool = False) -> Path:
    """The folder, in the local cache, of a saved model's files (downloaded when not there,
    or every time with ``force``); ``patterns``: which files (a zoo artifact's by default;
    a foreign format names its own). A repository holding weights only as pickle is
    refused. Transient failures are retried (:data:`RETRIES`)."""
    from huggingface_hub import HfApi, snapshot_download

    what = what or _what(repo_id, revision)
    check_revision(revision, what)
    folder = Path(_with_retries(what, lambda: snapshot_download(
        repo_id, revision=revision, allow_patterns=patterns or FILES, endpoint=endpoint(),
        token=token, cache_dir=cache_dir, force_download=force)))
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
                  token: str | None = None, what: str | None = None,
                  force: bool = False) -> Path:
    """One file of a repository, in the local cache (downloaded when not there, or every
    time with ``force``). Transient failures are retried (:data:`RETRIES`)."""
    from huggingface_hub import hf_hub_download

    what = what or f"{_what(repo_id, revision)}/{filename}"
    check_revision(revision, what)
    return Path(_with_retries(what, lambda: hf_hub_download(
        repo_id, filename, revision=revision, endpoint=endpoint(), token=token,
        force_download=force)))


def download_config(repo_id: str, revision: str | None = None, *, token: str | None = None,
                    what: str | None = None, force: bool = False) -> Path:
    """The cache folder holding a saved model's ``config.json``, fetching that file alone."""
    return download_file(repo_id, CONFIG_NAME, revision, token=token,
                         what=what or _what(repo_id, revision), force=force).parent


def evict(paths: list[Path]) -> list[str]:
    """Remove files of the Hub cache that zoo found wrong (a digest that differs, JSON
    that does not parse): the snapshot's link and the blob it points to, so that the
    next download fetches them again. Returns the names removed."""
    removed = []
    for path in paths:
        path = Path(path)
        try:
            blob = path.resolve() if path.is_symlink() else None
            path.unlink(missing_ok=True)
            if blob is not None:
                blob.unlink(missing_ok=True)
        except OSError:
            continue
        removed.append(path.name)
    return removed


def check_push_access(repo_id: str, token: str | None = None) -> str:
    """The token a push to ``repo_id`` would write with, once the Hub has been found to
    take it: before anything is uploaded, one :class:`~zoo.errors.ArtifactError` naming
    what is missing where there is no token (``token``, ``HF_TOKEN``, or the one
    ``huggingface-cli login`` stored), where HF_HUB_OFFLINE is set, where the Hub cannot
    be reached within ``HF_HUB_ETAG_TIMEOUT`` seconds, or where it refuses the token
    (huggingface_hub's ``whoami``: one light request)."""
    from huggingface_hub import get_token

    if _offline():
        raise ArtifactError(f"cannot push to {repo_id}: HF_HUB_OFFLINE is set, so zoo does "
                            "not reach the Hub; unset it to push.")
    token = token or get_token()
    if not token:
        raise ArtifactError(
            f"cannot push to {repo_id}: no Hugging Face token was found. Log in with "
            "`huggingface-cli login` (or `hf auth login`), or set HF_TOKEN to a token with "
            f"write access ({_where()}/settings/tokens); zoo.push_to_hub also takes token=.")
    response = _whoami(repo_id, token)
    if response.status_code == 401:
        raise ArtifactError(
            f"cannot push to {repo_id}: the Hub at {_where()} refuses {_token_source(token)} "
            "(401 Unauthorized). Log in again with `huggingface-cli login`, or set HF_TOKEN "
            f"to a token with write access ({_where()}/settings/tokens).")
    return token


def _whoami(repo_id: str, token: str) -> Any:
    """The Hub's answer to ``/api/whoami-v2`` (any answer: a mirror without that route
    still answers), or the ArtifactError of a Hub that cannot be reached."""
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session

    try:
        with quiet_client():
            return get_session().get(f"{_where()}/api/whoami-v2",
                                     headers=build_hf_headers(token=token),
                                     timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except Exception as exc:
        reason = _unreachable(exc)
        if reason is None:
            raise
        waited = (f"; HF_HUB_ETAG_TIMEOUT sets how long to wait (now "
                  f"{constants.HF_HUB_ETAG_TIMEOUT:g} s)") if {
            cls.__name__ for cls in type(exc).__mro__} & _TIMEOUTS else ""
        raise ArtifactError(
            f"cannot push to {repo_id}: the Hub at {_where()} cannot be reached ({reason}). "
            f"Check the network connection and HF_ENDPOINT (the Hub's address; "
            f"{_endpoint_said()}){waited}.") from None


def _token_source(token: str) -> str:
    """Where ``token`` came from, in words."""
    if token == (os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")):
        return "the token in HF_TOKEN"
    from huggingface_hub import constants

    try:
        stored = Path(constants.HF_TOKEN_PATH).read_text().strip()
    except OSError:
        stored = None
    if token == stored:
        return f"the token `huggingface-cli login` stored ({constants.HF_TOKEN_PATH})"
    return "the token given"


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
    ``revision`` names a branch, created from main when it does not exist. ``token`` is
    the one :func:`check_push_access` gave: ``zoo.push_to_hub`` checks the token and the
    Hub before it builds the folder, once. Returns huggingface_hub's ``CommitInfo``."""
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
