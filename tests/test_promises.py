"""What zoo promises when things go wrong (docs/promises.md): a kill or a second
process at the worst moment loses nothing, no input hangs, and bad input gets one of
zoo's errors naming what is wrong. Faults are injected in subprocesses by patching
the call at which the process should die or pause."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import zoo
from zoo.artifact import CONFIG_NAME, INDEX_NAME, WEIGHTS_NAME
from zoo.training.checkpoint import latest_checkpoint

from .conftest import run_python, run_zoo
from .test_training import TINY, rows

SEEDED = "import torch; torch.manual_seed({seed}); import zoo\n"


def python(code: str, *args: str, timeout: float = 120, env: dict | None = None):
    """Run ``code`` in a process of its own (:func:`run_python`); a hang fails the test
    instead of hanging it."""
    return run_python(code, *map(str, args), timeout=timeout, env=env)


def tiny(seed: int, **overrides):
    torch.manual_seed(seed)
    return zoo.build("transformer-tiny", dropout=0.0, **overrides).eval()


def outputs(model) -> torch.Tensor:
    x = torch.arange(4, 40).reshape(4, 9)
    with torch.no_grad():
        return model.eval()(x, x)


def same(a, b) -> bool:
    return torch.equal(outputs(a), outputs(b))


# -- 1. a save over an existing folder is one atomic switch -------------------------------------
KILL_BETWEEN_RENAMES = SEEDED.format(seed=2) + """
import os, sys, zoo.files as files
files._exchange = lambda a, b: False      # where the system cannot swap: two renames
real = os.replace
def replace(src, dst):
    real(src, dst)
    if ".old-" in str(dst):               # the old folder is aside, the new one not in yet
        os._exit(9)
os.replace = replace
zoo.save_pretrained(zoo.build("transformer-tiny", dropout=0.0, ffn="gelu"), sys.argv[1])
"""


def test_a_save_killed_between_its_renames_leaves_the_old_model(tmp_path):
    old = tiny(1)
    folder = zoo.save_pretrained(old, tmp_path / "m")
    done = python(KILL_BETWEEN_RENAMES, folder)
    assert done.returncode == 9, done.stderr
    assert not folder.exists()  # the moment the kill left behind
    assert same(zoo.build(f"local-dir:{folder}"), old)  # recovered: the old save, whole
    new = tiny(2, ffn="gelu")
    zoo.save_pretrained(new, folder)
    assert same(zoo.build(f"local-dir:{folder}"), new)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m"]


KILL_AT_CONFIG = SEEDED.format(seed=2) + """
import os, sys
real = os.replace
def replace(src, dst):
    real(src, dst)
    if os.path.basename(str(dst)) == "config.json" and "tmp" not in os.path.basename(
            os.path.dirname(str(dst))):
        os._exit(9)                       # a new config.json is in place: die before weights
os.replace = replace
zoo.save_pretrained(zoo.build("transformer-tiny", dropout=0.0, ffn="gelu"), sys.argv[1])
"""


def test_a_killed_save_never_pairs_a_new_config_with_old_weights(tmp_path):
    old = tiny(1)
    folder = zoo.save_pretrained(old, tmp_path / "m")
    done = python(KILL_AT_CONFIG, folder)
    assert done.returncode in (0, 9), done.stderr
    loaded = zoo.build(f"local-dir:{folder}")  # relu and gelu have the same shapes
    assert same(loaded, old) or same(loaded, tiny(2, ffn="gelu"))


def test_a_config_is_refused_with_weights_it_was_not_saved_with(tmp_path):
    a = zoo.save_pretrained(tiny(1), tmp_path / "a")
    b = zoo.save_pretrained(tiny(2, ffn="gelu"), tmp_path / "b")
    (a / CONFIG_NAME).write_bytes((b / CONFIG_NAME).read_bytes())  # b's config, a's weights
    with pytest.raises(zoo.ArtifactError, match="not the weights its config.json was saved"):
        zoo.build(f"local-dir:{a}")


def test_a_sharded_save_replaced_by_a_single_file_leaves_no_index(tmp_path):
    model = tiny(1)
    folder = zoo.save_pretrained(model, tmp_path / "m", max_shard_size="200KB")
    (folder / "notes.txt").write_text("mine")
    zoo.save_pretrained(model, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", CONFIG_NAME, WEIGHTS_NAME,
                                                        "notes.txt"]
    assert not (folder / INDEX_NAME).exists() and same(zoo.build(f"local-dir:{folder}"), model)


# -- 2. two saves of one folder take turns ----------------------------------------------------
SAVE = SEEDED.format(seed=3) + """
import sys
zoo.save_pretrained(zoo.build("transformer-tiny", dropout=0.0), sys.argv[1])
print("saved")
"""


def test_a_save_waits_for_another_save_of_the_same_folder(tmp_path):
    from filelock import FileLock

    folder = tmp_path / "m"
    with FileLock(str(tmp_path / ".m.lock")):  # another save is writing m
        procs = [subprocess.Popen([sys.executable, "-c", SAVE, str(folder)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        time.sleep(8)
        assert not folder.exists() and all(p.poll() is None for p in procs)
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "saved" in out, err  # neither lost a race
    assert same(zoo.build(f"local-dir:{folder}"), tiny(3))


# -- 3. a checkpoint step saved twice -----------------------------------------------------------
KILL_SECOND_SAVE = """
import json, os, sys, zoo, zoo.files as files
files._exchange = lambda a, b: False
real = os.replace
def replace(src, dst):
    real(src, dst)
    if ".step-00000004.old-" in str(dst):   # step 4 saved again: the first copy is aside
        os._exit(9)
os.replace = replace
zoo.train("sort", overrides=json.loads(sys.argv[2]), run_dir=sys.argv[1], progress=False)
"""


def test_a_step_saved_twice_and_killed_between_still_resumes(tmp_path):
    overrides = {**TINY, "train.steps": 4, "train.checkpoint_every": 2}
    done = python(KILL_SECOND_SAVE, tmp_path / "run", json.dumps(overrides))
    assert done.returncode == 9, done.stderr
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and latest.name == "step-00000004"
    assert zoo.train(resume=tmp_path / "run", progress=False).step == 4


def test_resume_falls_back_to_the_newest_whole_checkpoint(tmp_path):
    run = zoo.train("sort", overrides={**TINY, "train.steps": 4, "train.checkpoint_every": 2},
                    run_dir=tmp_path / "run", progress=False).run_dir
    (run / "checkpoints" / "latest").write_text("step-00000099\n")  # names nothing
    assert latest_checkpoint(run).name == "step-00000004"
    (run / "checkpoints" / "latest").write_bytes(b"\xff\xfe\x00")  # not even text
    assert latest_checkpoint(run).name == "step-00000004"


# -- 4. a failed --resume --set changes nothing -------------------------------------------------
def test_resume_with_overrides_that_do_not_fit_writes_nothing(tmp_path):
    overrides = {**TINY, "train.steps": 6, "train.checkpoint_every": 2}
    zoo.train("sort", overrides=overrides, run_dir=tmp_path / "run", progress=False,
              stop_after_steps=2)
    before = (tmp_path / "run" / "train.yaml").read_bytes()
    with pytest.raises(zoo.RecipeError, match="do not fit the checkpoint.*nothing was written"):
        zoo.train(resume=tmp_path / "run", overrides={"model.d_model": 64}, progress=False)
    assert (tmp_path / "run" / "train.yaml").read_bytes() == before
    assert zoo.train(resume=tmp_path / "run", progress=False).step == 6


# -- 5. no dead-end run folders -----------------------------------------------------------------
KILL_BEFORE_FIRST_CHECKPOINT = """
import json, os, sys, zoo, zoo.training.loop as loop
loop.save_checkpoint = lambda *a, **k: os._exit(9)
zoo.train("sort", overrides=json.loads(sys.argv[2]), run_dir=sys.argv[1], progress=False)
"""


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(tmp_path):
    overrides = {**TINY, "train.steps": 5, "train.checkpoint_every": 3}
    done = python(KILL_BEFORE_FIRST_CHECKPOINT, tmp_path / "run", json.dumps(overrides))
    assert done.returncode == 9, done.stderr
    with pytest.warns(RuntimeWarning, match="no checkpoint yet.*from step 0"):
        result = zoo.train(resume=tmp_path / "run", progress=False)
    assert result.step == 5
    assert [r["step"] for r in rows(tmp_path / "run")] == [1, 2, 3, 4, 5]  # no repeated rows


# -- 6. leftovers of killed writes go; modes follow the umask -----------------------------------
KILL_AFTER_SWAP = SEEDED.format(seed=2) + """
import os, sys, zoo.files as files
real = files._exchange
def exchange(a, b):
    assert real(a, b)
    os._exit(9)                           # swapped; the old version still lies aside
files._exchange = exchange
zoo.save_pretrained(zoo.build("transformer-tiny", dropout=0.0), sys.argv[1])
"""


def test_leftovers_of_a_killed_save_are_removed_by_the_next(tmp_path):
    folder = zoo.save_pretrained(tiny(1), tmp_path / "m")
    done = python(KILL_AFTER_SWAP, folder)
    assert done.returncode == 9, done.stderr
    assert any(p.name.startswith(".m.tmp-") for p in tmp_path.iterdir())
    assert same(zoo.build(f"local-dir:{folder}"), tiny(2))  # the swap had happened
    zoo.save_pretrained(tiny(1), folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.lock", "m"]


def test_checkpoint_leftovers_are_removed_when_the_run_saves_again(tmp_path):
    from .test_training import KILLER

    overrides = {**TINY, "train.steps": 30, "train.checkpoint_every": 10}
    done = python("import json\n" + KILLER, tmp_path / "run", json.dumps(overrides))
    assert done.returncode == 9, done.stderr
    folder = tmp_path / "run" / "checkpoints"
    assert any(p.name.startswith(".step-") for p in folder.iterdir())
    zoo.train(resume=tmp_path / "run", progress=False)
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_saved_files_get_the_umasks_modes(tmp_path):
    old = os.umask(0o022)
    try:
        folder = zoo.save_pretrained(tiny(1), tmp_path / "m")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o644}


# -- a disk that is really full (a small tmpfs, where the tests run as root) ------------------------
def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("room", [0.5, 1.5, 2.5])
def test_a_really_full_disk_while_checkpointing_says_so_and_keeps_the_last(tmp_path, small_disk,
                                                                          room):
    import shutil as sh

    overrides = {**TINY, "train.steps": 8, "train.checkpoint_every": 2, "train.eval_every": 100}
    probe = zoo.train("sort", overrides={**overrides, "train.steps": 2},
                      run_dir=tmp_path / "probe", progress=False).run_dir
    checkpoint = _folder_bytes(probe / "checkpoints")
    rest = _folder_bytes(probe) - checkpoint
    disk = small_disk(f"{int(rest + room * checkpoint) // 1024 + 24}k")
    with pytest.raises(zoo.ZooError) as err:
        zoo.train("sort", overrides=overrides, run_dir=disk / "run", progress=False)
    message = str(err.value)
    assert f"the disk that holds {disk}" in message and "is full" in message, message
    assert "MiB free" in message and "MiB needed" in message, message
    last = latest_checkpoint(disk / "run")
    if room < 1:
        assert last is None and "No earlier checkpoint exists" in message
    else:
        assert f"The checkpoint of step {last.name.removeprefix('step-').lstrip('0')} is kept" \
            in message and f"zoo train --resume {disk / 'run'}" in message
        moved = sh.copytree(disk / "run", tmp_path / "moved")  # space freed: resume elsewhere
        done = zoo.train(resume=moved, progress=False)
        assert done.step == 8


def test_save_pretrained_over_a_saved_model_on_a_full_disk_keeps_the_old_one(small_disk):
    disk = small_disk("1400k")  # room for transformer-tiny (0.9 MiB), not for a wider one
    old = tiny(1)
    folder = zoo.save_pretrained(old, disk / "m")
    with pytest.raises(zoo.ArtifactError, match="the disk that holds .* is full: .* MiB free, "
                                                "about .* MiB needed. The model saved there "
                                                "before is kept"):
        zoo.save_pretrained(zoo.build("transformer-tiny", d_model=128), folder)
    loaded = zoo.build(f"local-dir:{folder}")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(),
                                                 old.state_dict().values()))


@pytest.mark.parametrize("fmt", ["ctranslate2", "onnx", "transformers"])
def test_zoo_export_onto_a_full_disk_is_one_error(small_disk, fmt):
    disk = small_disk("200k")
    done = run_zoo("export", "transformer-small", "--format", fmt, "--out", str(disk / fmt),
                   "--set", "norm.eps=1e-5")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"the disk that holds {disk / fmt} is full" in done.stderr
    assert "MiB needed" in done.stderr


# -- a worker that dies under torchrun ----------------------------------------------------------------
TORCHRUN_SETS = {**TINY, "train.steps": 24, "train.checkpoint_every": 2, "train.eval_every": 1000,
                 "task.num_samples": 2048, "model.dropout": 0.0}


def _worker(job: str, rank: int) -> int | None:
    """The pid of the worker of rank ``rank`` of the torchrun job marked ``job``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"ZOO_TEST_JOB={job}".encode() in env and f"RANK={rank}".encode() in env and \
                b"TORCHELASTIC_RESTART_COUNT=0" in env:
            return int(entry.name)
    return None


def _torchrun(out: Path, *extra: str, signal_at: int | None = None, sig: int = 9,
              env: dict | None = None, port: int = 29581) -> tuple[subprocess.CompletedProcess,
                                                                   float]:
    """torchrun with 2 workers training TORCHRUN_SETS into ``out``; with ``signal_at``, the
    worker of rank 1 gets ``sig`` once checkpoint ``signal_at`` is on disk. Returns the
    finished job and the seconds from the signal to its end."""
    import signal as signals
    import threading
    import uuid

    job = uuid.uuid4().hex
    args = [x for k, v in TORCHRUN_SETS.items()
            for x in ("--set", f"{k}={'null' if v is None else v}")]
    full_env = dict(os.environ, OMP_NUM_THREADS="1", ZOO_TEST_JOB=job, **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", str(port), *extra, "-m", "zoo", "train", "sort", "--out", str(out),
         "--no-progress", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=full_env)
    signalled: list[float] = []

    def signal_worker() -> None:
        target = out / "checkpoints" / f"step-{signal_at:08d}"
        deadline = time.time() + 240
        while not target.is_dir() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        pid = _worker(job, 1)
        if pid is not None:
            os.kill(pid, sig)
            signalled.append(time.time())
            if sig == signals.SIGSTOP:  # a hung worker: let it go once the job has given up
                time.sleep(12)  # the others give up after ZOO_DIST_TIMEOUT (5 s) first
                with __import__("contextlib").suppress(OSError):
                    os.kill(pid, signals.SIGKILL)

    watcher = threading.Thread(target=signal_worker, daemon=True)
    if signal_at is not None:
        watcher.start()
    stdout, stderr = proc.communicate(timeout=400)
    ended = time.time()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert signal_at is None or signalled, "the worker was never signalled"
    return done, (ended - signalled[0]) if signalled else 0.0


@pytest.mark.slow(seconds=45)
def test_a_worker_killed_under_torchrun_with_restarts_resumes_by_itself(tmp_path):
    whole, _ = _torchrun(tmp_path / "whole", port=29582)
    assert whole.returncode == 0, whole.stderr[-3000:]
    done, _ = _torchrun(tmp_path / "killed", "--max-restarts", "1", signal_at=6, port=29583)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r["step"] for r in rows(tmp_path / "killed")]
    assert steps == sorted(set(steps))  # no row twice
    test, expected = rows(tmp_path / "killed", "test"), rows(tmp_path / "whole", "test")
    assert test == expected and len(test) == 1  # the same metrics as the run nobody killed


@pytest.mark.slow
def test_a_worker_killed_under_torchrun_without_restarts_is_one_clear_error(tmp_path):
    done, seconds = _torchrun(tmp_path / "run", signal_at=6, port=29584)
    assert done.returncode != 0
    line = [x for x in done.stderr.splitlines() if x.startswith("zoo: error:")][0]
    assert "rank 0 of 2: rank 1 stopped" in line and "The last checkpoint is" in line
    assert f"zoo train --resume {tmp_path / 'run'}" in line
    assert seconds < 60
    assert latest_checkpoint(tmp_path / "run") is not None


@pytest.mark.slow
def test_a_hung_worker_under_torchrun_stops_the_others_within_the_timeout(tmp_path):
    import signal as signals

    done, _ = _torchrun(tmp_path / "run", signal_at=6, sig=signals.SIGSTOP,
                        env={"ZOO_DIST_TIMEOUT": "5"}, port=29585)
    assert done.returncode != 0
    line = [x for x in done.stderr.splitlines() if x.startswith("zoo: error:")][0]
    assert "rank 1 stopped" in line and "Timed out" in line, line
