"""The machine's capabilities in one place, and what zoo does with them: bf16 only
where the CPU has bf16 units (bench defaults, the training refusal and its
override), progress from long benches, and ``zoo env``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from zoo import hardware
from zoo.bench import harness
from zoo.bench import run as bench_run
from zoo.cli import main

from .conftest import run_zoo
from .test_training import TINY

REAL = hardware.detect()


def machine(bf16: bool) -> hardware.Hardware:
    """This machine, with its CPU's bf16 units said to be there or not."""
    cpu = dataclasses.replace(REAL.cpu, name="Test CPU 9000", capability="AVX2", bf16=bf16,
                              amx=False)
    return hardware.Hardware(cpu=cpu, gpus=())


@pytest.fixture(params=[True, False], ids=["bf16-units", "no-bf16-units"])
def bf16_units(request, monkeypatch) -> bool:
    monkeypatch.setattr(hardware, "detect", lambda: machine(request.param))
    return request.param


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or platform.machine() != "x86_64",
                    reason="reads x86 flags from Linux's /proc/cpuinfo")
def test_the_cpu_reading_agrees_with_proc_cpuinfo():
    flags, vendor = set(), None
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("vendor_id") and vendor is None:
            vendor = line.partition(":")[2].strip()
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    assert REAL.cpu.vendor == vendor
    assert REAL.cpu.bf16 == bool({"avx512_bf16", "amx_bf16"} & flags)
    assert REAL.cpu.amx == ("amx_bf16" in flags or "amx_tile" in flags)
    assert REAL.cpu.cores >= 1 and REAL.cpu.threads >= 1
    assert REAL.cpu.capability in ("AVX512", "AVX2", "DEFAULT")


def test_cuda_devices_are_read_only_where_there_is_cuda():
    import torch

    assert len(REAL.gpus) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert not machine(False).has_bf16("cuda") and not machine(False).has_bf16("cpu")
    gpu = hardware.GPU(index=0, name="H200", capability=(9, 0), memory_gib=139.8, bf16=True)
    with_gpu = hardware.Hardware(cpu=machine(False).cpu, gpus=(gpu,))
    assert with_gpu.has_bf16("cuda:0") and with_gpu.why_no_bf16("cuda") == ""
    assert "no bf16 units on this CPU (Test CPU 9000, AVX2" in with_gpu.why_no_bf16("cpu")


def test_bench_defaults_leave_bf16_out_only_without_units(bf16_units, capsys):
    dtypes, note = bench_run.default_dtypes("cpu")
    if bf16_units:
        assert dtypes == ("fp32", "bf16") and note == ""
    else:
        assert dtypes == ("fp32",)
        assert "bf16 left out: no bf16 units on this CPU (Test CPU 9000" in note
        assert "--dtypes fp32,bf16" in note
    args = argparse.Namespace(dtypes=None, device="cpu")
    assert bench_run.dtypes_for(args) == dtypes
    assert capsys.readouterr().out.strip() == note


def test_asking_for_bf16_without_units_runs_it_with_a_warning(bf16_units, capsys):
    args = argparse.Namespace(dtypes="fp32,bf16", device="cpu")
    assert bench_run.dtypes_for(args) == ("fp32", "bf16")
    warned = "warning: bf16 asked for with no bf16 units" in capsys.readouterr().err
    assert warned is not bf16_units


def test_the_peak_line_says_there_are_no_bf16_units_instead_of_zero(bf16_units):
    why = hardware.detect().why_no_bf16("cpu")
    peaks = {"fp32": 99e9, "bf16": 310e9} if bf16_units else {"fp32": 99e9}
    line = bench_run.peak_line(peaks, why)
    if bf16_units:
        assert line == "fp32 99 GFLOP/s, bf16 310 GFLOP/s"
    else:
        assert line == "fp32 99 GFLOP/s, bf16: no bf16 units on this CPU"
        assert "0 GFLOP/s" not in line.split("bf16")[1]


def test_training_in_bf16_is_refused_without_units_unless_insisted(bf16_units, tmp_path):
    overrides = {**TINY, "train.steps": 2, "train.precision": "bf16"}
    if not bf16_units:
        with pytest.raises(zoo.RecipeError) as err:
            zoo.train("sort", overrides=overrides, run_dir=tmp_path / "refused", progress=False)
        message = str(err.value)
        assert "Test CPU 9000" in message and "precision: fp32" in message
        assert "--allow-slow-bf16" in message
        assert not (tmp_path / "refused").exists()  # refused before anything was written
        with pytest.warns(RuntimeWarning, match="training in bf16 with no bf16 units"):
            result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "insisted",
                               progress=False, allow_slow_bf16=True)
    else:
        result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / "ok", progress=False)
    assert result.step == 2 and result.metrics


def test_zoo_train_takes_allow_slow_bf16(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(hardware, "detect", lambda: machine(False))
    args = ["train", "sort", "--out", str(tmp_path / "run"), "--no-progress"]
    for key, value in {**TINY, "train.steps": 1, "train.precision": "bf16"}.items():
        args += ["--set", f"{key}={'null' if value is None else value}"]
    assert main(args) == 2
    assert "--allow-slow-bf16" in capsys.readouterr().err
    with pytest.warns(RuntimeWarning):
        assert main([*args, "--allow-slow-bf16"]) == 0


def test_fp16_on_the_cpu_is_refused_before_the_run_folder_exists(tmp_path):
    with pytest.raises(zoo.RecipeError, match="fp16 needs a CUDA device"):
        zoo.train("sort", overrides={**TINY, "train.precision": "fp16"},
                  run_dir=tmp_path / "run", progress=False, device="cpu")
    assert not (tmp_path / "run").exists()


def test_a_long_bench_says_which_case_and_how_many_rounds_are_left():
    heard = []
    cases = [harness.Case(bench="train", impl=impl, dtype="fp32", mode="step",
                          run=lambda: None, items=1, unit="tokens") for impl in ("zoo", "torch")]
    harness.alternate(cases, repeats=3, warmup=1, say=heard.append)
    assert heard[:2] == ["warming up train step fp32 zoo (1/2)",
                         "warming up train step fp32 torch (2/2)"]
    assert heard[2] == "round 1/3 of 2 cases"
    assert heard[3].startswith("round 2/3 of 2 cases, about ") and heard[3].endswith(" s left")


def test_zoo_env_json_names_what_a_bug_report_needs(monkeypatch):
    result = run_zoo("env", "--json", env={"HF_ENDPOINT": "http://127.0.0.1:9",
                                           "ZOO_PLUGINS": "norm,attention"})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["zoo"] == zoo.__version__
    assert data["torch"] and set(data["cuda"]) == {"built_with", "available"}
    assert set(data["cpu"]) >= {"name", "capability", "bf16", "amx", "cores", "threads"}
    assert data["cpu"]["bf16"] is REAL.cpu.bf16 and data["cpu"]["capability"] == \
        REAL.cpu.capability
    assert {p["name"] for p in data["plugins"]} == {"norm", "attention"}
    assert all(p["ok"] and p["distribution"] == "zoo-transformers" for p in data["plugins"])
    assert data["hub"]["endpoint"] == "http://127.0.0.1:9" and data["hub"]["cache"]
    assert data["settings"]["ZOO_PLUGINS"] == "norm,attention"
    assert data["packages"]["pydantic"]
    assert set(data["dtypes"]) == {"fp32", "bf16", "int8"}


def test_zoo_env_text_says_whether_the_cpu_has_bf16_units(bf16_units, capsys, monkeypatch):
    import zoo.ops

    # oneDNN's own answer is this machine's (an AVX2 CPU's is no): the test CPU's is yes
    monkeypatch.setattr(zoo.ops, "onednn_bf16", lambda: bf16_units)
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "Copy and paste" in out and f"zoo version: {zoo.__version__}" in out
    assert f"bf16 units: {'yes' if bf16_units else 'no'}" in out and "Test CPU 9000" in out
    # which products each dtype takes: bf16 on the units, or emulated without them
    assert ("bf16: oneDNN's on" if bf16_units else "bf16: emulated by PyTorch") in out
    assert "- Products by dtype: fp32: " in out and "; int8: " in out


# -- sharing the machine ------------------------------------------------------------------------
def test_threads_drop_when_other_processes_keep_cores_busy(monkeypatch):
    import torch

    from zoo.training.loop import set_threads

    two = dataclasses.replace(REAL.cpu, cores=2)
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(cpu=two))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    before = torch.get_num_threads()
    try:
        monkeypatch.setattr(hardware, "cpu_busy", lambda interval=0.5: 0.0)
        assert set_threads(None, torch.device("cpu")) == 2 == torch.get_num_threads()
        monkeypatch.setattr(hardware, "cpu_busy", lambda interval=0.5: 0.95)  # 1.9 cores
        with pytest.warns(RuntimeWarning, match="keep 1.9 of this machine's 2 cores busy: "
                                                "training with 1 thread instead of 2"):
            assert set_threads(None, torch.device("cpu")) == 1 == torch.get_num_threads()
        assert set_threads(2, torch.device("cpu")) == 2  # asked for: no second-guessing
        with pytest.raises(zoo.RecipeError, match="1 or more"):
            set_threads(0, torch.device("cpu"))
    finally:
        torch.set_num_threads(before)


def test_a_process_of_a_torchrun_job_takes_its_share_of_the_cores(monkeypatch):
    import torch

    from zoo.training.loop import set_threads

    four = dataclasses.replace(REAL.cpu, cores=4)
    monkeypatch.setattr(hardware, "detect", lambda: hardware.Hardware(cpu=four))
    # its siblings keep the cores busy: that is no reason to take fewer than its share
    monkeypatch.setattr(hardware, "cpu_busy", lambda interval=0.5: 0.99)
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        assert set_threads(None, torch.device("cpu")) == 2 == torch.get_num_threads()
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # more processes than cores
        assert set_threads(None, torch.device("cpu")) == 1 == torch.get_num_threads()
        assert set_threads(3, torch.device("cpu")) == 3  # asked for: no second-guessing
    finally:
        torch.set_num_threads(before)


def test_the_zoo_command_calms_openmp_unless_told_otherwise():
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    done = subprocess.run([sys.executable, "-m", "zoo", "env", "--json"], capture_output=True,
                          text=True, env=env)
    assert json.loads(done.stdout)["settings"]["GOMP_SPINCOUNT"] == "1000", done.stderr
    done = subprocess.run([sys.executable, "-m", "zoo", "env", "--json"], capture_output=True,
                          text=True, env={**env, "OMP_WAIT_POLICY": "PASSIVE"})
    settings = json.loads(done.stdout)["settings"]
    assert settings["GOMP_SPINCOUNT"] is None and settings["OMP_WAIT_POLICY"] == "PASSIVE"


def test_openmp_spins_for_translating_benchmarking_and_training_alone():
    from zoo.cli import _calm_openmp

    idle, busy = (lambda: 0.1), (lambda: 1.6)
    for argv, load, calmed in ((["train", "sort"], idle, False), (["train", "sort"], busy, True),
                               (["experiment", "norms"], busy, True),
                               (["translate", "runs/x", "Hallo"], busy, False),
                               (["bench", "decode"], busy, False), (["--version"], idle, True)):
        environ: dict = {}
        _calm_openmp(argv, environ, load)
        assert (environ.get("GOMP_SPINCOUNT") == "1000") == calmed, argv
    environ = {"GOMP_SPINCOUNT": "5"}
    _calm_openmp(["train", "sort"], environ, busy)
    assert environ == {"GOMP_SPINCOUNT": "5"}  # the user's own setting stands


def test_zoo_train_takes_threads(tmp_path):
    args = ["train", "sort", "--out", str(tmp_path / "run"), "--no-progress", "--threads", "1"]
    for key, value in {**TINY, "train.steps": 1}.items():
        args += ["--set", f"{key}={'null' if value is None else value}"]
    done = run_zoo(*args)
    assert done.returncode == 0, done.stderr
    done = run_zoo("train", "sort", "--threads", "0", "--out", str(tmp_path / "r2"))
    assert done.returncode == 2 and "1 or more" in done.stderr


def test_bf16_units_count_only_where_torch_dispatches_to_them(monkeypatch):
    """An AVX512-BF16 CPU told to dispatch AVX2 (zoo bench --isa avx2) emulates bf16: its
    units are not counted there, so a bench leaves bf16 out instead of measuring an
    emulated 2048-wide product for minutes."""
    monkeypatch.setattr(hardware, "_cpuinfo", lambda: {"model name": "Test CPU 9000",
                                                       "flags": "avx2 avx512f avx512_bf16"})
    for capability, units in (("AVX512", True), ("AVX2", False), ("DEFAULT", False)):
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda c=capability: c)
        assert hardware.detect_cpu().bf16 is units


def test_amx_counts_only_where_onednn_may_dispatch_to_it(monkeypatch):
    """An AMX CPU whose oneDNN is told to dispatch below AMX (zoo bench --isa no-amx)
    multiplies and attends in bf16 without the tiles: zoo counts no AMX there (its sdpa
    kernel then keeps bf16 attention off PyTorch's tile kernel), and still its bf16 units."""
    monkeypatch.setattr(hardware, "_cpuinfo", lambda: {
        "model name": "Test CPU 9000", "flags": "avx2 avx512f avx512_bf16 amx_bf16 amx_tile"})
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    for cap, amx in ((None, True), ("AVX512_CORE_FP16", False), ("avx512_core_amx", True),
                     ("ALL", True), ("AVX2", False)):
        if cap is None:
            monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        else:
            monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        cpu = hardware.detect_cpu()
        assert (cpu.amx, cpu.bf16) == (amx, True), cap


def test_a_busy_neighbour_is_seen_at_once():
    """others_running reads the kernel's runnable threads at this moment: a process that
    keeps a core busy is counted within a few reads, without waiting to average."""
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat here")
    neighbour = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])
    try:
        import time

        time.sleep(0.5)
        assert max(hardware.others_running() for _ in range(20)) >= 1
    finally:
        neighbour.kill()
        neighbour.wait()


def test_a_decoding_takes_only_the_cores_free_at_its_call(monkeypatch):
    """With the other processes running on every core but one, zoo.generate and the
    embedding batches (zoo.embed, zoo.rerank) run on one thread, and put torch's threads
    back after; alone they keep torch's threads, but for a sentence or two for an int8
    model to embed (one thread: a second must be woken after a pause); ZOO_ADAPT_THREADS=0
    keeps them whatever runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # a 2-core machine, whatever this worker was given
    monkeypatch.setattr(hardware, "usable_cores", lambda: 2)
    monkeypatch.setattr(hardware, "RECHECK_S", 0)  # each call counts again
    try:
        _takes_the_free_cores(monkeypatch)
    finally:
        torch.set_num_threads(threads)


def _takes_the_free_cores(monkeypatch):
    from zoo.embedding import by_length

    model = zoo.build("llama-tiny").eval()
    int8 = zoo.quantize(zoo.build("llama-tiny").eval())
    seen: list[int] = []
    model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    prompt = torch.tensor([[5, 6, 7]])
    for others, adapt, expected in [(hardware.usable_cores() - 1, "1", 1),
                                    (0, "1", before), (hardware.usable_cores(), "0", before)]:
        monkeypatch.setattr(hardware, "others_running", lambda reads=3, n=others: n)
        monkeypatch.setenv("ZOO_ADAPT_THREADS", adapt)
        seen.clear()
        zoo.generate(model, prompt, max_new_tokens=3)
        by_length(model, [hardware.SHORT_CALL, 1], 1, lambda chosen: (
            seen.append(torch.get_num_threads()) or torch.zeros(len(chosen), 1)))
        assert seen and set(seen) == {expected}, (others, adapt, seen)
        assert torch.get_num_threads() == before
        for short, threads in ((model, expected), (int8, before if adapt == "0" else 1)):
            seen.clear()  # a sentence or two: one thread for an int8 model
            by_length(short, [hardware.SHORT_CALL - 1, 1], 1, lambda chosen: (
                seen.append(torch.get_num_threads()) or torch.zeros(len(chosen), 1)))
            assert set(seen) == {threads}, (others, adapt, seen)
            assert torch.get_num_threads() == before
