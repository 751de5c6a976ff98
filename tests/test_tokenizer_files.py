"""Broken and hostile tokenizer files of a foreign folder (issue 36's fuzz trials) each end in
one FormatError naming the file, never in sentencepiece's, tokenizers' or Python's own
exceptions, and never in a process blocked on a FIFO. The folders are a real Marian (its
SentencePiece models trained here) and a real GPT-2 (its byte-level BPE trained here)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

import zoo
from zoo.decoding.text import complete
from zoo.errors import FormatError, RecipeError

from .conftest import run_zoo

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from .formats import marian_with_tokenizer
    from .language_models import gpt2_with_tokenizer
    from .test_formats import _lines

    root = tmp_path_factory.mktemp("tokenizers")
    marian_with_tokenizer(root / "marian", _lines()[:400], vocab_size=90)
    gpt2_with_tokenizer(root / "gpt2")
    return root


def _copy(folders: Path, name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(folders / name, folder)
    return folder


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _replace(path: Path, content) -> None:
    path.unlink()
    if callable(content):
        content(path)
    else:
        path.write_bytes(content)


MARIAN = {
    "source.spm of random bytes": ("source.spm", os.urandom(3000), "not a SentencePiece model"),
    "source.spm of text": ("source.spm", b"just some text\n" * 20, "not a SentencePiece model"),
    "source.spm a pickle": ("source.spm", pickle.dumps({"a": 1}), "not a SentencePiece model"),
    "an empty source.spm": ("source.spm", b"", "source.spm is empty"),
    "source.spm a FIFO": ("source.spm", lambda p: os.mkfifo(p), "source.spm is a FIFO"),
    "source.spm a folder": ("source.spm", lambda p: p.mkdir(), "source.spm is a folder"),
    "source.spm /dev/zero": ("source.spm", lambda p: p.symlink_to("/dev/zero"),
                             "source.spm is a character device"),
    "vocab.json a list": ("vocab.json", b"[1, 2, 3]", "vocab.json holds a list"),
    "vocab.json nested deep": ("vocab.json", _nested(100_000).encode(),
                               "vocab.json is nested too deeply"),
    "vocab.json of a negative id": ("vocab.json", json.dumps({"</s>": 0, "a": -3}).encode(),
                                    "gives token 'a' the id -3"),
    "vocab.json not JSON": ("vocab.json", b"{\"a\": ", "vocab.json is not JSON"),
}


@pytest.mark.parametrize("case", MARIAN.values(), ids=MARIAN.keys())
def test_a_broken_marian_tokenizer_file_is_one_error_naming_it(folders, tmp_path, case):
    name, content, words = case
    folder = _copy(folders, "marian", tmp_path)
    _replace(folder / name, content)
    model = zoo.build(f"local-dir:{folder}")
    with pytest.raises(FormatError, match=words):
        zoo.translate(model, ["Guten Morgen."])


def test_a_tokenizer_that_gives_ids_past_the_model_is_refused_by_name(folders, tmp_path):
    folder = _copy(folders, "marian", tmp_path)
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["▁"] = 10**6  # the commonest piece, past the model's vocabulary
    (folder / "vocab.json").write_text(json.dumps(vocab))
    model = zoo.build(f"local-dir:{folder}")
    with pytest.raises(FormatError, match=r"gives the id 1000000, outside the model's "
                                          r"vocabulary of \d+; the tokenizer's files do not"):
        zoo.translate(model, ["Guten Morgen, wie geht es?"])
    with pytest.raises(RecipeError, match="the input holds the token id -2, outside"):
        zoo.generate(model, torch.tensor([[5, -2, 3]]))


GPT2 = {
    "tokenizer.json not JSON": ("{\"model\": {", "tokenizer.json is not JSON"),
    "tokenizer.json without a model": ("{\"version\": \"1.0\"}", "has no \"model\" object"),
    "tokenizer.json of a negative id": (json.dumps({"model": {"type": "BPE", "vocab": {"a": -1},
                                                               "merges": []}}),
                                        "gives token 'a' the id -1"),
    "tokenizer.json tokenizers refuses": (json.dumps({"model": {"type": "NoSuchModel"}}),
                                          "its tokenizer could not be read"),
    "tokenizer.json a list": ("[]", "tokenizer.json holds a list"),
}


@pytest.mark.parametrize("case", GPT2.values(), ids=GPT2.keys())
def test_a_broken_tokenizer_json_is_one_error_naming_it(folders, tmp_path, case):
    text, words = case
    folder = _copy(folders, "gpt2", tmp_path)
    (folder / "tokenizer.json").write_text(text)
    model = zoo.build(f"local-dir:{folder}")
    with pytest.raises(FormatError, match=words):
        complete(model, ["The cat"], max_new_tokens=2)


def test_zoo_translate_on_a_fifo_tokenizer_says_so_and_does_not_block(folders, tmp_path):
    folder = _copy(folders, "marian", tmp_path)
    _replace(folder / "source.spm", lambda p: os.mkfifo(p))
    done = run_zoo("translate", f"local-dir:{folder}", "Guten Morgen.")
    assert done.returncode != 0
    assert "source.spm is a FIFO (named pipe), not a file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_tokenizer_is_read_once_and_files_changed_later_are_checked_when_read(folders,
                                                                                 tmp_path):
    # a model carries its text: its tokenizer is read and checked at first use and kept
    # (it was read from disk at every call); a model built after a file changed reads the
    # new bytes, and refuses them by name
    folder = _copy(folders, "marian", tmp_path)
    model = zoo.build(f"local-dir:{folder}")
    first = zoo.translate(model, ["Guten Morgen."])
    tokenizer = model.imported.tokenizer()
    (folder / "source.spm").write_bytes(os.urandom(3000))  # the same name, other bytes
    assert model.imported.tokenizer() is tokenizer
    assert model.tokenizer.get_vocab() == tokenizer.get_vocab()  # model.tokenizer stands for it
    assert zoo.translate(model, ["Guten Morgen."]) == first
    with pytest.warns(DeprecationWarning, match=r"zoo.translate.*removed in zoo \d"):
        assert model.imported.translate(model, ["Guten Morgen."]) == first  # the old way
    again = zoo.build(f"local-dir:{folder}")
    with pytest.raises(FormatError, match="source.spm is not a SentencePiece model"):
        zoo.translate(again, ["Guten Morgen."])
