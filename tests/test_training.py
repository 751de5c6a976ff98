"""Training: schedules against the paper's formula, overrides, runs that resume
to the same numbers, checkpoints that survive a kill, DDP equal to accumulation,
and the tasks' data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import zoo
from zoo import hardware
from zoo.training import schedules
from zoo.training.checkpoint import latest_checkpoint, load_checkpoint
from zoo.training.config import TrainRecipe, apply_train_overrides, get_train_recipe

from .conftest import run_python, run_zoo

TINY = {
    "model.d_model": 32, "model.n_heads": 2, "model.encoder_layers": 1,
    "model.decoder_layers": 1, "model.d_ff": 64,
    "task.num_samples": 512, "task.valid_samples": 64, "task.test_samples": 64,
    "task.seq_len": 5, "train.batch_size": 32, "train.log_every": 1, "train.target": None,
}


def rows(run_dir, split="train"):
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


# -- recipes and schedules ---------------------------------------------------------------------
def test_inverse_sqrt_is_the_papers_schedule():
    d, warmup = 512, 4000
    peak = d**-0.5 * warmup**-0.5
    factor = schedules.inverse_sqrt(warmup)
    for step in (1, 100, 3999, 4000, 4001, 10000, 100000):
        paper = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert peak * factor(step) == pytest.approx(paper, rel=1e-12)


def test_cosine_and_one_cycle_shapes():
    cos = schedules.cosine(10, 110, min_ratio=0.1)
    assert cos(0) == 0 and cos(5) == 0.5 and cos(10) == 1.0
    assert cos(60) == pytest.approx(0.55) and cos(110) == pytest.approx(0.1)
    one = schedules.one_cycle(100, pct_start=0.25)
    assert one(0) == 0 and one(25) == 1.0 and one(100) == pytest.approx(0.0)
    assert max(one(s) for s in range(101)) == 1.0


def test_cosine_over_time_follows_the_clock_not_the_steps():
    clock = {"spent": 0.0}
    factor = schedules.cosine_over_time(10, lambda: clock["spent"], min_ratio=0.1)
    assert factor(5) == 0.5 and factor(10) == 1.0  # warmup by steps
    clock["spent"] = 0.5
    assert factor(10) == factor(10_000) == pytest.approx(0.1 + 0.9 * 0.5)
    clock["spent"] = 1.7  # past the limit: the bottom of the curve
    assert factor(3) == pytest.approx(0.1)
    clock["spent"] = 0.25
    assert factor(2) == 0.2  # the warmup caps it
    assert factor(100) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_cosine_over_time_ends_with_the_steps_where_they_run_out_first():
    clock = {"spent": 0.0}
    factor = schedules.cosine_over_time(10, lambda: clock["spent"], min_ratio=0.1, total=110)
    by_steps = schedules.cosine(10, 110, min_ratio=0.1)
    for step in (0, 5, 10, 35, 60, 109, 110):  # a fast machine: the steps lead
        clock["spent"] = max(0, step - 10) / 200  # half as far through the time limit
        assert factor(step) == pytest.approx(by_steps(step))
    clock["spent"] = 0.75  # a slow one: the clock leads at step 60 (half of the steps)
    assert factor(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.75)))
    clock["spent"] = 1.0
    assert factor(61) == pytest.approx(0.1)
    assert factor(500) == pytest.approx(0.1)  # past both budgets: the bottom


def test_a_schedule_over_time_needs_a_cosine_and_a_time_limit():
    recipe = get_train_recipe("sort")
    with pytest.raises(zoo.RecipeError, match="has none; set time_limit_minutes"):
        apply_train_overrides(recipe, {"schedule.name": "cosine", "schedule.over": "time"})
    with pytest.raises(zoo.RecipeError, match="over: time is a setting of the cosine schedule"):
        apply_train_overrides(recipe, {"schedule.name": "inverse-sqrt", "schedule.over": "time",
                                       "train.time_limit_minutes": 5})


def test_a_run_over_time_ends_at_the_bottom_of_its_cosine(tmp_path):
    overrides = {**TINY, "train.steps": 100_000, "train.time_limit_minutes": 0.05,
                 "schedule.name": "cosine", "schedule.over": "time", "schedule.warmup_steps": 5,
                 "optimizer.lr": 1e-3}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "r", progress=False)
    lrs = [r["lr"] for r in rows(result.run_dir)]
    assert result.step > 20 and lrs[4] == pytest.approx(1e-3, rel=0.05)  # the peak
    assert all(b <= a for a, b in zip(lrs[5:], lrs[6:]))  # down all the way
    assert lrs[-1] < 0.15e-3  # the clock, not the 100,000 steps, set the end


def _rates(optimizer, scheduler, n):
    out = []
    for _ in range(n):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


@pytest.mark.parametrize("step_size,gamma", [(1, 0.9), (7, 0.5), (25, 0.1)])
def test_step_decay_is_torchs_steplr(step_size, gamma):
    from zoo.training.config import ScheduleSpec

    def sgd():
        return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.3)

    ref_opt = sgd()
    ref = _rates(ref_opt, torch.optim.lr_scheduler.StepLR(ref_opt, step_size, gamma), 80)
    spec = ScheduleSpec(name="step", warmup_steps=0, step_size=step_size, gamma=gamma)
    ours_opt = sgd()
    ours = _rates(ours_opt, schedules.lambda_lr(ours_opt, spec, 80), 80)
    assert ours == pytest.approx(ref, rel=1e-12)


def test_step_decay_after_warmup():
    factor = schedules.step_decay(warmup=10, step_size=5, gamma=0.5)
    assert [factor(s) for s in (1, 5, 10)] == [0.1, 0.5, 1.0]
    assert [factor(s) for s in (11, 15, 16, 20, 21)] == [1.0, 1.0, 0.5, 0.5, 0.25]


def test_training_overrides_are_validated():
    recipe = get_train_recipe("sort")
    changed = apply_train_overrides(recipe, {"model.attention": "rope", "train.steps": 2000,
                                             "optimizer.lr": 5e-4, "task.seq_len": 10})
    assert changed.model.overrides["attention"] == "rope"
    assert changed.steps == 2000 and changed.epochs is None
    assert changed.optimizer.lr == 5e-4 and changed.task.settings["seq_len"] == 10
    with pytest.raises(zoo.RecipeError, match="Unknown training override 'modle.attention'.*"
                                              "'model'"):
        apply_train_overrides(recipe, {"modle.attention": "rope"})
    with pytest.raises(zoo.RecipeError, match="Unknown training setting 'step'.*'steps'"):
        apply_train_overrides(recipe, {"train.step": 3})
    with pytest.raises(zoo.RecipeError, match="batch_size 64 is not divisible by accumulate 5"):
        apply_train_overrides(recipe, {"train.accumulate": 5})
    with pytest.raises(zoo.RecipeError, match="No training recipe 'srot'.*'sort'"):
        get_train_recipe("srot")


def test_a_bad_model_override_fails_before_the_run_folder_exists(tmp_path):
    result = run_zoo("train", "sort", "--set", "model.attention=performr", "--out",
                     str(tmp_path / "run"))
    assert result.returncode == 2
    assert "Did you mean 'performer'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_the_loss_is_named_by_the_recipe_and_label_smoothing_is_its_setting():
    recipe = get_train_recipe("translate-de-en")
    assert recipe.loss.name == "cross-entropy" and recipe.loss.settings == {"label_smoothing": 0.1}
    old = TrainRecipe.model_validate({**recipe.model_dump(exclude={"loss"}), "label_smoothing": 0.2})
    assert old.loss.settings == {"label_smoothing": 0.2}  # runs saved before the loss family
    focal = apply_train_overrides(recipe, {"loss.name": "focal", "loss.gamma": 1.5})
    assert focal.loss.name == "focal" and focal.loss.settings == {"gamma": 1.5}
    again = apply_train_overrides(recipe, {"train.label_smoothing": 0.3})
    assert again.loss.settings == {"label_smoothing": 0.3}
    with pytest.raises(ValueError, match="label_smoothing 0.1 is a setting of the "
                                         "cross-entropy loss.*'focal'"):
        TrainRecipe.model_validate({**recipe.model_dump(exclude={"loss"}),
                                    "label_smoothing": 0.1, "loss": "focal"})


def test_training_with_focal_loss(tmp_path):
    def losses(**overrides):
        result = zoo.train("sort", overrides={**TINY, "train.steps": 4, **overrides},
                           run_dir=tmp_path / str(len(list(tmp_path.iterdir()))), progress=False)
        return [r["loss"] for r in rows(result.run_dir)]

    ce = losses()
    assert losses(**{"loss.name": "focal", "loss.gamma": 0.0}) == pytest.approx(ce, rel=1e-5)
    focal = losses(**{"loss.name": "focal", "loss.gamma": 2.0})
    assert all(f < c for f, c in zip(focal, ce))
    with pytest.raises(zoo.RecipeError, match="settings of loss 'focal'.*gama"):
        losses(**{"loss.name": "focal", "loss.gama": 2.0})


def test_a_task_written_for_label_smoothing_is_refused_with_the_new_contract():
    from zoo.task import check_task

    class OldTask:
        unit, metric = "tokens", "token_accuracy"

        def prepare(self): ...
        def model_overrides(self): ...
        def dataset(self, split): ...
        def collate(self, items): ...
        def loss(self, model, batch, label_smoothing=0.0): ...
        def evaluate(self, model, split, *, device=None, limit=None): ...

    with pytest.raises(zoo.PluginError, match=r"loss\(model, batch, criterion\)"):
        check_task(OldTask(), "old", "old-plugin")
    OldTask.loss = lambda self, model, batch, criterion: None
    check_task(OldTask(), "old", "old-plugin")


def test_zoo_list_train_lists_the_training_recipes():
    result = run_zoo("list", "--train")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert names == zoo.list_train_recipes() == ["fashion-mnist-vit", "lm-english", "pairs-de-en",
                                                 "sort", "translate-de-en"]


def test_every_builtin_training_recipe_resolves():
    for name in zoo.list_train_recipes():
        recipe = zoo.get_train_recipe(name)
        zoo.get_component("task", recipe.task.name)
        zoo.resolve(zoo.get_recipe(recipe.model.recipe), recipe.model.overrides)


# -- a run, end to end -------------------------------------------------------------------------
def test_a_short_run_writes_everything_and_its_weights_reload(tmp_path):
    result = zoo.train("sort", overrides={**TINY, "train.steps": 20}, run_dir=tmp_path / "r",
                       progress=False)
    run = result.run_dir
    assert result.step == 20 and set(result.metrics) >= {"token_accuracy", "sequence_accuracy"}
    train_rows = rows(run)
    assert [r["step"] for r in train_rows] == list(range(1, 21))
    assert all(r["tokens_per_s"] > 0 and r["lr"] > 0 for r in train_rows)
    assert rows(run, "test")[0]["token_accuracy"] == result.metrics["token_accuracy"]
    results = json.loads((run / "results.json").read_text())
    assert results["step"] == 20 and results["metric"] == "token_accuracy"
    from zoo.training.runs import load_run

    loaded = load_run(run)
    src = torch.randint(3, 13, (2, 5))
    tgt = torch.randint(3, 13, (2, 6))
    result.model.eval()
    torch.testing.assert_close(loaded.model(src, tgt), result.model(src, tgt))


def test_resume_continues_to_the_same_losses(tmp_path):
    common = {**TINY, "train.steps": 40, "train.checkpoint_every": 7}
    full = zoo.train("sort", overrides=common, run_dir=tmp_path / "full", progress=False)
    part = zoo.train("sort", overrides=common, run_dir=tmp_path / "part", progress=False,
                     stop_after_steps=17)
    assert part.interrupted and part.step == 17
    resumed = zoo.train(resume=tmp_path / "part", progress=False)
    assert resumed.step == 40
    a = {r["step"]: r["loss"] for r in rows(full.run_dir)}
    b = {r["step"]: r["loss"] for r in rows(resumed.run_dir)}
    assert a == b  # dropout is on: the random generators resume too
    assert full.metrics == resumed.metrics


KILLER = """
import os, sys
import zoo.training.checkpoint as ck
real = ck.save_weights_file
calls = []
def dies_while_writing(model, path):
    calls.append(path)
    if len(calls) == 2:  # the second checkpoint: half a file, then the process is gone
        with open(path, "wb") as fh:
            fh.write(b"\\x00" * 1000)
        os._exit(9)
    real(model, path)
ck.save_weights_file = dies_while_writing
import zoo
zoo.train("sort", overrides=json.loads(sys.argv[2]), run_dir=sys.argv[1], progress=False)
"""


def test_a_process_killed_while_saving_leaves_the_previous_checkpoint(tmp_path):
    overrides = {**TINY, "train.steps": 30, "train.checkpoint_every": 10}
    script = "import json\n" + KILLER
    proc = run_python(script, str(tmp_path / "run"), json.dumps(overrides))
    assert proc.returncode == 9, proc.stderr
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and latest.name == "step-00000010"
    model = zoo.build("transformer-tiny", vocab_size=13, d_model=32, n_heads=2, encoder_layers=1,
                      decoder_layers=1, d_ff=64, max_len=7)
    state = load_checkpoint(latest, model)
    assert state["step"] == 10
    leftovers = [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()]
    assert any(name.startswith(".step-00000020.tmp") for name in leftovers)
    # and the run resumes from it
    resumed = zoo.train(resume=tmp_path / "run", progress=False)
    assert resumed.step == 30


def test_ctrl_c_saves_and_resume_finishes(tmp_path):
    run = tmp_path / "run"
    args = ["train", "sort", "--out", str(run), "--no-progress"]
    for key, value in {**TINY, "train.steps": 100000, "train.target": "null"}.items():
        args += ["--set", f"{key}={'null' if value is None else value}"]
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "zoo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        if (run / "metrics.jsonl").exists() and len(rows(run)) >= 5:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "zoo train --resume" in err
    latest = latest_checkpoint(run)
    assert latest is not None
    step = torch.load(latest / "state.pt", weights_only=True)["step"]
    assert step >= 5
    result = run_zoo("train", "--resume", str(run), "--set", f"train.steps={step + 3}",
                     "--no-progress")
    assert result.returncode == 0, result.stderr
    assert rows(run)[-1]["step"] == step + 3


@pytest.mark.slow
def test_ddp_with_two_processes_equals_accumulation_in_one(tmp_path):
    sets = {**TINY, "train.steps": 6, "model.dropout": 0.0}
    args = [x for k, v in sets.items() for x in ("--set", f"{k}={'null' if v is None else v}")]
    one = run_zoo("train", "sort", "--out", str(tmp_path / "one"), "--no-progress",
                  "--set", "train.accumulate=2", *args)
    assert one.returncode == 0, one.stderr
    env = dict(os.environ, OMP_NUM_THREADS="1")
    two = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29577", "-m", "zoo", "train", "sort", "--out", str(tmp_path / "two"),
         "--no-progress", *args],
        capture_output=True, text=True, env=env, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    a = [r["loss"] for r in rows(tmp_path / "one")]
    b = [r["loss"] for r in rows(tmp_path / "two")]
    assert len(a) == len(b) == 6
    assert a == pytest.approx(b, rel=1e-5, abs=1e-6)


_LATE_START = """
import json, sys, time
import torch
from zoo.training import loop
recipe = loop.recipe_to_run("sort", json.loads(sys.argv[2]), None)
trainer = loop.Trainer.open(recipe, run_dir=sys.argv[1], resume=None, device=torch.device("cpu"))
trainer.wrap_model()
if trainer.dist.rank == 1:
    time.sleep(2)  # this process starts its clock two seconds after the other one
trainer.run(progress=False, stop_after_steps=None)
"""


@pytest.mark.slow
def test_two_processes_stop_together_on_one_clock(tmp_path):
    """Under a time limit, with the schedule over time: each process has its own clock,
    and here one starts two seconds after the other. They agree on one clock at every
    step, so they stop at the same step (one stopping alone would leave the other
    waiting in a collective) and follow the same learning rate."""
    sets = {**TINY, "train.steps": 100000, "train.time_limit_minutes": 0.1,
            "schedule.name": "cosine", "schedule.over": "time", "schedule.warmup_steps": 5,
            "train.log_every": 20}
    script = tmp_path / "late_start.py"
    script.write_text(_LATE_START)
    env = dict(os.environ, OMP_NUM_THREADS="1", ZOO_DIST_TIMEOUT="30")
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29578", str(script), str(tmp_path / "run"), json.dumps(sets)],
        capture_output=True, text=True, env=env, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["stopped_early"] and 6 <= results["seconds"] < 30
    assert 20 < results["step"] < 100000
    lrs = [r["lr"] for r in rows(tmp_path / "run")]
    assert lrs[-1] < 0.2 * max(lrs)  # the cosine ran its course over the time limit


# -- tasks and their data ----------------------------------------------------------------------
def test_sort_task_data():
    task = zoo.get_component("task", "sort").build({"seq_len": 6}, seed=0, workdir=None)
    task.prepare()
    src, tgt = task.dataset("train")[0]
    assert sorted(src) == tgt and len(src) == 6
    assert task.dataset("train")[:5] != task.dataset("test")[:5]
    batch = task.collate(task.dataset("valid")[:3])
    assert (batch["tgt_in"][:, 0] == task.bos_id).all()
    assert (batch["tgt_out"][:, -1] == task.eos_id).all()
    assert torch.equal(batch["tgt_in"][:, 1:], batch["tgt_out"][:, :-1])
    rev = zoo.get_component("task", "reverse").build(None, seed=0, workdir=None)
    s, t = rev.dataset("train")[0]
    assert t == s[::-1]


def test_missing_debian_data_says_how_to_install_it(tmp_path):
    from zoo.plugins.tasks.fashion_mnist import FashionMNIST
    from zoo.plugins.tasks.translate import TranslateDeEn
    from zoo.task import TaskDataError

    with pytest.raises(TaskDataError, match="apt-get install -y trans-de-en"):
        TranslateDeEn(data=tmp_path / "de-en").prepare()
    with pytest.raises(TaskDataError, match="apt-get install -y dataset-fashion-mnist"):
        FashionMNIST(data=tmp_path).prepare()


needs_trans = pytest.mark.skipif(not Path("/usr/share/trans/de-en").exists(),
                                 reason="Debian's trans-de-en is not installed")
needs_fashion = pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist").exists(),
    reason="Debian's dataset-fashion-mnist is not installed")


@needs_trans
def test_translation_pairs_are_clean_sentences():
    from zoo.plugins.tasks.translate import sentence_pairs

    pairs = sentence_pairs()
    assert 14000 < len(pairs) < 25000 and len(set(pairs)) == len(pairs)
    for de, en in pairs[::500]:
        assert de[-1] in ".!?" and en[-1] in ".!?" and "{" not in de + en and "[" not in de + en


DICTIONARY = """\
# a dictionary in trans-de-en's format
Sprosse {f}; Leitersprosse {f} | Sprossen {pl} :: muntin; rung | muntins
(im Gedränge) aneinanderstoßen {vi} :: to jostle against each other
Kleinkind {n} | Kleinkinder können kurze Rhythmen nachklopfen. :: toddler | Toddlers are capable of replicating short rhythms.
Gehweg {m} [Süddt.] | Wir gingen den Gehweg entlang. :: sidewalk [Am.] | We walked along the sidewalk.
jdn. anrufen | Ruf mich an! :: to call sb. | Call me!
Fahrrad {n}; Rad {n} :: bicycle
Sprosse {f} :: muntin
"""


def test_lexicon_pairs_are_the_entries_without_annotations_and_held_out_lines(tmp_path):
    from zoo.plugins.tasks.translate import lexicon_pairs, sentence_pairs

    path = tmp_path / "de-en"
    path.write_text(DICTIONARY, encoding="utf-8")
    sentences = sentence_pairs(path)
    assert sentences == [
        ("Kleinkinder können kurze Rhythmen nachklopfen.",
         "Toddlers are capable of replicating short rhythms."),
        ("Wir gingen den Gehweg entlang.", "We walked along the sidewalk."),
    ]
    # written out by hand: no sentences (a two-word one is a phrase), no annotations, no
    # jdn./sb. entry, no duplicate; "Fahrrad; Rad :: bicycle" (2 alternatives against 1)
    # is not aligned
    everything = [("Sprosse", "muntin"), ("Leitersprosse", "rung"), ("Sprossen", "muntins"),
                  ("aneinanderstoßen", "to jostle against each other"),
                  ("Kleinkind", "toddler"), ("Gehweg", "sidewalk"), ("Ruf mich an!", "Call me!")]
    assert lexicon_pairs(path) == everything
    # a held-out sentence keeps its whole line out ("Kleinkind :: toddler" goes with it)
    assert lexicon_pairs(path, held_out={sentences[0]}) == [
        pair for pair in everything if pair != ("Kleinkind", "toddler")]


@needs_trans
def test_lexicon_joins_the_training_split_only():
    from zoo.plugins.tasks.translate import TranslateDeEn, TranslateSettings, lexicon_pairs

    plain = TranslateDeEn(TranslateSettings(vocab_size=600))
    with_lexicon = TranslateDeEn(TranslateSettings(vocab_size=600, lexicon=5000))
    plain.prepare()
    with_lexicon.prepare()
    for split in ("valid", "test"):
        assert with_lexicon.references(split) == plain.references(split)
    train = with_lexicon.references("train")
    assert train[: len(plain.references("train"))] == plain.references("train")
    added = train[len(plain.references("train")):]
    assert len(added) == 5000 and len(set(added)) == 5000
    held_out = set(plain.references("test")) | set(plain.references("valid"))
    allowed = set(lexicon_pairs(held_out=held_out))
    assert set(added) <= allowed
    # every word pair of a test sentence's dictionary line is among those left out
    assert set(added).isdisjoint(set(lexicon_pairs()) - allowed)


@needs_fashion
def test_fashion_mnist_resume_replays_the_same_augmentation(tmp_path):
    common = {"task.max_train": 512, "task.shift": 2, "task.flip": True, "train.batch_size": 64,
              "train.steps": 12, "train.log_every": 1, "model.depth": 1,
              "schedule.over": "steps"}  # the recipe's rates follow the clock
    full = zoo.train("fashion-mnist-vit", overrides=common, run_dir=tmp_path / "full",
                     progress=False)
    zoo.train("fashion-mnist-vit", overrides=common, run_dir=tmp_path / "part", progress=False,
              stop_after_steps=5)
    resumed = zoo.train(resume=tmp_path / "part", progress=False)
    assert {r["step"]: r["loss"] for r in rows(full.run_dir)} == \
        {r["step"]: r["loss"] for r in rows(resumed.run_dir)}


@needs_fashion
def test_fashion_mnist_is_the_full_set():
    task = zoo.get_component("task", "fashion-mnist").build(None, seed=0, workdir=None)
    sizes = {split: len(task.dataset(split)) for split in ("train", "valid", "test")}
    assert sizes == {"train": 55000, "valid": 5000, "test": 10000}
    x, y = task.dataset("test")[0]
    assert x.shape == (1, 28, 28) and 0 <= y < 10
    labels = torch.tensor([task.dataset("test")[i][1] for i in range(10000)])
    assert torch.bincount(labels).tolist() == [1000] * 10  # the test set is balanced


@needs_trans
@pytest.mark.slow(seconds=40)
def test_translation_pipeline_learns(tmp_path):
    result = zoo.train("translate-de-en", run_dir=tmp_path / "t", progress=False, overrides={
        "task.max_train": 3000, "task.vocab_size": 1000, "task.valid_size": 100,
        "task.test_size": 100, "task.beam_size": 2, "model.d_model": 64, "model.n_heads": 2,
        "model.d_ff": 128, "model.encoder_layers": 1, "model.decoder_layers": 1,
        "model.dropout": 0.1, "train.steps": 400, "schedule.warmup_steps": 50, "train.log_every": 10,
        "train.eval_every": 400, "train.eval_limit": 50})
    losses = [r["loss"] for r in rows(result.run_dir)]
    assert losses[-1] < 0.75 * losses[0]
    assert 0.0 <= result.metrics["bleu"] <= 100 and result.metrics["chrf"] > 2
    task = result.task
    sentence = "Ich werde sie schon breitschlagen."
    assert task.decode(task.encode(sentence)) == sentence  # the tokenizer round-trips
    assert (result.run_dir / "tokenizer.json").exists()
    out = run_zoo("translate", str(result.run_dir), "Was wird jetzt aus uns?", "--beam", "2")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    int8 = run_zoo("translate", str(result.run_dir), "Was wird jetzt aus uns?", "--beam", "2",
                   "--int8")
    assert int8.returncode == 0 and int8.stdout.strip(), int8.stderr
    # ten test sentences for a person to judge: the split's own, and this model's outputs
    pairs = task.references("test")[:10]
    assert [(s["source"], s["reference"]) for s in result.samples] == pairs
    assert [s["output"] for s in result.samples] == task.translate(
        result.model.eval(), [de for de, _ in pairs])
    written = (result.run_dir / "samples.md").read_text()
    assert all(f"- source: {de}" in written and f"- reference: {en}" in written
               for de, en in pairs)


@needs_fashion
@pytest.mark.slow(seconds=80)
def test_fashion_mnist_vit_learns_in_two_short_epochs(tmp_path):
    result = zoo.train("fashion-mnist-vit", run_dir=tmp_path / "f", progress=False, overrides={
        "task.max_train": 12000, "train.epochs": 2, "schedule.warmup_steps": 20,
        "schedule.over": "steps", "train.log_every": 10})
    assert result.metrics["accuracy"] > 0.72  # chance is 0.10


@pytest.mark.slow(seconds=220)
def test_zoo_train_sort_reaches_the_articles_accuracy(tmp_path):
    """The README's main job, with the article's settings: 99.9% held-out token accuracy
    within 50 epochs (the recipe goes on to 99.95%; the test stops at the article's 99.9%,
    an epoch earlier)."""
    result = zoo.train("sort", run_dir=tmp_path / "sort", progress=False,
                       overrides={"train.target": 0.999})
    assert result.metrics["token_accuracy"] >= 0.999, result.metrics
    epochs = rows(result.run_dir, "valid")[-1]["epoch"]
    assert epochs <= 50


def test_plot_and_attention_map_write_pictures(tmp_path):
    result = zoo.train("sort", overrides={**TINY, "train.steps": 16, "train.log_every": 4},
                       run_dir=tmp_path / "r", progress=False)
    out = run_zoo("plot", str(result.run_dir))
    assert out.returncode == 0, out.stderr
    assert (result.run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    out = run_zoo("attention-map", str(result.run_dir), "3 1 2 5 4", "--out",
                  str(tmp_path / "att.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "att.png").read_bytes()[:4] == b"\x89PNG"
    out = run_zoo("attention-map", str(result.run_dir), "3 1 2 4 4", "--layer", "all", "--out",
                  str(tmp_path / "all.png"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "all-layer0.png").exists()  # TINY has one layer per stack
    out = run_zoo("plot-positions", "--d-model", "32", "--out", str(tmp_path / "pe.png"))
    assert out.returncode == 0 and (tmp_path / "pe.png").read_bytes()[:4] == b"\x89PNG"


def test_attention_weights_are_the_softmax_rows():
    from zoo.plots import attention_weights

    model = zoo.build("transformer-tiny", dropout=0.0, positional="alibi").eval()
    src, tgt = torch.randint(3, 1000, (1, 6)), torch.randint(3, 1000, (1, 4))
    plain = model(src, tgt)
    weights = attention_weights(model, src, tgt)
    torch.testing.assert_close(model(src, tgt), plain)  # recording changes no output
    for kind, layers in weights.items():
        for w in layers:
            torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    dec = weights["decoder self-attention"][0]
    assert torch.equal(dec.triu(1), torch.zeros_like(dec))  # causal
    assert math.isfinite(float(dec.sum()))


@needs_trans
@pytest.mark.slow
@pytest.mark.skipif(not hardware.detect().cpu.bf16, reason="no bf16 units on this CPU: zoo "
                    "refuses bf16 training here (emulated bf16 is two orders of magnitude "
                    "slower), and 300 emulated steps do not fit a test")
def test_bf16_autocast_loss_after_300_steps_is_within_2_percent_of_fp32(tmp_path):
    """The issue's bf16 target, on the translation task (sort converges within 200 steps
    and then only wobbles, so a point comparison there measures noise): the same run
    in bf16 autocast reaches fp32's validation loss after 300 steps."""
    losses = {}
    for precision in ("fp32", "bf16"):
        result = zoo.train("translate-de-en", run_dir=tmp_path / precision, progress=False,
                           overrides={
            "task.max_train": 4000, "task.vocab_size": 1000, "task.valid_size": 200,
            "task.test_size": 20, "task.beam_size": 1, "model.d_model": 128,
            "model.n_heads": 4, "model.d_ff": 512, "model.encoder_layers": 2,
            "model.decoder_layers": 2, "train.steps": 300, "train.batch_size": 32,
            "schedule.warmup_steps": 100, "train.precision": precision,
            "train.log_every": 10, "train.eval_every": 300, "train.eval_limit": 200})
        losses[precision] = next(r["loss"] for r in rows(result.run_dir, "valid")
                                 if r["step"] == 300)
    assert losses["fp32"] > 3.0  # still learning: a comparison that can tell runs apart
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.02 * losses["fp32"], losses


@needs_trans
def test_word_dropout_drops_whole_source_words_at_its_rate():
    from zoo.plugins.tasks.translate import PAD, TranslateDeEn, TranslateSettings

    task = TranslateDeEn(TranslateSettings(max_train=2000, vocab_size=600, word_dropout=0.3))
    task.prepare()
    src = task.collate(task.dataset("train")[:64])["src"]
    starts = task.word_starts()
    dropped = kept = 0
    torch.manual_seed(0)
    for _ in range(20):
        out = task.drop_words(src, 0.3)
        for row, new in zip(src.tolist(), out.tolist()):
            words, current = [], []
            for i, token in enumerate(row):  # the words, written out token by token
                if token == PAD:
                    continue
                if starts[token] and current:
                    words.append(current)
                    current = []
                current.append(i)
            words.append(current)
            states = [{new[i] == PAD for i in word} for word in words]
            assert all(len(s) == 1 for s in states)  # a word goes whole or stays whole
            assert any(s == {False} for s in states)  # at least one word stays
            assert all(new[i] == row[i] for word in words for i in word if new[i] != PAD)
            dropped += sum(s == {True} for s in states)
            kept += sum(s == {False} for s in states)
    assert abs(dropped / (dropped + kept) - 0.3) < 0.03
    # only in training: evaluation sees every word
    model = zoo.build("transformer-tiny", vocab_size=600, dropout=0.0).eval()
    batch = task.collate(task.dataset("train")[:8])
    ce = lambda logits, target, ignore_index: torch.nn.functional.cross_entropy(  # noqa: E731
        logits, target, ignore_index=ignore_index)
    with torch.no_grad():
        plain = torch.nn.functional.cross_entropy(
            model(batch["src"], batch["tgt_in"]).flatten(0, 1), batch["tgt_out"].flatten(),
            ignore_index=PAD)
        assert torch.equal(task.loss(model, batch, ce)[0], plain)


# -- the final model: the mean of the last checkpoints, or the best validation's --------------
def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path))


def test_average_checkpoints_writes_the_mean_of_the_last_n(tmp_path):
    overrides = {**TINY, "train.steps": 30, "train.checkpoint_every": 5,
                 "train.average_checkpoints": 3, "train.keep_checkpoints": 1}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "r", progress=False)
    run = result.run_dir
    kept = sorted(p.name for p in (run / "checkpoints").glob("step-*"))
    assert kept == ["step-00000020", "step-00000025", "step-00000030"]  # keep raised to 3
    parts = [_weights(run / "checkpoints" / name / "model.safetensors") for name in kept]
    final = _weights(run / "model.safetensors")
    assert final.keys() == parts[0].keys()
    for name, value in final.items():
        torch.testing.assert_close(value, torch.stack([p[name] for p in parts]).mean(0))
    assert any(not torch.equal(final[n], parts[-1][n]) for n in final)  # not the last
    results = json.loads((run / "results.json").read_text())
    assert results["weights"] == "mean of 3 checkpoints (steps 20, 25, 30)"


def test_keep_best_tests_the_weights_of_the_best_validation(tmp_path):
    overrides = {**TINY, "train.steps": 23, "train.eval_every": 4, "train.checkpoint_every": 4,
                 "train.keep_checkpoints": 10, "train.keep_best": True,
                 "optimizer.lr": 0.05, "schedule.name": "constant", "schedule.warmup_steps": 0}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "r", progress=False)
    run = result.run_dir
    valid = rows(run, "valid")
    assert [r["step"] for r in valid] == [4, 8, 12, 16, 20, 23]  # the end is evaluated too
    best = max(valid, key=lambda r: (r["token_accuracy"], -r["step"]))["step"]
    final = _weights(run / "model.safetensors")
    at_best = _weights(run / "checkpoints" / f"step-{best:08d}" / "model.safetensors")
    assert all(torch.equal(final[n], at_best[n]) for n in final)
    results = json.loads((run / "results.json").read_text())
    assert results["weights"] == f"best validation (step {best})"


def test_patience_stops_when_the_metric_stops_improving(tmp_path):
    overrides = {**TINY, "train.steps": 400, "train.eval_every": 2, "train.patience": 2,
                 "optimizer.lr": 0.05, "schedule.name": "constant", "schedule.warmup_steps": 0}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "r", progress=False)
    values = [(r["step"], r["token_accuracy"]) for r in rows(result.run_dir, "valid")]
    best, since, expected = -1.0, 0, None
    for step, value in values:  # the rule written out: two evaluations in a row not above the best
        if value > best:
            best, since = value, 0
        else:
            since += 1
            if since == 2:
                expected = step
                break
    assert expected is not None and result.step == expected == values[-1][0]
    assert json.loads((result.run_dir / "results.json").read_text())["stopped_early"]


def test_keep_best_and_averaging_together_are_refused():
    with pytest.raises(zoo.RecipeError, match="keep_best and average_checkpoints 5 both"):
        apply_train_overrides(get_train_recipe("sort"), {"train.keep_best": True,
                                                         "train.average_checkpoints": 5})


# -- batches of similar length -------------------------------------------------------------------
def test_length_batches_keep_every_example_once_and_cut_the_padding():
    from zoo.training.loop import length_batches

    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 60, (1000,), generator=gen).tolist()
    order = torch.randperm(1000, generator=gen).tolist()
    batches = length_batches(order, lengths, 8, torch.Generator().manual_seed(1))
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert len(batches) == math.ceil(1000 / 8) and sum(len(b) < 8 for b in batches) == 0

    def padding(bs):  # the share of a padded batch that is padding
        padded = sum(len(b) * max(lengths[i] for i in b) for b in bs)
        return 1 - sum(lengths) / padded

    plain = [order[i:i + 8] for i in range(0, 1000, 8)]
    assert padding(plain) > 0.3 and padding(batches) < 0.05
    again = length_batches(order, lengths, 8, torch.Generator().manual_seed(1))
    assert again == batches  # the generator decides: a resumed epoch replays its batches
    sizes = [len(b) for b in length_batches(order[:1003 - 8], lengths, 8,
                                            torch.Generator().manual_seed(1))]
    assert sorted(sizes)[0] == (995 % 8) and sizes.count(8) == 995 // 8


def test_batch_by_length_trains_and_needs_a_task_that_tells_lengths(tmp_path):
    result = zoo.train("sort", overrides={**TINY, "train.steps": 5, "train.batch_by_length": True},
                       run_dir=tmp_path / "r", progress=False)
    assert result.step == 5
    with pytest.raises(zoo.RecipeError, match="batch_by_length needs a task that tells its "
                                              "examples' lengths.*'fashion-mnist'"):
        zoo.train("fashion-mnist-vit", overrides={"train.batch_by_length": True,
                                                  "train.steps": 1},
                  run_dir=tmp_path / "f", progress=False)


def test_patience_and_the_best_weights_survive_a_resume(tmp_path):
    common = {**TINY, "train.steps": 60, "train.eval_every": 3, "train.patience": 4,
              "train.keep_best": True, "optimizer.lr": 0.05, "schedule.name": "constant",
              "schedule.warmup_steps": 0}
    full = zoo.train("sort", overrides=common, run_dir=tmp_path / "full", progress=False)
    part = zoo.train("sort", overrides=common, run_dir=tmp_path / "part", progress=False,
                     stop_after_steps=10)
    assert part.interrupted
    resumed = zoo.train(resume=tmp_path / "part", progress=False)
    assert rows(full.run_dir, "valid") == rows(resumed.run_dir, "valid")
    assert resumed.step == full.step
    a, b = (json.loads((r.run_dir / "results.json").read_text()) for r in (full, resumed))
    assert a["weights"] == b["weights"] and a["test"] == b["test"]
