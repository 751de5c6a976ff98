"""``zoo bench attention``: the measurement tools measure, the command writes what
it says. (Timings are never asserted: machines are shared and noisy.)"""

from __future__ import annotations

import json

import pytest
import torch

from zoo.bench import attention as bench
from zoo.bench.memory import PeakMemory, cpu_supported

from .conftest import run_zoo


@pytest.mark.skipif(not cpu_supported(), reason="needs Linux's /proc for CPU peak memory")
def test_peak_memory_sees_a_temporary_allocation():
    with PeakMemory("cpu") as small:
        torch.ones(1000).sum()
    with PeakMemory("cpu") as big:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, freed before the block ends
        x.add_(1)
        del x
    assert big.peak >= 60 * 2**20
    assert small.peak < 16 * 2**20


def test_growth_exponent_fits_powers():
    lengths = [256, 512, 1024, 2048]
    assert bench.growth_exponent([(n, 3 * n) for n in lengths]) == pytest.approx(1.0)
    assert bench.growth_exponent([(n, 5 * n * n) for n in lengths]) == pytest.approx(2.0)
    assert bench.growth_exponent([(256, 10)]) is None


def test_a_mechanism_stops_before_the_memory_bound():
    results = bench.run(["vanilla:eager"], [64, 128, 256, 512], d_model=32, n_heads=4,
                        repeat=1, memory_bound=1)
    measured = [r for r in results if r.time_ms is not None]
    skipped = [r for r in results if r.skipped]
    assert [r.length for r in measured] + [r.length for r in skipped] == [64, 128, 256, 512]
    assert skipped and all("bound" in r.skipped for r in skipped)


def test_zoo_bench_attention_writes_table_json_and_plot(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = run_zoo("bench", "attention", "--mechanisms", "vanilla:eager,linear,bigbird",
                     "--lengths", "64,128", "--d-model", "32", "--heads", "4", "--repeat", "1",
                     "--causal", "--json", str(out), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert "peak memory (MiB)" in result.stdout and "linear" in result.stdout
    rows = json.loads(out.read_text())
    assert {(r["mechanism"], r["length"]) for r in rows} == {
        (m, n) for m in ("vanilla:eager", "linear", "bigbird") for n in (64, 128)}
    for r in rows:
        assert r["bench"] == "attention" and r["impl"] == "zoo" and r["unit"] == "tokens/s"
        assert r["throughput"] > 0 and r["time_ms"] > 0 and r["mode"] == "inference"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zoo_bench_attention_names_an_unknown_mechanism():
    result = run_zoo("bench", "attention", "--mechanisms", "performr", "--lengths", "64")
    assert result.returncode == 2
    assert "performer" in result.stderr and "Traceback" not in result.stderr
