"""``zoo experiment``: each of the articles' experiments runs end to end at tiny settings
and writes its table (markdown, JSON) and figure; where the effect is robust even
there, its direction is checked."""

from __future__ import annotations

import json
import math

import pytest

import zoo
from zoo.experiments import EXPERIMENTS, Panel, Report, get_experiment, run_experiment

from .conftest import run_zoo

TINY_SORT = {"model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
             "task.num_samples": 256, "task.valid_samples": 32, "task.test_samples": 64}


def test_every_experiment_of_the_issue_is_there_and_an_unknown_name_is_refused():
    assert set(EXPERIMENTS) == {"sqrt-dk", "heads", "norms", "pre-post", "positions",
                                "schedules", "scaling"}
    with pytest.raises(zoo.RecipeError, match="No experiment 'head'.*Did you mean 'heads'"):
        get_experiment("head")
    result = run_zoo("experiment", "--list")
    assert result.returncode == 0
    assert [line.split()[0] for line in result.stdout.splitlines()[2:]] == list(EXPERIMENTS)
    wrong = run_zoo("experiment", "head")
    assert wrong.returncode == 2 and "Did you mean 'heads'" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    with pytest.raises(zoo.RecipeError, match="at least 1"):
        run_experiment("heads", seeds=0, say=lambda line: None)


def test_a_report_writes_markdown_json_and_png(tmp_path):
    report = Report("demo", "a demo", "“Attention Is All You Need 重读笔记”", "a claim", ["a", "b"],
                    [{"a": 1, "b": 0.5}, {"a": 2, "b": float("nan")}], ["we found it"],
                    {"seeds": 1, "steps": 5, "device": "cpu", "minutes": 0.1, "machine": "x"},
                    [Panel("p", "x", "y", {"s": [(1, 2.0), (2, 3.0)]})])
    report.settings["overrides"] = {"model.d_model": 32}
    assert report.command() == "zoo experiment demo --seeds 1 --steps 5 --set model.d_model=32"
    paths = report.write(tmp_path)
    text = paths["md"].read_text()
    assert "| a | b |" in text and "| 2 | – |" in text and "zoo experiment demo --seeds 1" in text
    assert json.loads(paths["json"].read_text())["rows"][0] == {"a": 1, "b": 0.5}
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _run(name, tmp_path, steps, overrides):
    report = run_experiment(name, seeds=1, steps=steps, out=tmp_path, overrides=overrides,
                            say=lambda line: None)
    files = {kind: tmp_path / f"{name}.{kind}" for kind in ("md", "json", "png")}
    assert all(p.exists() for p in files.values())
    assert files["png"].read_bytes()[:4] == b"\x89PNG"
    data = json.loads(files["json"].read_text())
    assert data["rows"] == json.loads(json.dumps(report.rows)) and data["findings"]
    assert f"zoo experiment {name} --seeds 1 --steps {steps}" in files["md"].read_text()
    return report


@pytest.mark.slow
def test_sqrt_dk(tmp_path):
    report = _run("sqrt-dk", tmp_path, 20, TINY_SORT)
    entropy = [r for r in report.rows if isinstance(r["d_k"], int)]
    unscaled = [r["entropy q·k"] for r in entropy]
    scaled = [r["entropy q·k/√d_k"] for r in entropy]
    assert unscaled == sorted(unscaled, reverse=True) and unscaled[-1] < unscaled[0] / 5
    assert max(scaled) - min(scaled) < 0.05 and min(scaled) > 1.5  # near log(10) = 2.30
    assert {r["d_k"] for r in report.rows} >= {"sort, scaled", "sort, unscaled"}


@pytest.mark.slow
def test_heads(tmp_path):
    report = _run("heads", tmp_path, 10, {k: v for k, v in TINY_SORT.items()
                                          if k != "model.n_heads"})
    assert [r["heads"] for r in report.rows] == [1, 2, 4, 8, 16]
    # the head dim is the model's width (32 here) over the heads
    assert [r["head dim"] for r in report.rows] == [32, 16, 8, 4, 2]


@pytest.mark.slow(seconds=25)
def test_norms(tmp_path):
    report = _run("norms", tmp_path, 10, TINY_SORT)
    assert len(report.rows) == 5
    assert all(r["RMSNorm / LayerNorm"] > 0 for r in report.rows)


@pytest.mark.slow(seconds=40)
def test_pre_post(tmp_path):
    report = _run("pre-post", tmp_path, 10, TINY_SORT)
    assert [(r["norm"], r["peak lr"], r["warmup steps"]) for r in report.rows] == [
        (norm, lr, up) for norm in ("post-LN", "pre-LN") for lr in (1e-3, 3e-3) for up in (0, 3)]


@pytest.mark.slow
def test_positions(tmp_path):
    report = _run("positions", tmp_path, 10, TINY_SORT)
    assert [r["positions"] for r in report.rows] == list(zoo.experiments.positions.POSITIONS)
    for row in report.rows:
        if row["positions"] == "learned":  # no vectors past the training length
            assert 0 <= row["L=8"] <= 1 and all(math.isnan(row[f"L={n}"]) for n in (16, 32, 64))
        else:
            assert all(0 <= row[f"L={n}"] <= 1 for n in (8, 16, 32, 64)), row


@pytest.mark.slow
def test_schedules(tmp_path):
    report = _run("schedules", tmp_path, 9, {
        "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64, "model.encoder_layers": 1,
        "model.decoder_layers": 1, "task.vocab_size": 300, "task.max_train": 500,
        "task.valid_size": 20, "task.test_size": 20})
    assert [r["schedule"] for r in report.rows] == list(zoo.experiments.schedules.SCHEDULES)
    rates = report.panels[0].series
    assert len({lr for _, lr in rates["fixed"]}) == 1  # fixed is flat
    step = [lr for _, lr in rates["step decay"]]
    assert step[0] == max(step) and step[-1] == pytest.approx(step[0] / 4)  # halved twice
    assert all(not math.isnan(r["test loss"]) for r in report.rows)


@pytest.mark.slow
def test_scaling(tmp_path):
    report = _run("scaling", tmp_path, 10, {k: v for k, v in TINY_SORT.items()
                                            if not k.startswith("model.")})
    params = [r["parameters"] for r in report.rows]
    assert params == sorted(params) and params[0] < params[-1] / 10
