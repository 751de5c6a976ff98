"""A foreign folder's tokenizer files, checked before transformers reads them.

transformers' ``AutoTokenizer`` trusts its files: a ``source.spm`` of random bytes ends in
sentencepiece's ``RuntimeError``, a ``vocab.json`` that is a list in a ``KeyError``, one
nested 100,000 deep in a ``RecursionError``, a malformed ``tokenizer.json`` in a bare
``Exception``, and a tokenizer file that is a FIFO blocks the process for ever. Each file
is checked here first, by its kind, and anything wrong is one :class:`FormatError` that
names the file and what it should be; whatever transformers still raises is one as well.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from ._text import short_repr, with_article
from .errors import FormatError
from .files import file_kind

JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json",
              "special_tokens_map.json", "added_tokens.json", "chat_template.json")
SENTENCEPIECE_FILES = ("source.spm", "target.spm", "spiece.model", "sentencepiece.bpe.model",
                       "tokenizer.model")
TEXT_FILES = ("vocab.txt", "merges.txt", "chat_template.jinja")
LARGEST = 1 << 30
"""The largest tokenizer file read (1 GiB; real ones are at most tens of MB)."""


def _raw(path: Path, source: str) -> bytes:
    """The bytes of ``path``, a regular file of a sensible size, or one FormatError."""
    try:
        info = path.stat()
    except OSError as exc:
        raise FormatError(f"{source}: {path.name} cannot be read ({short_repr(exc, 200)})") \
            from None
    if not stat.S_ISREG(info.st_mode):
        raise FormatError(f"{source}: {path.name} is {file_kind(info.st_mode)}, not a file; a "
                          "tokenizer's files are regular files saved by save_pretrained")
    if info.st_size == 0:
        raise FormatError(f"{source}: {path.name} is empty; save the tokenizer again")
    if info.st_size > LARGEST:
        raise FormatError(f"{source}: {path.name} holds {info.st_size:,} bytes, more than a "
                          f"tokenizer's file ({LARGEST:,} at most)")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FormatError(f"{source}: {path.name} cannot be read ({short_repr(exc, 200)})") \
            from None


def _id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json(path: Path, source: str) -> dict:
    try:
        data = json.loads(_raw(path, source).decode("utf-8"))
    except RecursionError:
        raise FormatError(f"{source}: {path.name} is nested too deeply to be a tokenizer's "
                          "file") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormatError(f"{source}: {path.name} is not JSON ({short_repr(exc, 120)})") \
            from None
    if not isinstance(data, dict):
        raise FormatError(f"{source}: {path.name} holds {with_article(type(data).__name__)}; "
                          "it is a JSON object")
    return data


def _vocabulary(vocab: Any, where: str, source: str) -> None:
    """A token -> id map: string keys, ids that are whole numbers from 0."""
    if not isinstance(vocab, dict):
        raise FormatError(f"{source}: {where} is {with_article(type(vocab).__name__)}; it "
                          "maps each token to its id (a JSON object)")
    bad = next(((k, v) for k, v in vocab.items() if not _id(v)), None)
    if bad is not None:
        raise FormatError(f"{source}: {where} gives token {short_repr(bad[0], 40)} the id "
                          f"{short_repr(bad[1], 40)}; ids are whole numbers from 0")


def _tokenizer_json(data: dict, source: str) -> None:
    model = data.get("model")
    if not isinstance(model, dict):
        raise FormatError(f"{source}: tokenizer.json has no \"model\" object; it is not a "
                          "tokenizers file (save the tokenizer again)")
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        _vocabulary(vocab, "tokenizer.json's model.vocab", source)
    elif vocab is not None and not isinstance(vocab, list):
        raise FormatError(f"{source}: tokenizer.json's model.vocab is "
                          f"{with_article(type(vocab).__name__)}; an object or a list")
    added = data.get("added_tokens", [])
    if not isinstance(added, list) or not all(
            isinstance(t, dict) and _id(t.get("id")) and isinstance(t.get("content"), str)
            for t in added):
        raise FormatError(f"{source}: tokenizer.json's added_tokens is a list of objects "
                          "with a string content and an id from 0")


def _sentencepiece(path: Path, source: str) -> None:
    data = _raw(path, source)
    try:
        import sentencepiece
    except ImportError:
        return  # transformers says it needs the package
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(data)
    except Exception as exc:  # sentencepiece raises RuntimeError, or OSError, by version
        raise FormatError(f"{source}: {path.name} is not a SentencePiece model "
                          f"({short_repr(exc, 120)}); save the tokenizer again") from None
    if processor.GetPieceSize() <= 0:
        raise FormatError(f"{source}: {path.name} is a SentencePiece model of no pieces")


_CHECKED: set[tuple] = set()
"""The files (by name, device, inode, type, size and modification time) found sound: the
model's tokenizer is read at every translate or embed call, its files checked once."""


def _signature(folder: Path) -> tuple:
    """What the check of ``folder`` depends on: each file's device, inode, type, size and
    modification time (whether a dangling link stands there, for a file that cannot be
    read)."""
    files = []
    for name in (*JSON_FILES, *SENTENCEPIECE_FILES, *TEXT_FILES):
        path = folder / name
        try:
            info = path.stat()
        except OSError:
            files.append((name, path.is_symlink()))
            continue
        files.append((name, info.st_dev, info.st_ino, info.st_mode, info.st_size,
                      info.st_mtime_ns))
    return str(folder.resolve()), tuple(files)


def check_tokenizer_files(folder: Path, source: str) -> None:
    """Each tokenizer file present in ``folder`` is what its name says it is: a regular
    file, not empty, of JSON objects (vocabularies of ids from 0), a SentencePiece model,
    or UTF-8 text; else one FormatError naming it. Files found sound are not read again
    until one of them changes."""
    signature = _signature(folder)
    if signature in _CHECKED:
        return
    _check_each(folder, source)
    _CHECKED.add(signature)


def _check_each(folder: Path, source: str) -> None:
    for name in (*JSON_FILES, *SENTENCEPIECE_FILES, *TEXT_FILES):
        path = folder / name
        if not (path.exists() or path.is_symlink()):
            continue
        if name in JSON_FILES:
            data = _json(path, source)
            if name == "vocab.json":
                _vocabulary(data, "vocab.json", source)
            elif name == "tokenizer.json":
                _tokenizer_json(data, source)
        elif name in SENTENCEPIECE_FILES:
            _sentencepiece(path, source)
        else:
            try:
                _raw(path, source).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FormatError(f"{source}: {name} is not UTF-8 text "
                                  f"({short_repr(exc, 120)})") from None
