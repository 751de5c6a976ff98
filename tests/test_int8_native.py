"""zoo's native int8 product (zoo/csrc/int8_linear.cpp): each row of x rounded to int8 with
its own scale, int32 dot products with the int8 weight, then the scales and the bias; checked
against that formula in float64, where QuantizedLinear calls it, and inside the static
decoder's native step."""

from __future__ import annotations

import os

import pytest
import torch

from zoo import hardware, native
from zoo.derived import fixed_weights
from zoo.plugins.architectures.static_decoder import fused_qkv
from zoo.quantization import QuantizedLinear, quantize

from .test_native import needs_kernel
from .test_static_decoder import NATIVE, _python_and_native_steps, tiny

pytestmark = needs_kernel


def formula(x: torch.Tensor, layer: QuantizedLinear) -> torch.Tensor:
    """Dynamic quantization row by row: q = round(x * levels / max|x|) (8 bits where the CPU
    has VNNI, else 7), then (q Q^T) * (max|x| / levels) * scale + bias, summed in float64."""
    levels = 127.0 if torch.ops.zoo.int8_full_range() else 63.0
    x = x.reshape(-1, x.shape[-1])
    amax = x.abs().amax(-1, keepdim=True)
    q = torch.round(x * torch.where(amax > 0, levels / amax, torch.zeros_like(amax)))
    scale = (amax / levels) * layer.weight_scale  # float32, as the kernel multiplies
    out = (q.double() @ layer.weight_int8.double().T) * scale.double()
    return (out if layer.bias is None else out + layer.bias.double()).float()


def _layer(n_out: int, n_in: int, bias: bool = True, seed: int = 0) -> QuantizedLinear:
    torch.manual_seed(seed)
    return QuantizedLinear.from_linear(torch.nn.Linear(n_in, n_out, bias=bias)).eval()


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 13, 17, 40])
@pytest.mark.parametrize("n_out, n_in", [(3000, 512), (13, 7), (70, 33), (64, 2050), (1, 1)])
def test_the_int8_product_is_the_dynamic_quantization_formula(rows, n_out, n_in):
    """(8 bits with VNNI, 7 without: see the last test.) Every block of rows (one to six), one
    to four panels at a time, outputs with tails (not multiples of 16) and inputs not a
    multiple of four (padded); on AMX's tiles (from 8 rows, inputs a multiple of 64), one
    tile of rows and two (40: 16 + 16, then 8)."""
    assert native.available()
    for bias in (True, False):
        layer = _layer(n_out, n_in, bias, seed=rows)
        x = torch.randn(rows, n_in) * torch.linspace(0.1, 3, rows)[:, None]
        got = torch.ops.zoo.packed_linear(x, layer.native_weight(), layer.bias, n_out)
        torch.testing.assert_close(got, formula(x, layer), rtol=2e-6, atol=2e-6)


def test_an_int8_rows_result_does_not_depend_on_the_rows_beside_it_or_the_threads():
    """One activation scale a row (FBGEMM's is one a call): the same bits alone or in any
    batch, with one thread or two; a row of zeros gives the bias."""
    layer = _layer(200, 96)
    x = torch.randn(23, 96)
    x[4] = 0
    packed = layer.native_weight()
    together = torch.ops.zoo.packed_linear(x, packed, layer.bias, 200)
    assert torch.equal(together[4], layer.bias)
    for rows in ([5], [0, 1], [2, 3, 4], list(range(16))):
        assert torch.equal(torch.ops.zoo.packed_linear(x[rows], packed, layer.bias, 200),
                           together[rows]), rows
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(torch.ops.zoo.packed_linear(x, packed, layer.bias, 200), together)
    finally:
        torch.set_num_threads(threads)


def test_wrong_int8_inputs_are_named():
    layer = _layer(40, 24)
    packed = layer.native_weight()
    with pytest.raises(ValueError, match="2-d int8 CPU weight"):
        torch.ops.zoo.pack_int8_weight(layer.weight_int8.float(), layer.weight_scale)
    with pytest.raises(ValueError, match="scale is a float32 CPU vector of 40"):
        torch.ops.zoo.pack_int8_weight(layer.weight_int8, layer.weight_scale[:39])
    with pytest.raises(ValueError, match="n_out is 33, but the packed weight has 40"):
        torch.ops.zoo.packed_linear(torch.randn(2, 24), packed, None, 33)
    with pytest.raises(ValueError, match="not the weight's 24"):
        torch.ops.zoo.packed_linear(torch.randn(2, 23), packed, None, 40)
    for not_a_pack in (packed[:-1], torch.zeros(packed.numel(), dtype=torch.int8)):
        with pytest.raises(ValueError, match="not a weight from pack_int8_weight"):
            torch.ops.zoo.packed_linear(torch.randn(2, 24), not_a_pack, None, 40)


def test_quantized_linear_gives_few_rows_to_the_native_product_and_more_to_fbgemm():
    layer = _layer(48, 64)
    few = torch.randn(2, 1, 64)
    many = torch.randn(layer.native_rows or native.default_rows(int8=True) + 1, 64)
    with torch.no_grad(), fixed_weights(layer):
        assert layer(few).shape == (2, 1, 48)
        torch.testing.assert_close(layer(few), formula(few, layer).view(2, 1, 48),
                                   rtol=2e-6, atol=2e-6)
        fbgemm = [torch.ops.quantized.linear_dynamic(many, layer._packed(), reduce)
                  for reduce in (False, True)]  # 8 or 7 bits: FBGEMM's own CPU check
        assert any(torch.equal(layer(many), f) for f in fbgemm)
        layer.native_rows = 0
        assert not torch.equal(layer(few[:, 0] * torch.tensor([[1.0], [50.0]]))[0],
                               formula(few[:, 0] * torch.tensor([[1.0], [50.0]]), layer)[0])


def test_the_rows_given_to_the_native_products_follow_the_cpu_they_were_measured_on(
        monkeypatch):
    """int8: 128 rows on AVX2; on AVX-512 128 on an Intel CPU (its 512-bit kernel, measured
    on a Xeon of the Sapphire Rapids class), 4 on an AMD one (measured on a Zen 4 EPYC with
    the 256-bit kernel), 8192 where the products run on AMX's tiles; fp32 128 on each."""
    import dataclasses

    real = hardware.detect()
    avx2 = torch.backends.cpu.get_cpu_capability() == "AVX2"
    for amx in (False, True):
        monkeypatch.setattr(torch.ops.zoo, "int8_on_amx", lambda amx=amx: amx, raising=False)
        for vendor, int8 in (("GenuineIntel", 128), ("AuthenticAMD", 4), ("", 4)):
            machine = dataclasses.replace(real, cpu=dataclasses.replace(real.cpu, vendor=vendor))
            monkeypatch.setattr(hardware, "detect", lambda m=machine: m)
            monkeypatch.setattr(native, "_ROWS", {})
            expected = 128 if avx2 else 8192 if amx else int8
            assert native.default_rows(int8=True) == expected, (vendor, amx)
            assert native.default_rows() == 128


def test_int8_self_attention_joins_its_products_exactly():
    """Rows of int8 weights keep their own scales: the joined q|k|v gives the separate
    products' bits."""
    model = quantize(tiny())
    attn = model.decoder.layers[0].self_attn
    fused = fused_qkv(attn)
    assert isinstance(fused, QuantizedLinear)
    h = torch.randn(3, 1, attn.q_proj.in_features)
    with torch.no_grad():
        joined = fused(h)
        assert torch.equal(joined, torch.cat([attn.q_proj(h), attn.kv_proj(h)], -1))


@pytest.mark.parametrize("overrides", NATIVE[:2] + [
    {"ffn": "silu"}, {"positional": "t5-bias"},
    {"ffn": "geglu", "norm": "rmsnorm", "norm_placement": "pre"}],
    ids=lambda o: ",".join(o) or "base")
def test_int8_models_decode_through_the_native_step(overrides, monkeypatch):
    """The C++ step runs int8 layers (their packed int8 weights, a gated network's two
    input products joined) and gives the Python step's logits, whose products are the
    same int8 kernel, up to fp32 rounding. (Not all of T5's parts at once in this
    sharpened tiny model: with its unscaled scores, the fp32 rounding of one step moves
    an activation across an int8 rounding boundary two steps later, 0.06 in a logit.)"""
    monkeypatch.setattr(QuantizedLinear, "native_rows", 16)
    (native_logits, python), ran = _python_and_native_steps(quantize(tiny(**overrides)), 3)
    assert ran == [True, False]
    torch.testing.assert_close(native_logits, python, rtol=1e-5, atol=1e-5)
    assert torch.equal(native_logits.argmax(-1), python.argmax(-1))


@pytest.mark.skipif(not hardware.detect_cpu().vnni,
                    reason="without VNNI the tests above run AVX2's products already")
def test_avx2s_products_keep_the_formula_with_7_bit_rows():
    """Told to dispatch no further than AVX2, the product takes AVX2's int16 pair sums and
    rounds x to 7 bits (so that they cannot saturate): the tests above, in such a process."""
    import subprocess
    import sys

    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         __file__, "-k", "dynamic_quantization_formula or does_not_depend or few_rows"],
        capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1]


AMX_BITS = """
import sys, torch
from zoo import native
assert native.available()
g = torch.Generator().manual_seed(0)
out = [torch.ops.zoo.int8_isa()]
for rows in (8, 16, 20, 33, 64):
    for n_out, n_in in ((1152, 384), (70, 128), (37, 64)):
        w = torch.randint(-127, 128, (n_out, n_in), generator=g, dtype=torch.int8)
        packed = torch.ops.zoo.pack_int8_weight(w, torch.rand(n_out, generator=g) / 100)
        x = torch.randn(rows, n_in, generator=g) * 3
        out.append(torch.ops.zoo.packed_linear(x, packed, torch.randn(n_out, generator=g), n_out))
torch.save(out, sys.argv[1])
"""


def test_amxs_tiles_give_the_vector_kernels_bits(tmp_path):
    """On AMX's tiles the int32 sums are the same integers and the scaling after them the
    512-bit kernel's: the same bits as a process told to leave the tiles alone (oneDNN's cap,
    as zoo bench --isa no-amx sets it), which runs the vector kernel."""
    import subprocess
    import sys

    if not torch.ops.zoo.int8_on_amx():
        pytest.skip("no AMX tiles for zoo's int8 products here")
    results = {}
    for name, cap in (("amx", {}), ("vnni", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_FP16"})):
        path = tmp_path / f"{name}.pt"
        done = subprocess.run([sys.executable, "-c", AMX_BITS, str(path)], capture_output=True,
                              text=True, env={**os.environ, **cap}, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        results[name] = torch.load(path)
    assert results["amx"][0].startswith("AMX") and results["vnni"][0] == "AVX-512 VNNI"
    for a, b in zip(results["amx"][1:], results["vnni"][1:]):
        assert torch.equal(a, b)
