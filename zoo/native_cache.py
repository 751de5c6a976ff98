"""Where zoo's native libraries are kept: the cache's root folder, and the pruning of a
library's older builds (each other sources' build has a folder of its own:
:meth:`zoo.native.NativeLibrary.folder`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from .deprecations import warn_deprecated

KEPT_BUILDS = 3
"""Build folders kept of each library (each other sources' build: another version of zoo
installed beside this one, or earlier sources of a checkout)."""


def cache_root() -> Path:
    """The folder under which compiled libraries are kept: ``$ZOO_NATIVE_CACHE``, else
    the former ``$ZOO_KERNEL_CACHE`` (with a deprecation warning), else
    ``$XDG_CACHE_HOME/zoo/native``; made absolute (a relative one is taken from the
    working folder), since the compiler links one library to another by that path."""
    if os.environ.get("ZOO_NATIVE_CACHE"):
        return Path(os.environ["ZOO_NATIVE_CACHE"]).expanduser().absolute()
    if os.environ.get("ZOO_KERNEL_CACHE"):
        warn_deprecated("ZOO_KERNEL_CACHE", "ZOO_KERNEL_CACHE is now named "
                        "ZOO_NATIVE_CACHE (in zoo, 'kernel' names the attention kernel "
                        "family only)")
        return Path(os.environ["ZOO_KERNEL_CACHE"]).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base).expanduser() / "zoo" / "native").absolute()


def prune_builds(name: str, keep: Path, file_of: Callable[[Path], Path],
                 kept: int | None = None) -> None:
    """Remove library ``name``'s build folders but ``keep`` and the ``kept`` - 1 used
    last (by their library's time, ``file_of(folder)``; ``kept`` None:
    :data:`KEPT_BUILDS`), so that a cache of many versions does not grow without end; a
    folder whose build is under way (its lock held) is left."""
    from filelock import FileLock, Timeout

    kept = KEPT_BUILDS if kept is None else kept
    others = [f for f in cache_root().glob(f"{name}-*") if f.is_dir() and f != keep]
    others.sort(key=lambda f: file_of(f).stat().st_mtime if file_of(f).is_file() else 0.0,
                reverse=True)
    for old in others[kept - 1:]:
        lock = FileLock(str(old / ".lock"))
        try:
            lock.acquire(timeout=0)
        except (Timeout, OSError):
            continue
        try:
            shutil.rmtree(old, ignore_errors=True)
        finally:
            lock.release()
