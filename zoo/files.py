"""Writing files and folders so that a crash never leaves one half-written.

One policy for everything zoo writes (recipes, run files, checkpoints, saved
models): write beside the destination under a temporary name, flush and fsync
the data, rename into place, then fsync the folder that holds it so the rename
itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path


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


@contextlib.contextmanager
def folder_beside(
    folder: str | os.PathLike[str],
    *,
    replace: str = "folder",
    stale: Callable[[str], bool] | None = None,
) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``folder`` to write into; when the block
    ends without an error, every file in it is fsynced and it is moved into place.

    When ``folder`` does not exist yet, one rename moves it in. When it does,
    ``replace="folder"`` swaps the whole folder (the old one is renamed aside, the new one
    renamed in, the old one removed); ``replace="files"`` moves each new file over its
    namesake and leaves the folder's other files, except those ``stale(name)`` selects.
    On an error nothing is moved and the temporary folder is removed.
    """
    if replace not in ("folder", "files"):
        raise ValueError(f"replace is 'folder' or 'files', got {replace!r}")
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        yield tmp
        written = sorted(p.name for p in tmp.iterdir())
        for name in written:
            fsync_file(tmp / name)
        fsync_dir(tmp)
        _move_into_place(tmp, folder, written, replace, stale)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _move_into_place(tmp: Path, folder: Path, written: Iterable[str], replace: str,
                     stale: Callable[[str], bool] | None) -> None:
    if not folder.exists():
        os.replace(tmp, folder)
    elif not folder.is_dir():
        raise NotADirectoryError(f"{folder} exists and is not a folder")
    elif replace == "folder":
        aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
        os.replace(folder, aside)
        os.replace(tmp, folder)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        written = list(written)
        for name in written:
            os.replace(tmp / name, folder / name)
        for old in folder.iterdir():
            if old.name not in written and stale is not None and stale(old.name):
                old.unlink()
        fsync_dir(folder)
    fsync_dir(folder.parent)
