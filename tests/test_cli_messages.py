"""What a new user meets first on the command line (issue 66): warnings as one line each,
once; "an Encoder", not "a Encoder"; every error as ``zoo: error: ...`` with status 2; a
hint that names a command that works; and progress while an experiment trains."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import zoo
import zoo.cli
from zoo._text import with_article
from zoo.cli import main
from zoo.experiments.context import Context

from .conftest import run_zoo

ROOT = Path(__file__).resolve().parents[1]
TINY_SORT = {"model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
             "task.num_samples": 256, "task.valid_samples": 32, "task.test_samples": 64}


# -- 1. warnings ---------------------------------------------------------------------------------
SOMELIB = ("import warnings\n\n\n"
           "def old():\n"
           "    warnings.warn('old() is old;\\n  call new()', FutureWarning)\n")
"""Another package's module, whose function warns on two lines."""

WARNS_THRICE = """
import dataclasses, sys, warnings
import torch
import somelib
import zoo.cli
from zoo import hardware
from zoo.training.setup import set_threads

two = dataclasses.replace(hardware.detect().cpu, cores=2)
hardware.detect = lambda: hardware.Hardware(cpu=two)
hardware.cpu_busy = lambda interval=0.5: 1.0  # other processes keep both cores busy


def command(args):
    for _ in range(3):  # as an experiment's runs do: the same warnings each time
        set_threads(None, torch.device("cpu"))
        somelib.old()
    return 0


zoo.cli.cmd_list = command
warnings.simplefilter("always")  # every call reaches the display
code = zoo.cli.main(["list"])
warnings.warn("after main", UserWarning)  # Python's own wording again
sys.exit(code)
"""


def test_the_command_line_shows_each_warning_as_one_line_once(tmp_path):
    (tmp_path / "somelib.py").write_text(SOMELIB)
    done = subprocess.run([sys.executable, "-c", WARNS_THRICE], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])})
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[:2] == [
        "zoo: warning: other processes keep 2.0 of this machine's 2 cores busy: training "
        "with 1 thread instead of 2 (choose with --threads N, zoo.train(threads=N))",
        "zoo: warning: FutureWarning from somelib: old() is old; call new()"], done.stderr
    assert len(lines) == 3 and lines[2].endswith(": UserWarning: after main"), done.stderr


def test_a_caller_recording_warnings_still_gets_those_of_a_command(tmp_path, monkeypatch):
    (tmp_path / "somelib.py").write_text(SOMELIB)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "somelib", raising=False)
    import somelib

    monkeypatch.setattr(zoo.cli, "cmd_list", lambda args: somelib.old() or 0)
    before = warnings.formatwarning
    with pytest.warns(FutureWarning, match="old"):  # as zoo's tests of the CLI record them
        assert main(["list"]) == 0
    assert warnings.formatwarning is before  # restored: a Python caller keeps Python's way


# -- 2. a or an ----------------------------------------------------------------------------------
def test_a_name_takes_the_article_it_is_said_with():
    said = {"Encoder": "an Encoder", "BertModel": "a BertModel", "int": "an int",
            "list": "a list", "MLP": "an MLP", "GPT2Model": "a GPT2Model",
            "UniModel": "a UniModel", "ImageText": "an ImageText", "NoneType": "a NoneType"}
    assert {word: with_article(word) for word in said} == said


def test_no_message_builds_a_or_an_from_a_class_name_by_hand():
    by_hand = re.compile(r"""\ban? (?:["']\s+f?["'])?\{[^}\n]*(?:__name__|kind)[^}\n]*\}""")
    found = [f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
             for p in sorted((ROOT / "zoo").rglob("*.py"))
             for text in [p.read_text(encoding="utf-8")] for m in by_hand.finditer(text)]
    assert not found, found


def test_rerank_on_an_encoder_says_an_encoder():
    with pytest.raises(zoo.RecipeError, match="^an Encoder does not rerank"):
        zoo.rerank(zoo.build("minilm-l6-h384"), "a query", ["a document"])


# -- 3. one way to fail --------------------------------------------------------------------------
def test_generate_on_an_encoder_is_a_zoo_error_with_status_2():
    done = run_zoo("generate", "minilm-l6-h384", "Hello")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "zoo: error: minilm-l6-h384 is not a language model (an encoder model); zoo "
        "translate decodes sequence-to-sequence models"]


@pytest.mark.parametrize("argv, says", [
    (["train"], "zoo: error: name a recipe (zoo train sort)"),
    (["train", "sort", "--resume", "runs/sort"], "zoo: error: give a recipe or --resume"),
    (["export", "transformer-tiny", "--format", "nope", "--out", "x"],
     "zoo: error: unknown --format 'nope'"),
    (["list", "vit-a", "vit-b"], "zoo: error: one pattern, not 2"),
])
def test_every_command_refuses_its_arguments_as_zoo_errors_do(argv, says, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(says) and len(err.splitlines()) == 1, err


# -- 4. a hint that works ------------------------------------------------------------------------
def test_the_missing_models_hint_names_a_command_that_lists_the_recipes(capsys):
    assert main(["generate", "no/such/run", "Hello"]) == 2
    hint = re.search(r"\(zoo (list[^)]*)\)", capsys.readouterr().err)
    assert hint, "the hint names no zoo list command"
    assert main(shlex.split(hint.group(1))) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert listed == zoo.list_recipes()
    assert main(["list", "recipes", "vit-*"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert listed == zoo.list_recipes("vit-*")


# -- 5. progress ---------------------------------------------------------------------------------
def test_an_experiments_training_runs_show_zoo_trains_progress_bar(tmp_path, capsys):
    quiet = Context(1, 3, "cpu", tmp_path / "quiet", lambda line: None)
    quiet.train("sort", "tiny", 0, TINY_SORT)
    assert "3/3" not in capsys.readouterr().err
    shown = Context(1, 3, "cpu", tmp_path / "shown", lambda line: None, progress=True)
    shown.train("sort", "tiny", 0, TINY_SORT)
    assert re.search(r"sort: 100%.*3/3", capsys.readouterr().err)


def test_zoo_experiment_asks_for_progress_unless_quiet(monkeypatch, capsys):
    import zoo.experiments

    asked = []

    def run_experiment(name, **kwargs):
        asked.append(kwargs["progress"])
        raise zoo.RecipeError("stop here")

    monkeypatch.setattr(zoo.experiments, "run_experiment", run_experiment)
    assert main(["experiment", "sqrt-dk"]) == 2
    assert main(["experiment", "sqrt-dk", "--quiet"]) == 2
    assert asked == [True, False]
