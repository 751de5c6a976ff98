"""The command line, run as a user runs it: in a fresh process."""

from __future__ import annotations

import doctest
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
import zoo.builder

from .conftest import run_zoo


def test_help_does_not_import_torch():
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "zoo", "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0
    assert "zoo info" not in result.stdout and "info" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert "torch" not in imported and "zoo.cli" in imported


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "zoo"
    assert script.exists() or shutil.which("zoo")
    result = subprocess.run([str(script) if script.exists() else "zoo", "--version"],
                            capture_output=True, text=True)
    assert result.stdout.strip() == f"zoo {zoo.__version__}"


def test_list_with_pattern():
    result = run_zoo("list", "vit-*")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert names == zoo.list_recipes("vit-*")


def test_info_shows_recipe_components_parameters_memory():
    result = run_zoo("info", "transformer-base")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "parameters: 63,082,496" in out
    weights = (63_082_496 + 1024 * 512) * 4 / 2**20  # parameters + the sinusoid table, fp32
    assert f"weights in float32: {weights:.1f} MiB" in out
    assert "vanilla" in out and "layernorm" in out and "memory free for this process" in out
    result = run_zoo("info", "transformer-base", "--set", "norm=rmsnorm", "--set", "encoder_layers=3")
    assert "rmsnorm" in result.stdout


def test_components_lists_every_family_member():
    out = run_zoo("components", "norm").stdout
    assert [line.split()[1] for line in out.splitlines()[2:]] == ["layernorm", "rmsnorm"]


@pytest.mark.parametrize("args,expected", [
    (["info", "transformer-bse"], "Did you mean 'transformer-base'"),
    (["info", "transformer-base", "--set", "norm=rms"], "Did you mean 'rmsnorm'"),
    (["info", "transformer-base", "--set", "d_model=100"], "not divisible by n_heads 8"),
])
def test_errors_are_one_line_and_exit_2(args, expected):
    result = run_zoo(*args)
    assert result.returncode == 2
    assert expected in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("module", [zoo, zoo.builder])
def test_docstring_examples_run(module):
    failures, tried = doctest.testmod(module)
    assert tried and not failures


def test_public_names_are_not_shadowed_by_submodules():
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(zoo.__path__):
        if info.name != "__main__":
            importlib.import_module(f"zoo.{info.name}")
    for name in zoo.__all__:
        assert not isinstance(getattr(zoo, name), type(zoo)), f"zoo.{name} is a module"


def test_tables_fit_the_terminal_width():
    wide = run_zoo("components")
    assert max(len(line) for line in wide.stdout.splitlines()) > 60  # a pipe gets everything
    narrow = run_zoo("components", env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert "\u2026" in narrow.stdout  # descriptions are cut, not the names
    assert [line.split()[1] for line in narrow.stdout.splitlines()[2:]] == \
        [line.split()[1] for line in wide.stdout.splitlines()[2:]]


def test_a_closed_pipe_ends_quietly():
    done = subprocess.run(f"{sys.executable} -m zoo components | head -1", shell=True,
                          capture_output=True, text=True)
    assert done.stdout.splitlines() and done.stdout.split()[0] == "family"
    assert done.stderr == ""


def test_training_says_each_validation_and_where_it_stopped(tmp_path):
    from .test_training import TINY

    args = ["train", "sort", "--out", str(tmp_path / "run")]
    sets = {**TINY, "train.steps": 200, "train.eval_every": 3, "train.target": 0.05,
            "train.log_every": 1}
    for key, value in sets.items():
        args += ["--set", f"{key}={'null' if value is None else value}"]
    done = run_zoo(*args)
    assert done.returncode == 0, done.stderr
    assert "step 3 (epoch 0): validation token_accuracy" in done.stderr
    assert "target reached at step 3: validation token_accuracy" in done.stderr
    assert "\u2265 0.05" in done.stderr


def test_translate_and_attention_map_take_a_saved_run(tmp_path):
    from .test_training import TINY

    result = zoo.train("sort", overrides={**TINY, "train.steps": 3}, run_dir=tmp_path / "run",
                       progress=False)
    assert run_zoo("save", str(result.run_dir), str(tmp_path / "saved")).returncode == 0
    from zoo.training.runs import load_run

    saved = load_run(f"local-dir:{tmp_path / 'saved'}")
    as_path = load_run(Path(f"local-dir:{tmp_path / 'saved'}"))  # read as zoo.build reads it
    for key, value in result.model.state_dict().items():
        assert torch.equal(saved.model.state_dict()[key], value), key
        assert torch.equal(as_path.model.state_dict()[key], value), key
    from_run = run_zoo("translate", str(result.run_dir), "3 1 2 5 4", "--beam", "1")
    from_saved = run_zoo("translate", f"local-dir:{tmp_path / 'saved'}", "3 1 2 5 4", "--beam",
                         "1")
    assert from_saved.returncode == 0, from_saved.stderr
    assert from_saved.stdout == from_run.stdout
    # one loader, one text entrance: the run, the saved run and the trained model itself
    # carry the task's tokenizer and settings, and decode as the task does
    texts = ["3 1 2 5 4", "5 4 4 2 1"]  # TINY trains on 5 numbers
    expected = result.task.translate(result.model, texts, beam_size=1)
    for name in (result.run_dir, str(result.run_dir), f"local-dir:{tmp_path / 'saved'}"):
        loaded = zoo.load(name)
        assert zoo.translate(loaded, texts, num_beams=1) == expected, name
    assert zoo.translate(result.model, texts, num_beams=1) == expected
    assert from_run.stdout.splitlines() == expected[:1]
    assert type(zoo.load(f"local-dir:{tmp_path / 'saved'}")).__name__ == "Seq2Seq"
    assert zoo.load("transformer-tiny").tokenizer is None  # a recipe has no text of its own
    drawn = run_zoo("attention-map", f"local-dir:{tmp_path / 'saved'}", "3 1 2 5 4", "--out",
                    str(tmp_path / "map.png"))
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "map.png").read_bytes()[:4] == b"\x89PNG"
    plain = zoo.save_pretrained(zoo.build("transformer-tiny"), tmp_path / "plain")
    refused = run_zoo("translate", f"local-dir:{plain}", "3 1 2")
    assert refused.returncode == 2 and "carries no tokenizer" in refused.stderr
    assert "without its run's files (zoo save runs/NAME OUT" in refused.stderr
    assert zoo.load(plain).kind == "seq2seq"  # a saved model named by its path
    (tmp_path / "empty").mkdir()
    for name, says in ((tmp_path / "empty", "holds neither a run"),
                       (tmp_path / "none" / "run", "no such folder")):
        with pytest.raises(zoo.RecipeError, match=says):
            zoo.load(name)
