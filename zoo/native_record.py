"""What a build of a native library records of it, and the check of the library against
that record before it is loaded (:mod:`zoo.native`).

``dlopen`` trusts the file it is given: a library cut short (a full disk, a kill while
linking) is a SIGBUS inside it, not an error, and a copy of another library under the
name loads and registers the wrong operators. So each build writes, beside the
library, its sources' digest, its size and its SHA-256 (``SOURCES``, JSON, written
whole or not at all), and a library is loaded only when it matches them byte for byte:
a read of a few hundred KiB once a process. The record also holds the SHA-256 of the
build's other outputs (its objects and ninja's logs): a damaged library is built again
from the objects that are still the ones built, and only the others are compiled again
(relinking the step's library took seconds, compiling it all again two minutes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def read_record(path: Path) -> dict | None:
    """What a build recorded of its library (its sources' digest, its size and its
    SHA-256), or None where there is no such record (none, or an older zoo's)."""
    try:  # a few KiB of a regular file (90 bytes an output): anything else is no record
        if not path.is_file() or path.stat().st_size > 1 << 20:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def digest(path: Path) -> str:
    """The SHA-256 of the file at ``path``, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


BUILD_OUTPUTS = ("*.o", ".ninja_deps", ".ninja_log")
"""The files a build leaves beside its library, which a later build reuses."""


def _outputs(folder: Path) -> list[Path]:
    return sorted(p for pattern in BUILD_OUTPUTS for p in folder.glob(pattern) if p.is_file())


def write_record(path: Path, sources: str, library: Path) -> None:
    """Record at ``path`` that ``library`` was built from ``sources`` (their digest), with
    the SHA-256 of the other outputs of the build beside it."""
    record = {"sources": sources, "bytes": library.stat().st_size, "sha256": digest(library),
              "outputs": {p.name: digest(p) for p in _outputs(library.parent)}}
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(record), encoding="utf-8")
    part.replace(path)  # whole or absent, never half a record


def matches(library: Path, record: dict) -> bool:
    """True when ``library`` is, byte for byte, the file its build recorded: checked
    before it is loaded, because a library cut short (a full disk, a kill while linking)
    is a signal inside ``dlopen``, not an error."""
    try:
        return (library.is_file() and library.stat().st_size == record.get("bytes")
                and digest(library) == record.get("sha256"))
    except OSError:
        return False


def outputs_to_redo(folder: Path, record: dict | None) -> list[Path]:
    """The build outputs in ``folder`` that are not the ones its ``record`` names: an
    object that differs is compiled again; a ninja log that differs (or no record of
    them) leaves ninja unsure of what the objects were made from, so all are."""
    outputs = _outputs(folder)
    kept = record.get("outputs") if record is not None else None
    if not isinstance(kept, dict):
        return outputs
    try:
        changed = [p for p in outputs if kept.get(p.name) != digest(p)]
    except OSError:
        return outputs
    if any(not p.name.endswith(".o") for p in changed):
        return outputs
    return changed
