"""Artifacts and the Hub: save -> load and push -> pull give the same model, through
huggingface_hub's real client talking to a Hub-API server on 127.0.0.1 (and through
the olah mirror when installed); timm's published ViT weights convert to the same
logits; hostile artifacts are refused with errors that say why."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import zoo
from zoo.artifact import CONFIG_NAME, INDEX_NAME, WEIGHTS_NAME

from .conftest import run_python, run_zoo
from .hubserver import HubServer

SMALL = ["transformer-tiny", "transformer-small", "vit-tiny-patch4-28", "vit-tiny-patch16-224",
         "gpt2-tiny", "llama-tiny"]
LARGE = [n for n in zoo.list_recipes() if n not in SMALL
         and zoo.footprint(zoo.resolve(zoo.get_recipe(n))).parameters < 4 * 10**8]
"""The other recipes this machine saves and pushes in seconds (the parameters of
llama-7b-shape and qwen3-0.6b-shape are only counted, in test_language_models.py)."""


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hub-API server on a free port, huggingface_hub pointed at it (HF_ENDPOINT set
    after import, as a user would), a token for writes, an empty cache, and the LFS
    upload path (Xet off)."""
    from huggingface_hub import constants

    server = HubServer().start()
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", server.state.token)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    yield server
    server.stop()


def same_model(a: torch.nn.Module, b: torch.nn.Module, recipe: str) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    a.eval(), b.eval()
    with torch.no_grad():
        if zoo.get_recipe(recipe).architecture.name == "vit":
            size = a.recipe.architecture.settings["image_size"]
            chans = a.recipe.architecture.settings.get("in_chans", 3)
            x = torch.randn(2, chans, size, size)
            assert torch.equal(a(x), b(x))
        elif a.kind in ("language-model", "encoder"):
            x = torch.randint(4, a.recipe.architecture.settings["vocab_size"], (2, 9))
            assert torch.equal(a(x), b(x))
        else:
            x = torch.randint(4, a.recipe.architecture.settings["vocab_size"], (2, 9))
            assert torch.equal(a(x, x), b(x, x))


# -- save / load -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SMALL + [pytest.param(n, marks=pytest.mark.slow) for n in LARGE])
def test_save_then_load_gives_the_same_model(name, tmp_path):
    model = zoo.build(name)
    folder = zoo.save_pretrained(model, tmp_path / name)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", CONFIG_NAME, WEIGHTS_NAME]
    same_model(model, zoo.build(f"local-dir:{folder}"), name)


@pytest.mark.parametrize("as_path", [False, True], ids=["str", "Path"])
def test_a_saved_model_named_by_a_path_loads_its_weights(tmp_path, as_path):
    model = zoo.build("transformer-tiny")
    folder = zoo.save_pretrained(model, tmp_path / "m")
    name = f"local-dir:{folder}"
    loaded = zoo.build(Path(name) if as_path else name)  # was: random weights for a Path
    same_model(model, loaded, "transformer-tiny")
    assert zoo.get_recipe(Path(name) if as_path else name) == model.recipe


def test_build_is_entered_once_for_a_saved_model(tmp_path, monkeypatch):
    import zoo.builder

    folder = zoo.save_pretrained(zoo.build("transformer-tiny"), tmp_path / "m")
    calls = []
    real = zoo.builder.build

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(zoo.builder, "build", counting)
    zoo.builder.build(f"local-dir:{folder}", dropout=0.0)
    assert len(calls) == 1


def test_config_names_each_component_and_its_distribution(tmp_path):
    folder = zoo.save_pretrained(zoo.build("transformer-tiny", positional="rope"), tmp_path / "m")
    config = json.loads((folder / CONFIG_NAME).read_text())
    assert config["format"] == "zoo" and config["zoo_version"] == zoo.__version__
    assert config["recipe"]["components"]["positional"]["name"] == "rope"
    norm = config["components"]["norm"]
    assert norm == {"family": "norm", "name": "layernorm", "plugin": "norm",
                    "distribution": "zoo-transformers", "version": zoo.__version__}


def test_tied_embeddings_are_stored_once_and_tied_again(tmp_path):
    from safetensors import safe_open

    model = zoo.build("transformer-tiny")
    folder = zoo.save_pretrained(model, tmp_path / "m")
    with safe_open(folder / WEIGHTS_NAME, "pt") as f:
        stored = set(f.keys())
    assert len(stored) < len(model.state_dict())  # the shared matrix once
    loaded = zoo.build(f"local-dir:{folder}")
    tied = [p for p in loaded.parameters() if p.shape == (1000, 64)]
    assert len(tied) == 1


def test_large_weights_are_sharded_with_an_index(tmp_path):
    model = zoo.build("transformer-tiny")
    folder = zoo.save_pretrained(model, tmp_path / "m", max_shard_size="200KB")
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and not (folder / WEIGHTS_NAME).exists()
    index = json.loads((folder / INDEX_NAME).read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    sizes = sum(p.stat().st_size for p in folder.glob("model-*.safetensors"))
    assert index["metadata"]["total_size"] <= sizes
    same_model(model, zoo.build(f"local-dir:{folder}"), "transformer-tiny")
    zoo.save_pretrained(model, folder)  # saving again unsharded removes the old shards
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", CONFIG_NAME, WEIGHTS_NAME]


def test_model_card_metadata_parses_with_huggingface_hub(tmp_path):
    from huggingface_hub import ModelCard

    folder = zoo.save_pretrained(zoo.build("vit-tiny-patch4-28"), tmp_path / "m")
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "zoo"
    assert card.data.pipeline_tag == "image-classification"
    assert {"zoo", "vit", "layernorm"} <= set(card.data.tags)
    assert "| norm | `layernorm` |" in card.text


def test_a_trained_run_carries_its_recipe_metrics_and_card(tmp_path):
    from huggingface_hub import ModelCard

    from .test_training import TINY

    result = zoo.train("sort", overrides={**TINY, "train.steps": 4}, run_dir=tmp_path / "run",
                       progress=False)
    code = run_zoo("save", str(result.run_dir), str(tmp_path / "out"))
    assert code.returncode == 0, code.stderr
    out = tmp_path / "out"
    assert {"train.yaml", "results.json"} <= {p.name for p in out.iterdir()}
    card = ModelCard.load(out / "README.md")
    results = json.loads((result.run_dir / "results.json").read_text())
    assert card.data.metrics == sorted(results["test"])
    assert "zoo train sort" in card.text and "| token_accuracy |" in card.text
    same_model(result.model, zoo.build(f"local-dir:{out}"), "transformer-tiny")


# -- push / pull through the Hub API --------------------------------------------------------------
@pytest.mark.parametrize("name", SMALL + [pytest.param("transformer-base", marks=pytest.mark.slow)])
def test_push_then_pull_gives_the_same_model(name, hub):
    """The small recipes and one of real size: a push sends save_pretrained's folder and a
    pull reads it back as a folder, so each recipe's own files are held by
    test_save_then_load_gives_the_same_model, over every recipe (pushing them all here
    too took 90 s of the tests' time)."""
    model = zoo.build(name)
    info = zoo.push_to_hub(model, f"alice/{name}")
    assert info.oid in hub.state.repos[f"alice/{name}"].commits
    # the weights went through the LFS batch and upload endpoints, the card as a regular file
    assert any(line.startswith("PUT /lfs-upload/") for line in hub.state.log)
    entry = hub.state.repos[f"alice/{name}"].commits[info.oid].files
    assert entry[WEIGHTS_NAME].lfs and entry["README.md"].lfs is None
    same_model(model, zoo.build(f"hf-hub:alice/{name}"), name)


def test_revisions_tags_and_commits_pull_what_was_pushed_then(hub):
    from huggingface_hub import HfApi

    first, second = zoo.build("transformer-tiny"), zoo.build("transformer-tiny")
    one = zoo.push_to_hub(first, "alice/sorter")
    HfApi(endpoint=hub.url).create_tag("alice/sorter", tag="v1")
    two = zoo.push_to_hub(second, "alice/sorter", max_shard_size="200KB")
    files = HfApi(endpoint=hub.url).list_repo_files("alice/sorter")
    assert WEIGHTS_NAME not in files and INDEX_NAME in files  # the old single file deleted
    same_model(first, zoo.build("hf-hub:alice/sorter@v1"), "transformer-tiny")
    same_model(first, zoo.build(f"hf-hub:alice/sorter@{one.oid}"), "transformer-tiny")
    same_model(second, zoo.build("hf-hub:alice/sorter"), "transformer-tiny")
    same_model(second, zoo.build(f"hf-hub:alice/sorter@{two.oid}"), "transformer-tiny")
    branch = zoo.push_to_hub(first, "alice/sorter", revision="experiment")
    assert hub.state.repos["alice/sorter"].branches["experiment"] == branch.oid
    same_model(first, zoo.build("hf-hub:alice/sorter@experiment"), "transformer-tiny")


def test_pretrained_false_fetches_the_config_only(hub):
    zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/shape")
    model = zoo.build("hf-hub:alice/shape", pretrained=False)
    assert sum(p.numel() for p in model.parameters()) == 231_424
    downloads = [line for line in hub.state.log if "/resolve/" in line]
    assert downloads and not any(WEIGHTS_NAME in line for line in downloads)


def test_not_found_errors_name_the_repo_or_revision(hub, monkeypatch):
    with pytest.raises(zoo.ArtifactError, match="no such model repository"):
        zoo.build("hf-hub:alice/nothing")
    zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/private", private=True)
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    with pytest.raises(zoo.ArtifactError, match="if it is private.*HF_TOKEN"):
        zoo.build("hf-hub:alice/private")
    monkeypatch.setenv("HF_TOKEN", hub.state.token)
    with pytest.raises(zoo.ArtifactError, match="no such revision"):
        zoo.build("hf-hub:alice/private@v9")
    with pytest.raises(zoo.ArtifactError, match="not a Hub repository id"):
        zoo.build("hf-hub:not a repo")


def test_a_push_with_a_wrong_token_is_refused_before_anything_is_uploaded(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(zoo.ArtifactError, match="cannot push to alice/x: the Hub at "
                       f"{hub.url} refuses the token in HF_TOKEN \\(401.*huggingface-cli login"):
        zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/x")
    assert "alice/x" not in hub.state.repos
    assert not [line for line in hub.state.log if not line.endswith("/api/whoami-v2")]
    zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/x", token=hub.state.token)  # given
    assert "alice/x" in hub.state.repos


# -- no token, no network: one zoo error before anything is uploaded ---------------------------
@pytest.fixture
def no_hub(tmp_path, monkeypatch) -> str:
    """HF_ENDPOINT on a closed port of 127.0.0.1 (nothing answers; no real server is
    reached), no token anywhere (HF_TOKEN unset, none stored) and an empty cache, for
    this process and the zoo processes it starts; returns the endpoint."""
    from huggingface_hub import constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the socket is
    env = {"HF_ENDPOINT": url, "HF_TOKEN_PATH": str(tmp_path / "no-token"),
           "HF_HUB_CACHE": str(tmp_path / "hf-cache"), "HF_HUB_OFFLINE": "0"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", env["HF_TOKEN_PATH"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return url


def _one_zoo_line(done) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("zoo: error: "), done.stderr
    return lines[0]


def test_a_push_without_a_token_says_how_to_log_in(no_hub):
    says = ("cannot push to alice/x: no Hugging Face token was found.*huggingface-cli login"
            ".*HF_TOKEN")
    with pytest.raises(zoo.ArtifactError, match=says):
        zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/x")
    line = _one_zoo_line(run_zoo("push", "transformer-tiny", "alice/x"))
    assert "huggingface-cli login" in line and "HF_TOKEN" in line, line
    line = _one_zoo_line(run_zoo("push", "transformer-tiny", "alice/x",
                                 env={"HF_TOKEN": "hf_fake", "HF_HUB_OFFLINE": "1"}))
    assert "HF_HUB_OFFLINE is set" in line, line


def test_a_push_to_a_hub_that_cannot_be_reached_says_so(no_hub, monkeypatch):
    says = f"cannot push to alice/x: the Hub at {no_hub} cannot be reached \\(.*refused"
    with pytest.raises(zoo.ArtifactError, match=says):  # a token given, HF_TOKEN unset
        zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/x", token="hf_fake")
    monkeypatch.setenv("HF_TOKEN", "hf_fake")
    with pytest.raises(zoo.ArtifactError, match=says):
        zoo.push_to_hub(zoo.build("transformer-tiny"), "alice/x")
    done = run_zoo("push", "transformer-tiny", "alice/x", env={"HF_TOKEN": "hf_fake"})
    line = _one_zoo_line(done)
    assert f"the Hub at {no_hub} cannot be reached" in line and "HF_ENDPOINT" in line, line


_NO_WAITING = "import time\ntime.sleep = lambda seconds: None\n"
"""A sitecustomize for a zoo subprocess: huggingface_hub's retries of an unreachable Hub
do not wait (23 s), and say all they would have said."""


@pytest.mark.parametrize("args", [["info", "hf-hub:x/y"], ["generate", "hf-hub:x/y", "hi"]])
def test_an_unreachable_hub_is_one_line_of_zoo_not_the_clients_retries(no_hub, tmp_path,
                                                                        args):
    (tmp_path / "fast").mkdir()
    (tmp_path / "fast" / "sitecustomize.py").write_text(_NO_WAITING)
    line = _one_zoo_line(run_zoo(*args, pythonpath=tmp_path / "fast"))
    assert line.startswith(f"zoo: error: hf-hub:x/y is not in the local Hub cache, and the Hub "
                           f"at {no_hub} cannot be reached ("), line
    assert "HF_ENDPOINT" in line and "Pull it once while online" not in line, line


def test_the_client_is_quiet_while_zoo_tries_and_as_it_was_after(no_hub, monkeypatch, capfd):
    import logging

    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http.time, "sleep", lambda seconds: None)
    loggers = ("huggingface_hub", "httpx", "urllib3")
    httpx_level = logging.getLogger("httpx").level
    logging.getLogger("httpx").setLevel(logging.INFO)  # a level of the user's, kept
    try:
        before = {name: logging.getLogger(name).level for name in loggers}
        with pytest.raises(zoo.ArtifactError, match="cannot be reached"):
            zoo.build("hf-hub:x/y")
        assert "Retry" not in capfd.readouterr().err
        assert {name: logging.getLogger(name).level for name in loggers} == before
    finally:
        logging.getLogger("httpx").setLevel(httpx_level)


def test_zoo_pull_offline_says_what_to_check_not_to_pull(no_hub):
    line = _one_zoo_line(run_zoo("pull", "alice/sorter"))
    assert f"the Hub at {no_hub} cannot be reached" in line and "HF_ENDPOINT" in line, line
    assert "Pull it once while online" not in line, line
    line = _one_zoo_line(run_zoo("pull", "alice/sorter", "--force"))  # was a traceback
    assert "could not download it again: the Hub at" in line, line
    line = _one_zoo_line(run_zoo("pull", "alice/sorter", env={"HF_HUB_OFFLINE": "1"}))
    assert "HF_HUB_OFFLINE is set, so the Hub was not asked" in line, line


def test_offline_with_a_filled_cache_loads_in_a_fresh_process(hub, tmp_path):
    model = zoo.build("transformer-tiny").eval()
    zoo.push_to_hub(model, "alice/offline")
    zoo.build("hf-hub:alice/offline")  # fills the cache
    x = torch.randint(4, 200, (2, 9))
    with torch.no_grad():
        expected = model(x, x)
    torch.save({"x": x, "y": expected}, tmp_path / "io.pt")
    script = (
        "import sys, torch, zoo\n"
        "io = torch.load(sys.argv[1])\n"
        "m = zoo.build('hf-hub:alice/offline').eval()\n"
        "with torch.no_grad():\n"
        "    assert torch.equal(m(io['x'], io['x']), io['y'])\n"
        "print('same')\n"
    )
    hub.stop()  # nothing answers any more: the cache alone must do
    env = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    done = run_python(script, str(tmp_path / "io.pt"), env=env)
    assert done.returncode == 0 and "same" in done.stdout, done.stderr
    env["HF_HUB_CACHE"] = str(tmp_path / "empty")
    done = run_python(script, str(tmp_path / "io.pt"), env=env)
    assert done.returncode != 0
    assert "not in the local Hub cache" in done.stderr and "HF_HUB_OFFLINE" in done.stderr


def test_zoo_push_and_pull_on_the_command_line(hub, tmp_path):
    from .test_training import TINY

    result = zoo.train("sort", overrides={**TINY, "train.steps": 3}, run_dir=tmp_path / "run",
                       progress=False)
    env = {"HF_ENDPOINT": hub.url, "HF_TOKEN": hub.state.token, "HF_HUB_DISABLE_XET": "1",
           "HF_HUB_CACHE": str(tmp_path / "cache")}
    done = run_zoo("push", str(result.run_dir), "alice/sorter", env=env)
    assert done.returncode == 0, done.stderr
    assert "train.yaml" in hub.state.repos["alice/sorter"].commits[
        hub.state.repos["alice/sorter"].branches["main"]].files
    done = run_zoo("pull", "alice/sorter", "--out", str(tmp_path / "copy"), env=env)
    assert done.returncode == 0, done.stderr
    same_model(result.model, zoo.build(f"local-dir:{tmp_path / 'copy'}"), "transformer-tiny")
    done = run_zoo("pull", "alice/absent", env=env)
    assert done.returncode == 2 and "no such model repository" in done.stderr


# -- pretrained recipes: timm's weights ---------------------------------------------------------
def test_list_recipes_pretrained_names_the_vits():
    names = zoo.list_recipes(pretrained=True)
    assert {"vit-tiny-patch16-224", "vit-small-patch16-224", "vit-base-patch16-224"} <= set(names)
    assert all(zoo.get_recipe(n).weights is not None for n in names)
    assert "transformer-base" not in names


def test_pretrained_vit_pulls_timm_weights_and_gives_timms_logits(hub):
    timm = pytest.importorskip("timm")
    ref = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    with torch.no_grad():
        for p in ref.parameters():  # timm's zero-initialised parts made non-trivial
            p.add_(torch.randn_like(p) * 0.02)
    weights = zoo.get_recipe("vit-tiny-patch16-224").weights
    from safetensors.torch import save

    hub.state.add_file(weights.hub, "model.safetensors",
                       save({k: v.contiguous() for k, v in ref.state_dict().items()}))
    hub.state.add_file(weights.hub, "config.json", json.dumps({"architecture": "vit_tiny_patch16_224",
                                                               "num_classes": 1000}).encode())
    ours = zoo.build("vit-tiny-patch16-224", pretrained=True).eval()
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-4, atol=1e-4)


def test_pretrained_without_published_weights_says_which_have_them():
    with pytest.raises(zoo.RecipeError, match="names no published weights.*vit-small-patch16-224"):
        zoo.build("transformer-tiny", pretrained=True)


def test_pretrained_offline_without_the_weights_says_so(hub, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(zoo.ArtifactError, match="not in the local Hub cache.*HF_HUB_OFFLINE"):
        zoo.build("vit-tiny-patch16-224", pretrained=True)


# -- hostile or broken artifacts -----------------------------------------------------------------
@pytest.fixture
def saved(tmp_path) -> Path:
    return zoo.save_pretrained(zoo.build("transformer-tiny"), tmp_path / "m")


def _edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / CONFIG_NAME).read_text())
    edit(config)
    (folder / CONFIG_NAME).write_text(json.dumps(config))


def test_a_pickle_only_repo_is_refused(hub, saved):
    hub.state.add_file("mallory/pickled", CONFIG_NAME, (saved / CONFIG_NAME).read_bytes())
    hub.state.add_file("mallory/pickled", "pytorch_model.bin", b"\x80\x04not really")
    with pytest.raises(zoo.ArtifactError, match=r"only as pickle \('pytorch_model.bin'\).*"
                                                r"safetensors"):
        zoo.build("hf-hub:mallory/pickled")


def test_a_pickle_only_folder_is_refused(saved):
    (saved / WEIGHTS_NAME).rename(saved / "pytorch_model.bin")
    with pytest.raises(zoo.ArtifactError, match="only as pickle"):
        zoo.build(f"local-dir:{saved}")


def test_a_config_naming_an_unknown_component_is_refused(saved):
    def edit(config):
        config["recipe"]["components"]["attention"] = "flashier"
        del config["components"]["attention"]
    _edit_config(saved, edit)
    with pytest.raises(zoo.UnknownNameError, match="'flashier'.*vanilla"):
        zoo.build(f"local-dir:{saved}")


@pytest.mark.parametrize("path", ["os:system", "torch.nn.Linear", "../evil.py"])
def test_a_config_with_a_python_path_is_refused(saved, path):
    # "os:system" has the shape of a qualified name (PLUGIN:NAME): no plugin is 'os'
    _edit_config(saved, lambda c: c["recipe"]["components"].__setitem__("norm", path))
    with pytest.raises(zoo.ZooError, match="(not a component name|no installed plugin).*"
                                           "never Python"):
        zoo.build(f"local-dir:{saved}")


def test_a_component_from_a_missing_plugin_names_the_package(saved, with_plugins):
    model = zoo.build("transformer-tiny", attention="multi-query")
    folder = zoo.save_pretrained(model, saved.parent / "mq")
    same_model(model, zoo.build(f"local-dir:{folder}"), "transformer-tiny")
    code = run_zoo("info", f"local-dir:{folder}")  # a process without the plugin
    assert code.returncode == 2
    assert ("needs plugin 'zoo-plugin-example' (pip install zoo-plugin-example) for attention "
            "'multi-query'") in code.stderr


def test_truncated_weights_name_the_file(saved):
    data = (saved / WEIGHTS_NAME).read_bytes()
    (saved / WEIGHTS_NAME).write_bytes(data[: len(data) // 2])
    with pytest.raises(zoo.ArtifactError, match="model.safetensors is not a readable safetensors "
                                                "file.*truncated"):
        zoo.build(f"local-dir:{saved}")


def test_a_tensor_of_the_wrong_shape_is_named(saved):
    from safetensors.torch import load_file

    state = load_file(saved / WEIGHTS_NAME)
    state["encoder.layers.0.ffn.fc1.weight"] = torch.zeros(3, 3)
    save_file(state, saved / WEIGHTS_NAME)
    with pytest.raises(zoo.ArtifactError, match=r"wrong shapes: encoder.layers.0.ffn.fc1.weight: "
                                                r"expected \(128, 64\), file has \(3, 3\)"):
        zoo.build(f"local-dir:{saved}")


def test_missing_and_unexpected_tensors_are_named(saved):
    from safetensors.torch import load_file

    state = load_file(saved / WEIGHTS_NAME)
    del state["encoder.layers.0.ffn.fc1.bias"]
    state["extra.weight"] = torch.zeros(2)
    save_file(state, saved / WEIGHTS_NAME)
    with pytest.raises(zoo.ArtifactError, match=r"missing tensors '.*unexpected tensors "
                                                r"'extra.weight'"):
        zoo.build(f"local-dir:{saved}")


def test_a_transformers_config_is_read_by_its_format_or_refused_by_name(saved):
    """A transformers config goes to the format plugin of its model_type
    (tests/test_formats.py loads them); one no plugin reads names those that exist."""
    (saved / CONFIG_NAME).write_text(json.dumps({"model_type": "pegasus", "architectures": ["X"]}))
    with pytest.raises(zoo.FormatError, match="model_type 'pegasus'.*'marian'"):
        zoo.build(f"local-dir:{saved}")
    (saved / CONFIG_NAME).write_text(json.dumps({"model_type": "marian", "architectures": ["X"]}))
    with pytest.raises(zoo.FormatError, match="marian.*eos_token_id"):
        zoo.build(f"local-dir:{saved}")


def test_overrides_that_change_shapes_cannot_take_saved_weights(saved):
    with pytest.raises(zoo.ArtifactError, match="wrong shapes.*overrides that change shapes"):
        zoo.build(f"local-dir:{saved}", d_ff=256)
    model = zoo.build(f"local-dir:{saved}", dropout=0.0)  # shape-neutral overrides apply
    assert model.recipe.architecture.settings["dropout"] == 0.0


# -- a third-party mirror: olah, proxying the test Hub -------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pull_through_the_olah_mirror(hub, tmp_path, monkeypatch):
    olah = shutil.which("olah-cli", path=str(Path(sys.executable).parent)) or shutil.which(
        "olah-cli")
    if olah is None:
        pytest.skip("olah (a Hugging Face mirror server, pip install olah) is not installed")
    model = zoo.build("transformer-tiny")
    zoo.push_to_hub(model, "alice/mirrored")
    port, upstream = _free_port(), hub.url.split("//")[1]
    mirror = subprocess.Popen(
        [olah, "--host", "127.0.0.1", "--port", str(port), "--hf-scheme", "http",
         "--hf-netloc", upstream, "--hf-lfs-netloc", upstream,
         "--mirror-netloc", f"127.0.0.1:{port}", "--mirror-lfs-netloc", f"127.0.0.1:{port}",
         "--repos-path", str(tmp_path / "repos")],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.2)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        pulled = zoo.build("hf-hub:alice/mirrored")
        same_model(model, pulled, "transformer-tiny")
        assert any("/alice/mirrored/resolve/" in line for line in hub.state.log)
    finally:
        mirror.terminate()
        mirror.wait(10)


def test_a_model_of_a_recipe_with_a_base_round_trips_through_the_hub(hub):
    recipe = zoo.Recipe.from_dict({"base": "transformer-tiny", "name": "tiny-gelu",
                                   "components": {"ffn": "gelu"}})
    model = zoo.build(recipe)
    zoo.push_to_hub(model, "alice/tiny-gelu")
    pulled = zoo.build("hf-hub:alice/tiny-gelu")
    assert pulled.recipe == model.recipe and pulled.recipe.based_on == "transformer-tiny"
    same_model(model, pulled, "transformer-tiny")


# -- a Hub that fails ------------------------------------------------------------------------------
@pytest.fixture
def pushed(hub, monkeypatch):
    """alice/tiny on the test Hub; retries wait 10 ms."""
    from .hubserver import Fault  # noqa: F401  (the tests below inject them)

    monkeypatch.setenv("ZOO_HUB_RETRY_WAIT", "0.01")
    model = zoo.build("transformer-tiny")
    zoo.push_to_hub(model, "alice/tiny")
    return model


def _cached(name: str) -> list[Path]:
    from huggingface_hub import constants

    return list(Path(constants.HF_HUB_CACHE).rglob(name))


@pytest.mark.parametrize("filename", ["model.safetensors", "config.json"])
def test_a_flaky_download_is_retried_and_said(hub, pushed, filename):
    from zoo.hub import HubWarning

    from .hubserver import Fault

    hub.state.faults.append(Fault(filename, "status", times=2, status=503))
    with pytest.warns(HubWarning, match=f"alice/tiny: the Hub answered 503.*file {filename}.*"
                                        "retrying") as said:
        pulled = zoo.build("hf-hub:alice/tiny")
    assert len([w for w in said if issubclass(w.category, HubWarning)]) == 2
    same_model(pushed, pulled, "transformer-tiny")


def test_a_download_that_keeps_failing_is_one_zoo_error_naming_repo_file_and_status(
        hub, pushed, monkeypatch):
    from .hubserver import Fault

    monkeypatch.setenv("ZOO_HUB_RETRIES", "1")
    hub.state.faults.append(Fault("model.safetensors", "status", times=2))
    with pytest.warns(UserWarning), pytest.raises(zoo.ArtifactError) as raised:
        zoo.build("hf-hub:alice/tiny")
    message = str(raised.value)
    for part in ("hf-hub:alice/tiny", "answered 500", "file model.safetensors", "tried 2 times",
                 "Try again later"):
        assert part in message, message
    same_model(pushed, zoo.build("hf-hub:alice/tiny"), "transformer-tiny")  # fault gone


def test_a_download_cut_halfway_is_resumed(hub, pushed):
    from .hubserver import Fault

    hub.state.faults.append(Fault("model.safetensors", "cut"))
    same_model(pushed, zoo.build("hf-hub:alice/tiny"), "transformer-tiny")
    gets = [line for line in hub.state.log if line.startswith("GET") and
            line.endswith("/model.safetensors")]
    assert len(gets) == 2 and hub.state.faults[0].times == 0


@pytest.mark.slow
def test_a_download_that_times_out_names_the_setting(hub, pushed, monkeypatch):
    from huggingface_hub import constants

    from .hubserver import Fault

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)
    monkeypatch.setenv("ZOO_HUB_RETRIES", "0")
    hub.state.faults.append(Fault("model.safetensors", "slow", times=50, seconds=3))
    with pytest.raises(zoo.ArtifactError, match="no answer within HF_HUB_DOWNLOAD_TIMEOUT=1 s "
                                                "\\(file model.safetensors\\)"):
        zoo.build("hf-hub:alice/tiny")


def test_a_hub_that_never_answers_is_given_up_after_one_round_of_the_clients_tries(
        hub, pushed, monkeypatch):
    """huggingface_hub already tries a timed-out download six times (resuming); zoo does
    not multiply that by its own retries (it took 44 s here, 272 s at the default
    timeout), so the error comes after about 6 x (timeout + 1) s."""
    from huggingface_hub import constants

    from .hubserver import Fault

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 1)
    slow = Fault("model.safetensors", "slow", times=1000, seconds=4)
    hub.state.faults.append(slow)
    with pytest.raises(zoo.ArtifactError, match="no answer within HF_HUB_DOWNLOAD_TIMEOUT=1 s"
                                                ".*tried 6 times"):
        zoo.build("hf-hub:alice/tiny")
    assert 1000 - slow.times == 6  # the download asked for 6 times (it was 24: 44 s here)


@pytest.mark.parametrize("filename", ["model.safetensors", "config.json"])
def test_a_bad_file_never_stays_in_the_cache(hub, pushed, filename):
    from zoo.errors import CorruptFileError
    from zoo.hub import HubWarning

    from .hubserver import Fault

    hub.state.faults.append(Fault(filename, "flip"))  # once: the second download is good
    with pytest.warns(HubWarning, match=f"'{filename}' in the Hub cache was not what the "
                                        "repository holds.*removed, downloading again"):
        same_model(pushed, zoo.build("hf-hub:alice/tiny"), "transformer-tiny")
    hub.state.faults.append(Fault(filename, "flip", times=2))  # both downloads bad
    shutil.rmtree(Path(_cached(filename)[0]).parents[3])  # a fresh cache
    with pytest.warns(HubWarning), pytest.raises(CorruptFileError,
                                                 match="wrong both times.*was removed"):
        zoo.build("hf-hub:alice/tiny")
    assert not [p for p in _cached(filename) if p.exists()]  # the bad copy is gone
    same_model(pushed, zoo.build("hf-hub:alice/tiny"), "transformer-tiny")


def test_zoo_pull_force_downloads_every_file_again(hub, pushed):
    done = run_zoo("pull", "alice/tiny")
    assert done.returncode == 0, done.stderr
    gets = len([line for line in hub.state.log if line.startswith("GET")])
    done = run_zoo("pull", "alice/tiny", "--force")
    assert done.returncode == 0, done.stderr
    again = [line for line in hub.state.log if line.startswith("GET")][gets:]
    assert any(line.endswith("/model.safetensors") for line in again)
    assert any(line.endswith("/config.json") for line in again)


def test_two_pulls_of_one_repo_into_one_cache_both_end_with_the_right_weights(hub, pushed):
    from .hubserver import Fault

    hub.state.faults.append(Fault("model.safetensors", "slow", times=2, seconds=1.0))
    script = ("import sys, torch, zoo; m = zoo.build('hf-hub:alice/tiny'); "
              "torch.save(m.state_dict(), sys.argv[1])")
    outs = [Path(os.environ["HF_HUB_CACHE"]).parent / f"state-{i}.pt" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, "-c", script, str(out)],
                              stderr=subprocess.PIPE, text=True) for out in outs]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()[-2000:]
    expected = pushed.state_dict()
    for out in outs:
        got = torch.load(out)
        assert all(torch.equal(got[k], expected[k]) for k in expected)


def test_a_pull_into_a_full_cache_says_so_and_changes_nothing(hub, pushed, small_disk,
                                                               monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(small_disk("300k") / "cache"))
    with pytest.raises(zoo.ArtifactError, match="could not write it into the Hub cache: the "
                                                "disk that holds .* is full"):
        zoo.build("hf-hub:alice/tiny")
