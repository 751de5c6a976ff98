"""The corpus of plugins of earlier releases (``tests/plugins_of_earlier_releases/``),
installed together as a user who installed them over the months has them: every one
loads and works unedited, beside zoo's built-ins that took their names since, and the
models saved with them compute what they computed when saved
(docs/compatibility.md). Each package's own behaviour is held to its reference in its
own test file (``test_earlier_nllb.py``, ``test_earlier_suppress.py``) and in
``test_plugins.py`` (``zoo-plugin-old``, ``zoo-plugin-firsts``)."""

from __future__ import annotations

import hashlib
import json
import warnings

import torch

import zoo
from zoo.registry import registry

from .conftest import EARLIER, earlier_packages, plugins_from


def _files():
    return sorted(p for p in EARLIER.rglob("*") if p.is_file() and not any(
        part in ("build", "__pycache__") or part.endswith(".egg-info")
        for part in p.relative_to(EARLIER).parts) and p.name not in ("SHA256SUMS",
                                                                     "README.md"))


def test_no_file_of_the_corpus_was_edited_or_left_unrecorded():
    # a corpus plugin is never edited: each file's sha256 is recorded when it is written
    recorded = dict(line.split("  ", 1)[::-1] for line in
                    (EARLIER / "SHA256SUMS").read_text().splitlines() if line.strip())
    now = {str(p.relative_to(EARLIER)): hashlib.sha256(p.read_bytes()).hexdigest()
           for p in _files()}
    assert now == recorded, ("a file of tests/plugins_of_earlier_releases changed: undo "
                             "the change, and change zoo instead (docs/compatibility.md)")
    assert earlier_packages() == ["zoo-plugin-firsts", "zoo-plugin-nllb", "zoo-plugin-old",
                                  "zoo-plugin-suppress"]


def test_every_plugin_of_the_corpus_loads_beside_the_built_ins_with_one_notice(
        earlier_site, monkeypatch, caplog):
    import zoo.foreign
    import zoo.registry

    fresh = set()  # as in a new process: nothing told yet
    monkeypatch.setattr(zoo.registry, "NOTICED", fresh)
    monkeypatch.setattr(zoo.foreign, "NOTICED", fresh)
    with plugins_from(earlier_site, monkeypatch), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: not one per name
        warnings.simplefilter("ignore", DeprecationWarning)  # but the first API's, by design
        with caplog.at_level("INFO", logger="zoo.plugin_names"):
            infos = {i.distribution: i for i in zoo.list_plugins()}
        for package in earlier_packages():
            assert infos[package].ok, (package, infos[package].error)
        assert all(i.ok for i in infos.values())
        notices = [r.getMessage() for r in caplog.records if r.name == "zoo.plugin_names"]
        assert len(notices) == 1 and "ffn 'geglu' means plugin cosine's" in notices[0]
        # each name a later built-in took is still the plugin's; the built-in one word away
        assert zoo.get_component("ffn", "geglu").plugin == "cosine"
        assert zoo.get_component("ffn", "ffn:geglu").plugin == "ffn"
        from zoo.foreign import format_for

        with caplog.at_level("INFO", logger="zoo.plugin_names"):
            assert format_for({"model_type": "m2m_100"}, "a folder").plugin == "nllb"
        assert any("model_type 'm2m_100'" in r.getMessage() for r in caplog.records)
        # a recipe extending a built-in recipe: the built-in's parts, the plugin's own geglu
        model = zoo.build("cosine-tiny")
        layer = model.encoder.layers[0]
        assert (type(layer.attn).__name__, type(layer.ffn).__name__) == (
            "CosineAttention", "PlainGEGLU")
        assert type(model.decoder.layers[0].cross_attn) is type(
            zoo.build("transformer-tiny").decoder.layers[0].cross_attn)
    registry.reset()


def test_a_model_saved_with_a_corpus_plugin_computes_what_it_did_when_saved(earlier_site,
                                                                           monkeypatch):
    folder = EARLIER / "saved" / "cosine-tiny-0.1.0"
    expected = json.loads((EARLIER / "saved" / "cosine-tiny-0.1.0.logits.json").read_text())
    with plugins_from(earlier_site, monkeypatch):
        model = zoo.build(f"local-dir:{folder}").eval()
        assert type(model.encoder.layers[0].ffn).__name__ == "PlainGEGLU"
        with torch.no_grad():
            logits = model(torch.tensor(expected["src"]), torch.tensor(expected["tgt"]))
        torch.testing.assert_close(logits, torch.tensor(expected["logits"]), rtol=1e-5,
                                   atol=1e-5)
    registry.reset()
