"""zoo's native products (zoo/csrc/packed_linear.cpp and skinny_linear.cpp, built by
zoo.native): their results against a float64 product, where zoo.ops.Linear calls
them, and what happens when they cannot be built or are turned off."""

from __future__ import annotations

import os
import pickle
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo import derived, native
from zoo.derived import fixed_weights
from zoo.ops import Linear

from .conftest import run_python, run_zoo

CAN_BUILD = (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
             and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
             and shutil.which(os.environ.get("CXX", "c++")) is not None)
needs_kernel = pytest.mark.skipif(not CAN_BUILD,
                                  reason="needs Linux on an AVX2 CPU and a C++ compiler")


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x.double(), weight.double(), None if bias is None else bias.double()).float()


@needs_kernel
def test_the_kernel_builds_and_loads_where_it_can():
    assert native.available()
    assert torch.ops.zoo.cpu_has_avx2_fma()


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 16, 17])
@pytest.mark.parametrize("n_out, n_in", [(8000, 512), (13, 7), (9, 33), (24, 2048), (1, 1)])
def test_skinny_linear_equals_a_float64_product(rows, n_out, n_in):
    """Shapes with tails of every kind: inputs not a multiple of 8 wide, outputs not a
    multiple of the 8 or 4 rows of W read together, with and without a bias."""
    assert native.available()
    torch.manual_seed(rows * 1000 + n_out)
    x, weight, bias = torch.randn(rows, n_in), torch.randn(n_out, n_in), torch.randn(n_out)
    for b in (bias, None):
        got = torch.ops.zoo.skinny_linear(x, weight, b)
        assert got.shape == (rows, n_out)
        torch.testing.assert_close(got, reference(x, weight, b), rtol=1e-5,
                                   atol=2e-6 * n_in ** 0.5 * 4)


@needs_kernel
def test_skinny_linear_keeps_leading_dims_and_reads_strided_inputs():
    assert native.available()
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 24), torch.randn(40)
    x = torch.randn(24, 3).t()[:, None]  # (3, 1, 24), not contiguous
    got = torch.ops.zoo.skinny_linear(x, weight, bias)
    assert got.shape == (3, 1, 40)
    torch.testing.assert_close(got, reference(x, weight, bias), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="last size 23 is not weight's 24"):
        torch.ops.zoo.skinny_linear(torch.randn(2, 23), weight, bias)
    with pytest.raises(ValueError, match="float32 only"):
        torch.ops.zoo.skinny_linear(x.double(), weight.double(), None)
    with pytest.raises(ValueError, match="bias is a contiguous float32 CPU vector of 40"):
        torch.ops.zoo.skinny_linear(x, weight, torch.randn(39))
    with pytest.raises(ValueError, match="a contiguous 2-d weight"):
        torch.ops.zoo.skinny_linear(x, weight.t().contiguous().t(), bias)
    no_inputs = torch.ops.zoo.skinny_linear(torch.randn(3, 0), torch.randn(40, 0), bias)
    assert torch.equal(no_inputs, bias.expand(3, 40))  # an empty sum: the bias


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 17, 64, 129])
@pytest.mark.parametrize("n_out, n_in", [(8000, 512), (13, 7), (70, 33), (64, 2048), (1, 1)])
def test_packed_linear_equals_a_float64_product(rows, n_out, n_in):
    """Row counts of every block of the kernel (one to six rows, and one to four panels
    at a time) and outputs with tails: fewer than 16, not a multiple of 16 or of 64."""
    assert native.available()
    torch.manual_seed(rows * 1000 + n_out)
    x, weight, bias = torch.randn(rows, n_in), torch.randn(n_out, n_in), torch.randn(n_out)
    packed = torch.ops.zoo.pack_linear_weight(weight)
    assert packed.shape == (16 + (n_out + 15) // 16 * n_in * 16,)  # a header, then panels
    for b in (bias, None):
        got = torch.ops.zoo.packed_linear(x, packed, b, n_out)
        assert got.shape == (rows, n_out)
        torch.testing.assert_close(got, reference(x, weight, b), rtol=1e-5,
                                   atol=2e-6 * n_in ** 0.5 * 4)


@needs_kernel
def test_a_rows_result_does_not_depend_on_the_rows_beside_it_or_the_threads():
    """Every output is one chain of FMAs over the inputs in order: the same bits for a
    row alone, in any batch, with one thread or two (unlike oneDNN's products)."""
    assert native.available()
    torch.manual_seed(0)
    weight, bias = torch.randn(200, 96), torch.randn(200)
    packed = torch.ops.zoo.pack_linear_weight(weight)
    x = torch.randn(23, 96)
    together = torch.ops.zoo.packed_linear(x, packed, bias, 200)
    for rows in ([5], [0, 1], [2, 3, 4], list(range(16)), list(range(7, 23))):
        alone = torch.ops.zoo.packed_linear(x[rows], packed, bias, 200)
        assert torch.equal(alone, together[rows]), rows
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(torch.ops.zoo.packed_linear(x, packed, bias, 200), together)
    finally:
        torch.set_num_threads(threads)


@needs_kernel
@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() != "AVX512",
                    reason="its AVX-512 kernel runs on an AVX-512 CPU")
def test_the_avx512_kernel_gives_the_avx2_kernels_bits(tmp_path):
    """On an AVX-512 CPU the packed fp32 product runs an AVX-512 kernel; told to dispatch
    AVX2 (ATEN_CPU_CAPABILITY=avx2, zoo bench --isa avx2) it runs the AVX2 one. Each output
    is the same chain of FMAs in both: the same bits, at every block of rows and with tails,
    with and without a bias. (The int8 product's 512-bit kernel is held to its formula in
    tests/test_int8_native.py, as tightly as the 256-bit one.)"""
    assert native.available() and torch.ops.zoo.product_isa() == "AVX-512"
    torch.manual_seed(0)
    cases = [(torch.randn(rows, n_in), torch.randn(n_out, n_in), b)
             for rows in (1, 2, 3, 4, 6, 7, 16, 33) for n_out, n_in in ((70, 33), (512, 96))
             for b in (torch.randn(n_out), None)]
    torch.save(cases, tmp_path / "cases.pt")
    script = (
        "import sys, torch, zoo.native as n; n.available()\n"
        "assert torch.ops.zoo.product_isa() == 'AVX2'\n"
        "torch.save([torch.ops.zoo.packed_linear(x, torch.ops.zoo.pack_linear_weight(w), b,"
        " len(w)) for x, w, b in torch.load(sys.argv[1])], sys.argv[2])\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "cases.pt"),
                           str(tmp_path / "avx2.pt")], capture_output=True, text=True,
                          env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"})
    assert done.returncode == 0, done.stderr[-2000:]
    for (x, w, b), avx2 in zip(cases, torch.load(tmp_path / "avx2.pt")):
        ours = torch.ops.zoo.packed_linear(x, torch.ops.zoo.pack_linear_weight(w), b, len(w))
        assert torch.equal(ours, avx2), (x.shape, w.shape, b is None)


@needs_kernel
def test_packed_linear_keeps_leading_dims_and_names_wrong_inputs():
    assert native.available()
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 24), torch.randn(40)
    packed = torch.ops.zoo.pack_linear_weight(weight)
    x = torch.randn(24, 3).t()[:, None]  # (3, 1, 24), not contiguous
    got = torch.ops.zoo.packed_linear(x, packed, bias, 40)
    assert got.shape == (3, 1, 40)
    torch.testing.assert_close(got, reference(x, weight, bias), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="last size 23 is not the weight's 24"):
        torch.ops.zoo.packed_linear(torch.randn(2, 23), packed, bias, 40)
    for n_out in (50, 33):  # 33: as many panels of 16 as 40, where only a size check passed
        with pytest.raises(ValueError, match=f"n_out is {n_out}, but the packed weight has 40"):
            torch.ops.zoo.packed_linear(x, packed, None, n_out)
    with pytest.raises(ValueError, match="bias is a contiguous float32 CPU vector of 40"):
        torch.ops.zoo.packed_linear(x, packed, torch.randn(39), 40)
    with pytest.raises(ValueError, match="bias is a contiguous float32 CPU vector of 40"):
        torch.ops.zoo.packed_linear(x, packed, torch.randn(80)[::2], 40)
    for not_a_pack in (torch.randn(3, 24, 16), torch.randn(16 + 3 * 24 * 16), packed[:-16]):
        with pytest.raises(ValueError, match="packed is not a weight from pack_linear_weight"):
            torch.ops.zoo.packed_linear(x, not_a_pack, bias, 40)
    with pytest.raises(ValueError, match="2-d float32 CPU weight"):
        torch.ops.zoo.pack_linear_weight(weight.double())
    empty = torch.ops.zoo.pack_linear_weight(torch.randn(40, 0))  # no inputs: the bias
    assert torch.equal(torch.ops.zoo.packed_linear(torch.randn(3, 0), empty, bias, 40),
                       bias.expand(3, 40))


def _kernel_calls(layer: torch.nn.Module, x: torch.Tensor,
                  kernel: str = "zoo::packed_linear") -> int:
    from torch.profiler import profile

    with profile() as prof:
        layer(x)
    return sum(e.count for e in prof.key_averages() if e.key == kernel)


@needs_kernel
def test_linear_multiplies_few_rows_of_fp32_inference_by_the_kernel():
    assert native.available()
    torch.manual_seed(0)
    layer = Linear(64, 48).eval()
    few, many = torch.randn(2, 1, 64), torch.randn(Linear(1, 1).native_row_limit() + 1, 64)
    with torch.no_grad(), fixed_weights(layer):
        assert _kernel_calls(layer, few) == 1
        assert _kernel_calls(layer, many) == 0  # oneDNN's packed product
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert _kernel_calls(layer, few) == 0
        layer.native_rows = 0
        assert _kernel_calls(layer, few) == 0
        del layer.native_rows
        torch.testing.assert_close(layer(few), F.linear(few, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
    assert _kernel_calls(layer, few) == 0  # with gradients: nn.Linear exactly
    with torch.no_grad():  # outside a block that fixes the weights: no packed copy
        assert _kernel_calls(layer, few) == 0
        assert _kernel_calls(layer, few, "zoo::skinny_linear") == 1
        assert _kernel_calls(layer, many, "zoo::skinny_linear") == 0  # F.linear


@needs_kernel
def test_linear_packs_its_weight_once_and_again_when_it_changes():
    assert native.available()
    torch.manual_seed(0)
    layer = Linear(24, 40).eval()
    x = torch.randn(3, 24)
    with torch.no_grad(), fixed_weights(layer):
        first = layer.native_weight()
        assert layer.native_weight() is first
        layer(x)
        assert layer.native_weight() is first
        layer.weight.mul_(2)  # in place: the packed copy is stale
        torch.testing.assert_close(layer(x), reference(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
        assert layer.native_weight() is not first
        layer.load_state_dict({"weight": torch.randn(40, 24), "bias": torch.randn(40)})
        torch.testing.assert_close(layer(x), reference(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
    assert "_native_cache" in derived.kept(layer)
    # not pickled: a packed layer pickles to about the size of a fresh one (its packed
    # weight alone would add 16 + 48 x 24 floats)
    assert len(pickle.dumps(layer)) < len(pickle.dumps(Linear(24, 40))) + 256
    assert "_native_cache" not in derived.kept(pickle.loads(pickle.dumps(layer)))
    layer.train()
    assert "_native_cache" not in derived.kept(layer)


@needs_kernel
def test_compiled_inference_calls_the_kernel_in_one_graph():
    assert native.available()
    torch.manual_seed(0)
    layer = torch.nn.Sequential(Linear(16, 32), torch.nn.ReLU(), Linear(32, 8)).eval()
    x = torch.randn(3, 16)
    with torch.no_grad():
        compiled = torch.compile(layer, backend="eager", fullgraph=True)
        out = compiled(x)
        expected = F.linear(torch.relu(F.linear(x, layer[0].weight, layer[0].bias)),
                            layer[2].weight, layer[2].bias)
        assert _kernel_calls(compiled, x, "zoo::skinny_linear") == 2
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def _in_a_fresh_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import warnings, torch; warnings.simplefilter('always'); from zoo import native; "
            "from zoo.ops import Linear; print('available', native.available()); "
            "x = torch.randn(1, 8); l = Linear(8, 4).eval()\n"
            "with torch.no_grad(): torch.testing.assert_close(l(x), torch.nn.functional.linear("
            "x, l.weight, l.bias), rtol=1e-5, atol=1e-5)")
    return run_python(code, env=env, timeout=300)


def _zoo(args: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return run_zoo(*args, env=env, timeout=timeout)


def _fake_compiler(path, body: str) -> str:
    """A compiler that answers --version at once and does ``body`` otherwise."""
    path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fake c++ 1.0'; exit 0; "
                    f"fi\n{body}\n")
    path.chmod(0o755)
    return str(path)


@needs_kernel
def test_no_command_compiles_they_warn_once_and_decode_without(tmp_path):
    """Nothing compiles unless asked: a decode with no build says so once, names
    zoo native build, and gives F.linear's result through oneDNN."""
    first = _in_a_fresh_process({"ZOO_NATIVE_CACHE": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    assert "available False" in first.stdout and "compiling" not in first.stderr
    assert first.stderr.count("RuntimeWarning") == 1, first.stderr
    assert "zoo_products is not built" in first.stderr and "zoo native build" in first.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not CAN_BUILD, reason="needs Linux on an AVX2 CPU")
def test_a_failed_build_is_said_and_not_loaded_and_tried_again_when_asked(tmp_path):
    env = {"CXX": _fake_compiler(tmp_path.parent / f"{tmp_path.name}-false", "exit 1"),
           "ZOO_NATIVE_CACHE": str(tmp_path)}
    built = _zoo(["native", "build"], env)
    assert built.returncode == 1
    assert "compiling zoo_products failed: exit status" in built.stderr, built.stderr
    (folder,) = tmp_path.iterdir()  # the step's library is not tried without the products
    assert (folder / "FAILED").exists() and (folder / "build.log").exists()
    assert not list(folder.glob("*.so"))
    after = _in_a_fresh_process(env)
    assert "available False" in after.stdout and "for torch" not in after.stderr
    assert after.stderr.count("RuntimeWarning") == 1
    assert "compiling zoo_products failed (see" in after.stderr and "build.log" in after.stderr
    said = _zoo(["native", "status"], env)
    assert said.returncode == 1 and f"failed in {folder}" in said.stdout
    assert str(folder / "build.log") in said.stdout
    again = _zoo(["native", "build"], env)  # asked again: tried again
    assert "compiling zoo_products for torch" in again.stderr and again.returncode == 1
    first_use = _in_a_fresh_process({**env, "ZOO_NATIVE": "build"})  # asked by the setting
    assert "compiling zoo_products for torch" in first_use.stderr
    assert "available False" in first_use.stdout
    # another compiler (another --version at another path) has a folder of its own
    other = _fake_compiler(tmp_path.parent / f"{tmp_path.name}-other", "exit 1")
    elsewhere = _zoo(["native", "status"], {**env, "CXX": other}).stdout
    assert "zoo_products not built in" in elsewhere and str(folder) not in elsewhere


@pytest.mark.skipif(not CAN_BUILD, reason="needs Linux on an AVX2 CPU")
def test_a_hung_compiler_and_a_held_build_are_given_up_with_a_message(tmp_path):
    from filelock import FileLock

    env = {"CXX": _fake_compiler(tmp_path.parent / f"{tmp_path.name}-hang", "sleep 600"),
           "ZOO_NATIVE_CACHE": str(tmp_path), "ZOO_NATIVE_BUILD_TIMEOUT": "3"}
    hung = _zoo(["native", "build"], env, timeout=120)
    assert hung.returncode == 1
    assert "stopped after 3 s (ZOO_NATIVE_BUILD_TIMEOUT)" in hung.stderr, hung.stderr
    (folder,) = tmp_path.iterdir()
    with FileLock(str(folder / ".lock")):  # another process's build, held
        held = _zoo(["native", "build"], env, timeout=120)
    assert held.returncode == 1
    assert f"which is building zoo_products in {folder}" in held.stderr, held.stderr
    assert "gave up waiting" in held.stderr


@needs_kernel
def test_other_sources_build_into_a_folder_of_their_own_and_old_ones_are_pruned(
        tmp_path, monkeypatch):
    """Two installations with other sources (two versions of zoo, a checkout beside a
    wheel) each keep their own build: changed sources build into a new folder and leave
    the earlier build as it was (one folder for all had each find the other's library
    stale); past KEPT_BUILDS folders of a library, the ones used longest ago go."""
    monkeypatch.setenv("ZOO_NATIVE_CACHE", str(tmp_path / "cache"))
    from zoo import native_cache

    monkeypatch.setattr(native_cache, "KEPT_BUILDS", 2)
    op = ('#include <ATen/ops/mul.h>\n#include <ATen/core/Tensor.h>\n#include <torch/library.h>\n'
          'at::Tensor {name}(const at::Tensor& x) {{ return at::mul(x, {k}); }}\n'
          'TORCH_LIBRARY_FRAGMENT(zoo_test_rebuild, m) {{ m.def("{name}(Tensor x) -> Tensor"); }}\n'
          'TORCH_LIBRARY_IMPL(zoo_test_rebuild, CPU, m) {{ m.impl("{name}", {name}); }}\n')
    source, helper = tmp_path / "a.cpp", tmp_path / "b.cpp"
    source.write_text(op.format(name="twice", k=2))
    helper.write_text("int zoo_test_rebuild_helper() { return 2; }\n")
    library = native.NativeLibrary("zoo_test_rebuild", [source, helper], declare=False)
    assert library.status()["state"] == "not built"
    said: list[str] = []
    assert library.build(said.append), said
    assert torch.ops.zoo_test_rebuild.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    first = Path(library.status()["folder"])
    built = library.file(first).read_bytes()
    folders = [first]
    for edit in ("// changed\n", "// changed again\n"):
        source.write_text(op.format(name="twice", k=2) + edit)
        assert library.status()["state"] == "not built"  # a folder of its own, not stale
        said.clear()
        assert library.build(said.append), said  # built; this process keeps the first
        assert any("this process keeps it" in line for line in said), said
        folders.append(Path(library.status()["folder"]))
        assert library.status()["state"] == "built"
        if edit == "// changed\n":
            assert library.file(first).read_bytes() == built  # the earlier build untouched
    assert torch.ops.zoo_test_rebuild.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    assert len(set(folders)) == 3
    assert not folders[0].exists() and folders[1].exists() and folders[2].exists()
    assert library not in native.libraries()  # declare=False: not zoo native build's
    # a library replaced and one of its objects cut short: that object is compiled again,
    # the other kept (ninja, by the files' times: its source is older), the library relinked
    last, (whole, cut) = folders[2], (folders[2] / "a.o", folders[2] / "b.o")
    whole_before = whole.stat().st_mtime_ns
    cut.write_bytes(cut.read_bytes()[:100])
    library.file(last).write_bytes(b"another library")
    assert library.status()["state"] == "damaged"
    said.clear()
    assert library.build(said.append), said
    assert any("is not the library that was built" in line for line in said), said
    assert library.status()["state"] == "built" and cut.stat().st_size > 100
    assert whole.stat().st_mtime_ns == whole_before


def _copy_of_the_built_cache(to: Path) -> dict[Path, Path]:
    """This installation's built libraries copied to a cache of their own at ``to``:
    each library's file in the copy by its name."""
    if not native.available():
        pytest.skip("zoo's native libraries do not run here")
    from zoo.registry import registry

    registry.ensure_loaded()
    files = {}
    for library in native.libraries():
        folder = Path(library.status()["folder"])
        shutil.copytree(folder, to / folder.name, ignore=shutil.ignore_patterns("*lock"))
        files[library.name] = to / folder.name / f"{library.name}.so"
    return files


_STEP_RUNS = "llama-tiny: the native step runs this model: 2 layers"


@needs_kernel
def test_a_copied_or_moved_cache_decodes_natively(tmp_path):
    """A library names those it needs by file name (its soname): a copy of a cache
    loads its own products, not the original's a second time (which aborted)."""
    _copy_of_the_built_cache(tmp_path / "copy")
    for cache in ("copy", "moved"):
        if cache == "moved":
            (tmp_path / "copy").rename(tmp_path / "moved")
        said = _zoo(["native", "status", "llama-tiny"],
                    {"ZOO_NATIVE_CACHE": str(tmp_path / cache)})
        assert said.returncode == 0 and _STEP_RUNS in said.stdout, said.stdout + said.stderr


def test_a_damaged_build_compiles_again_only_the_objects_that_changed(tmp_path):
    """What zoo native build deletes of a damaged build before ninja runs: the objects
    whose SHA-256 is not the recorded one; all of them where a ninja log changed or the
    record (an older zoo's) names none."""
    from zoo.native_record import outputs_to_redo, read_record, write_record

    for name, text in (("a.o", "a"), ("b.o", "b"), (".ninja_log", "log"),
                       (".ninja_deps", "deps"), ("x.so", "library")):
        (tmp_path / name).write_text(text)
    write_record(tmp_path / "SOURCES", "key", tmp_path / "x.so")
    record = read_record(tmp_path / "SOURCES")
    everything = sorted(tmp_path / n for n in ("a.o", "b.o", ".ninja_log", ".ninja_deps"))
    assert outputs_to_redo(tmp_path, record) == []
    (tmp_path / "b.o").write_text("b, cut")
    assert outputs_to_redo(tmp_path, record) == [tmp_path / "b.o"]
    (tmp_path / ".ninja_log").write_text("log, cut")
    assert sorted(outputs_to_redo(tmp_path, record)) == everything
    old = {k: v for k, v in record.items() if k != "outputs"}
    (tmp_path / ".ninja_log").write_text("log")
    assert sorted(outputs_to_redo(tmp_path, old)) == everything


@needs_kernel
def test_a_library_cut_short_or_replaced_is_not_loaded_and_zoo_native_status_says_so(tmp_path):
    """A library is checked against its build's record before it is loaded: cut short
    (which was a SIGBUS inside dlopen) or replaced by another library, it is said once,
    decoding goes on without it, and zoo native status names zoo native build."""
    files = _copy_of_the_built_cache(tmp_path)
    env = {"ZOO_NATIVE_CACHE": str(tmp_path)}
    products, step = files["zoo_products"], files["zoo_decoder_step"]
    kept = products.read_bytes()
    step.write_bytes(kept)  # another library under its name
    with products.open("r+b") as cut:
        cut.truncate(products.stat().st_size // 2)
    for check in (_in_a_fresh_process(env), _zoo(["native", "status", "llama-tiny"], env)):
        assert check.returncode in (0, 1) and "Traceback" not in check.stderr, check.stderr
    assert "llama-tiny: the native step does not run this model: its library is damaged " \
           "here" in check.stdout
    after = _in_a_fresh_process(env)
    assert after.returncode == 0 and "available False" in after.stdout, after.stderr
    assert after.stderr.count("RuntimeWarning") == 1
    assert f"{products} is not the library that was built" in after.stderr
    said = _zoo(["native", "status"], env)
    assert said.returncode == 1 and "zoo_products damaged" in said.stdout
    assert "zoo_decoder_step damaged" in said.stdout
    assert "zoo native build builds the damaged ones again" in said.stdout
    # building them again is each library's build(), as zoo native build calls it: see
    # test_other_sources_build_into_a_folder_of_their_own_and_old_ones_are_pruned, on a
    # library of the test's own (a whole compile of these takes minutes)


@needs_kernel
def test_a_build_onto_a_full_disk_is_one_zoo_error(tmp_path):
    """The build's own writes failing (here a file size limit, as a full disk fails
    them) are said by zoo, naming the folder, never a traceback."""
    import resource

    files = _copy_of_the_built_cache(tmp_path)
    files["zoo_products"].write_bytes(b"\x7fELF")
    limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))  # noqa: E731
    built = subprocess.run([sys.executable, "-m", "zoo", "native", "build"], capture_output=True,
                           text=True, env={**os.environ, "ZOO_NATIVE_CACHE": str(tmp_path)},
                           timeout=300, preexec_fn=limit)
    assert built.returncode == 1 and "Traceback" not in built.stderr, built.stderr
    folder = files["zoo_products"].parent
    assert f"compiling zoo_products in {folder} failed: File too large" in built.stderr
    assert built.stderr.count("compiling zoo_products for torch") == 1  # tried once a call


def test_zoo_env_and_zoo_native_report_the_native_libraries_without_compiling(tmp_path):
    import json

    if not native.available():
        pytest.skip("zoo's native libraries do not run here")
    report = run_zoo("env", "--json", timeout=300)
    libraries = json.loads(report.stdout)["native_libraries"]
    assert libraries["state"] == "built" and libraries["folder"] == native.status()["folder"]
    assert libraries["missing"] == []
    # a cache of its own has none yet: said, and nothing compiled
    env = {"ZOO_NATIVE_CACHE": str(tmp_path)}
    said = run_zoo("native", "status", env=env, timeout=300)
    assert said.returncode == 0 and "not built" in said.stdout
    assert not list(tmp_path.iterdir())
    text = run_zoo("env", env=env, timeout=300).stdout
    assert "zoo's native libraries: not built" in text and "zoo native build" in text
    # of one model: whether the step decodes it, and why not, as its gate said it
    said = run_zoo("native", "status", "transformer-tiny", env=env, timeout=300)
    assert said.returncode == 0, said.stderr
    assert "transformer-tiny: the native step does not run this model: its library is not " \
           "built here" in said.stdout
    zoo.save_pretrained(zoo.build("transformer-tiny", positional="shaw"), tmp_path / "shaw")
    for name, says in (("llama-tiny", "the native step runs this model: 2 layers"),
                       (f"local-dir:{tmp_path / 'shaw'}", "does not run this model: layer 0's "
                                                          "attention holds positions"),
                       ("vit-tiny-patch4-28", "this is an image-classifier model")):
        said = run_zoo("native", "status", name, timeout=300)
        assert said.returncode == 0 and f"{name}: " in said.stdout and says in said.stdout, \
            said.stdout + said.stderr


def test_the_former_names_of_the_native_cache_and_of_linears_methods_still_work(
        tmp_path, monkeypatch):
    monkeypatch.delenv("ZOO_NATIVE_CACHE", raising=False)
    monkeypatch.setenv("ZOO_KERNEL_CACHE", str(tmp_path / "old"))
    with pytest.warns(DeprecationWarning, match="ZOO_KERNEL_CACHE is now named ZOO_NATIVE_CACHE"):
        assert native.cache_root() == tmp_path / "old"
    monkeypatch.setenv("ZOO_NATIVE_CACHE", str(tmp_path / "new"))  # the new name wins
    assert native.cache_root() == tmp_path / "new"
    layer = Linear(4, 4)
    layer.native_rows = 7
    with pytest.warns(DeprecationWarning, match=r"kernel_rows\(\) is now native_row_limit"):
        assert layer.kernel_rows() == layer.native_row_limit() == 7


def test_zoo_native_0_turns_it_off(tmp_path):
    off = _in_a_fresh_process({"ZOO_NATIVE": "0", "ZOO_NATIVE_CACHE": str(tmp_path)})
    assert off.returncode == 0, off.stderr
    assert "available False" in off.stdout and "Warning" not in off.stderr
    assert not list(tmp_path.iterdir())  # nothing compiled


def test_below_avx2_dispatch_it_is_not_used(tmp_path):
    """ATEN_CPU_CAPABILITY=default stands for a CPU without AVX2: no kernel, no warning."""
    plain = _in_a_fresh_process({"ATEN_CPU_CAPABILITY": "default",
                                 "ZOO_NATIVE_CACHE": str(tmp_path)})
    assert plain.returncode == 0, plain.stderr
    assert "available False" in plain.stdout and "Warning" not in plain.stderr
    assert not list(tmp_path.iterdir())


@needs_kernel
@pytest.mark.parametrize("shape,k", [((1, 32000), 8), ((4, 8000), 8), ((3, 5), 5),
                                     ((2, 100), 64), ((2, 100), 65), ((1, 7), 0)])
def test_top_k_is_torch_topk(shape, k):
    """zoo's one-pass top k gives torch.topk's values and indices, sorted, infinities,
    NaN (above every number) and past its own limit of k (torch's sort) included; equal
    values keep the row's order."""
    from zoo.decoding.search import top_k

    x = torch.randn(shape, generator=torch.Generator().manual_seed(k))
    if shape[1] > 20:  # (torch.topk does not say which of equal values comes first)
        x[:, ::3] = float("-inf")
        x[0, 11], x[-1, -2] = float("nan"), float("inf")
    values, indices = top_k(x, k)
    expected = x.topk(k, dim=1)
    torch.testing.assert_close(values, expected.values, equal_nan=True)
    assert torch.equal(indices, expected.indices)
    ties = torch.tensor([[1.0, 3.0, 2.0, 3.0, 3.0, 0.0, 2.0, 3.0, 1.0, 2.0]])
    assert torch.ops.zoo.top_k(ties, 5)[1].tolist() == [[1, 3, 4, 7, 2]]


def _memory_kb(field: str) -> int:
    """A field of this process's memory (/proc/self/smaps_rollup), in KiB."""
    for line in open("/proc/self/smaps_rollup"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


@needs_kernel
@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux's smaps")
def test_packed_weights_share_slabs_of_huge_pages_and_give_them_back():
    """Packed weights lie one after another, aligned to a cache line, in slabs the kernel is
    asked to back with 2 MiB pages: where transparent huge pages are on ("always" or
    "madvise"), 64 MB of them are mostly in huge pages. Packed and dropped again and
    again, they give their memory back (a slab is unmapped with its last weight)."""
    torch.manual_seed(0)
    weights = [torch.randint(-127, 128, (2048, 512), dtype=torch.int8) for _ in range(64)]
    scale = torch.rand(2048)
    before = _memory_kb("AnonHugePages")
    packed = [torch.ops.zoo.pack_int8_weight(w, scale) for w in weights]
    assert all(p.data_ptr() % 64 == 0 for p in packed)
    assert packed[1].data_ptr() - packed[0].data_ptr() < 2 * packed[0].numel()  # one slab
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if mode.exists() and "[never]" not in mode.read_text():
        assert _memory_kb("AnonHugePages") - before >= 32 * 1024
    x = torch.randn(3, 512)
    expected = x @ (weights[5].float() * scale[:, None]).T
    torch.testing.assert_close(torch.ops.zoo.packed_linear(x, packed[5], None, 2048), expected,
                               rtol=0.02, atol=0.02 * float(expected.abs().max()))
    del packed
    held = _memory_kb("Rss")
    for _ in range(20):  # 1.3 GB packed and dropped in all
        packed = [torch.ops.zoo.pack_int8_weight(w, scale) for w in weights]
        del packed
    assert _memory_kb("Rss") - held < 100 * 1024


@needs_kernel
def test_native_status_says_why_from_the_gate_without_decoding(tmp_path, monkeypatch):
    # the one gate, model.native_plan(): a plan or a Refusal naming the part; zoo native
    # status prints it, and no forward or decoding step runs
    from zoo.cli_decode import native_decision
    from zoo.plugin_api import Refusal, StaticDecoding
    from zoo.plugins.architectures.decoder import CausalLM
    from zoo.plugins.architectures.seq2seq import Seq2Seq

    def never(*args, **kwargs):
        raise AssertionError("zoo native status decoded")

    for name, changes in [("lm", {"attention": "performer"}), ("lm-ok", {}),
                          ("s2s", {"ffn": "swiglu"})]:
        recipe = "transformer-tiny" if name == "s2s" else "llama-tiny"
        zoo.save_pretrained(zoo.build(recipe, **changes), tmp_path / name)
    monkeypatch.setattr(CausalLM, "forward", never)
    monkeypatch.setattr(Seq2Seq, "forward", never)
    monkeypatch.setattr(Seq2Seq, "decode", never)
    said = native_decision(f"local-dir:{tmp_path / 'lm'}")
    assert said == ("the native step does not run this model: layer 0's PerformerAttention "
                    "is not softmax attention over every key, or records its maps")
    assert native_decision(f"local-dir:{tmp_path / 'lm-ok'}") == (
        "the native step runs this model: 2 layers in one call a step")
    assert native_decision(f"local-dir:{tmp_path / 's2s'}").startswith(
        "the native step runs this model: ")
    model = zoo.build("llama-tiny").eval()
    assert isinstance(model, StaticDecoding) and model.native_plan()
    model.static_decoding = False
    refusal = model.native_plan()
    assert isinstance(refusal, Refusal) and not refusal
    assert refusal.reason == "static_decoding is off"
    assert not isinstance(zoo.build("minilm-l6-h384"), StaticDecoding)


def test_the_native_libraries_off_warning_names_the_users_line(monkeypatch):
    """However deep inside zoo (and torch) the libraries are found off, the warning
    points at the first line outside them: the user's call."""
    import warnings
    from pathlib import Path

    import zoo.native as native

    inside = {}  # a function whose code lives in zoo's folder, as zoo's own callers do
    exec(compile("def deep(off):\n    return off(False, 'a test')\n",
                 str(Path(native.__file__).parent / "deep_caller.py"), "exec"), inside)
    monkeypatch.setattr(native, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        inside["deep"](native._off)
    assert [(Path(w.filename).name, w.lineno) for w in caught] == [(Path(__file__).name, line)]


def test_the_native_module_imports_no_torch():
    """zoo.native is read by commands that need no torch (``zoo --help`` stays fast)."""
    done = subprocess.run([sys.executable, "-c", "import sys, zoo.native; "
                           "print('torch' in sys.modules)"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
