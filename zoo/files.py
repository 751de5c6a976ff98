"""Writing files and folders so that a crash never leaves one half-written.

One policy for everything zoo writes (recipes, run files, checkpoints, saved
models): write beside the destination under a temporary name, flush and fsync
the data, move it into place in one rename, then fsync the folder that holds it
so that the rename itself survives a power cut. New files and folders get the
user's umask, as ``cp`` would give them.

A folder that already exists is replaced whole, in one atomic swap (Linux's
``renameat2(RENAME_EXCHANGE)``). Where the system cannot swap, the old folder is
renamed aside and the new one renamed in; a kill between the two leaves the old
one aside, and :func:`recover` (called by every later read or write of that
folder) puts it back.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import sys
import tempfile
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ._text import short_repr, with_article
from .errors import ArtifactError, CorruptFileError

LOCK_TIMEOUT = 600.0
"""Seconds a save waits for another save of the same folder before giving up."""


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Flush a folder's entries (renames, new files) to disk; a no-op where the system
    cannot open folders."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Flush one file's data to disk."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def disk_free(path: str | os.PathLike[str]) -> int | None:
    """Bytes free on the disk that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


_FULL = ("No space left", "StorageFull", "os error 28", "Disk quota exceeded")
_SHORT_WRITE = ("write failed", "unexpected pos", "failed writing file")
"""How torch's zip writer (``torch.save``) says a write came up short, with no errno: on
a full disk it reports the position it expected (``inline_container.cc: unexpected pos
70528 vs 70420``)."""


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n < 10 * 2**20 else f"{n / 2**20:.0f} MiB"


def describe_os_error(exc: BaseException, path: str | os.PathLike[str],
                      need: int | None = None) -> str:
    """What went wrong writing ``path``, in words: a full disk says so, with the space
    left and, when the caller knows it, the space needed, whichever library noticed it
    (Python, safetensors, torch's zip writer)."""
    text = str(exc)
    free = disk_free(path)
    full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or any(
        marker in text for marker in _FULL)
    short = any(marker in text for marker in _SHORT_WRITE) and free is not None and (
        free < 64 * 2**20 or (need is not None and free < need))
    if full or short:
        left = f": {_mib(free)} free" if free is not None else ""
        needed = f", about {_mib(need)} needed" if need else ""
        return f"the disk that holds {path} is full{left}{needed}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {text}"


def is_write_failure(exc: BaseException) -> bool:
    """True for an error that says the file system refused a write (an ``OSError``, or the
    words safetensors and torch's zip writer use for one)."""
    text = str(exc)
    return isinstance(exc, OSError) or "IoError" in text or "I/O error" in text or any(
        marker in text for marker in (*_FULL, *_SHORT_WRITE))


def umask() -> int:
    """This process's umask (read without changing it where Linux says it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _give_umask_modes(tmp: Path) -> None:
    """mkdtemp makes 0700 folders and safetensors 0600 files: give them the modes a
    plain ``mkdir`` and ``open`` would have."""
    mask = umask()
    for path in [*tmp.rglob("*"), tmp]:
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path``, fsync it and rename it over
    ``path``; on any error the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.chmod(path.stat().st_mode & 0o7777 if path.is_file() else 0o666 & ~umask())
        fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


# -- folders -----------------------------------------------------------------------------------
def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux ``renameat2`` with ``RENAME_EXCHANGE``);
    False where the system or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(a))


def _aside_names(folder: Path) -> list[Path]:
    """Earlier versions of ``folder`` renamed aside by a swap that was cut short, newest
    first."""
    found = [p for p in folder.parent.glob(f".{folder.name}.old-*") if p.is_dir()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def recover(folder: str | os.PathLike[str]) -> bool:
    """Put back the previous version of ``folder`` when a swap was killed between its two
    renames (the folder is missing and its old version lies aside). True when it did."""
    folder = Path(folder)
    if folder.exists():
        return False
    aside = _aside_names(folder)
    if not aside:
        return False
    os.replace(aside[0], folder)
    fsync_dir(folder.parent)
    return True


def remove(path: Path) -> None:
    """Remove a file or a whole folder (nothing happens when it is not there)."""
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def remove_leftovers(folder: str | os.PathLike[str]) -> None:
    """Remove the temporary and set-aside copies of ``folder`` that killed writes left
    (after :func:`recover` has had its chance)."""
    folder = Path(folder)
    for pattern in (f".{folder.name}.tmp-*", f".{folder.name}.old-*"):
        for path in folder.parent.glob(pattern):
            remove(path)


def _swap_in(tmp: Path, folder: Path) -> None:
    """Make ``tmp`` be ``folder``: one rename when there is none yet, else one atomic swap
    (or, where the system cannot swap, two renames that :func:`recover` can undo)."""
    if not folder.exists():
        os.replace(tmp, folder)
    elif not folder.is_dir():
        raise NotADirectoryError(f"{folder} exists and is not a folder")
    elif _exchange(tmp, folder):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old version
    else:
        aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
        os.replace(folder, aside)
        os.replace(tmp, folder)
        shutil.rmtree(aside, ignore_errors=True)
    fsync_dir(folder.parent)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@contextlib.contextmanager
def _locked(folder: Path, lock: bool) -> Iterator[None]:
    if not lock:
        yield
        return
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(folder.parent / f".{folder.name}.lock"), timeout=LOCK_TIMEOUT):
            yield
    except Timeout:
        raise TimeoutError(f"another process has been writing {folder} for "
                           f"{LOCK_TIMEOUT:.0f} s (it holds .{folder.name}.lock beside it); "
                           "try again when it is done") from None


@contextlib.contextmanager
def folder_beside(
    folder: str | os.PathLike[str],
    *,
    keep: Callable[[str], bool] | None = None,
    lock: bool = True,
) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``folder`` to write into; when the block
    ends without an error, its files get the user's umask and are fsynced, and it takes
    the place of ``folder`` in one atomic step. On an error nothing is moved.

    Entries of the old ``folder`` that ``keep(name)`` selects (and the block did not
    write) are carried into the new one first, as hard links. With ``lock``, writers of
    the same folder take turns (a ``.NAME.lock`` file beside it); leftovers of killed
    writes are recovered or removed first."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder, lock):
        recover(folder)
        remove_leftovers(folder)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
        try:
            yield tmp
            _give_umask_modes(tmp)
            if keep is not None and folder.is_dir():
                for old in folder.iterdir():
                    if keep(old.name) and not (tmp / old.name).exists():
                        if old.is_dir() and not old.is_symlink():
                            shutil.copytree(old, tmp / old.name, symlinks=True,
                                            copy_function=_link_or_copy)
                        else:
                            _link_or_copy(str(old), str(tmp / old.name))
            for path in tmp.rglob("*"):
                if path.is_file() and not path.is_symlink():
                    fsync_file(path)
            fsync_dir(tmp)
            _swap_in(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# -- JSON files of a folder ----------------------------------------------------------------------
MAX_JSON_BYTES = 1 << 20
"""The largest JSON file of a model folder zoo reads (a config is a few KiB)."""


def file_kind(mode: int) -> str:
    """What a file of ``mode`` (``os.stat``'s) is when it is not a regular file, said with
    its article: ``"a FIFO (named pipe)"``, ``"a folder"``, ``"a character device"``."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_json(path: Path, source: str, holds: type = dict) -> Any:
    """A JSON object (``holds``: a list, say) from a regular file of at most 1 MiB, or one
    ArtifactError naming the file: zoo's one reader of ``config.json`` (its own and
    foreign ones) and every JSON file beside it (generation settings,
    sentence-transformers' modules and pooling). A FIFO or a folder is no file: it is
    refused, never waited on."""
    if not path.is_file():
        if path.exists():
            raise ArtifactError(f"{source}: {path} is {file_kind(path.stat().st_mode)}, not a "
                                "file; zoo reads it only from a regular file.")
        raise ArtifactError(f"{source} has no {path.name}.")
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise ArtifactError(f"{source}: {path.name} is {size:,} bytes; a config is under "
                            "1 MiB. Refusing to read it.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CorruptFileError(f"{source}: {path.name} is not valid JSON "
                               f"({short_repr(exc, 120)}).", [path]) from None
    if not isinstance(data, holds):
        wanted = "an object" if holds is dict else with_article(holds.__name__)
        raise ArtifactError(f"{source}: {path.name} holds {type(data).__name__}, not "
                            f"{wanted}.")
    return data
