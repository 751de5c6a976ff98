"""int4 weights (zoo.quantization.Int4Linear, llama.cpp's q4_0): each group of 32 input
columns of a row rounded to 16 steps of one float16 scale, as llama.cpp's reference
quantizer writes them, and the input rounded to int8 in groups of 32 as its q8_0 rounds
it; zoo's native product of the packed groups gives the rounded input times the
dequantized weight by F.linear at one row (a decoding step) and at many (a prompt read);
zoo.quantize
keeps in fp32 what does not split into groups; zoo generate --dtype int4 decodes with it."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import RecipeError
from zoo.quantization import GROUP, Int4Linear, quantize, rounded_by_groups

from .test_native import needs_kernel


def _q4_0(w: torch.Tensor) -> torch.Tensor:
    """llama.cpp's quantize_row_q4_0_reference, row by row and block by block (ggml-quants.c:
    d = max / -8 where max is the value of largest magnitude, q = min(15, (x / d + 8.5))
    truncated), dequantized (q - 8) * d, d through float16."""
    out = torch.empty_like(w)
    for r in range(w.shape[0]):
        for b in range(0, w.shape[1], 32):
            x = w[r, b:b + 32].tolist()
            amax, mx = 0.0, 0.0
            for v in x:
                if abs(v) > amax:
                    amax, mx = abs(v), v
            d = mx / -8
            inv = 1.0 / d if d else 0.0
            d16 = float(torch.tensor(d, dtype=torch.float16))
            for j, v in enumerate(x):
                q = min(15, int(v * inv + 8.5))
                out[r, b + j] = (q - 8) * d16
    return out


def test_the_groups_are_llama_cpps_q4_0():
    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 5)
    q = Int4Linear.from_linear(linear)
    expected = _q4_0(linear.weight.detach())
    # the same steps; where x / d falls half-way, llama.cpp's + 8.5 truncation rounds up and
    # torch.round to even, so at most one step apart there, and equal nearly everywhere
    got = q.dequantized_weight()
    step = q.weight_scale.float().abs().repeat_interleave(GROUP, 1)
    assert ((got - expected).abs() <= step + 1e-7).all()
    assert (torch.isclose(got, expected, atol=1e-7)).float().mean() > 0.99
    assert q.weight_q4.dtype == torch.uint8 and q.weight_q4.shape == (5, 48)
    assert q.weight_scale.dtype == torch.float16 and q.weight_scale.shape == (5, 3)


def _q8_0(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's quantize_row_q8_0_ref, block by block (ggml-quants.c: d = max|x| / 127,
    q = roundf(x / d)), dequantized q d (d kept in fp32 here; llama.cpp stores it as fp16)."""
    out = torch.empty_like(x)
    for b in range(0, x.shape[0], 32):
        v = x[b:b + 32].tolist()
        d = max(abs(t) for t in v) / 127
        inv = 1.0 / d if d else 0.0
        for j, t in enumerate(v):
            out[b + j] = float(int(abs(t * inv) + 0.5) * (1 if t >= 0 else -1)) * d
    return out


def test_the_input_is_rounded_as_llama_cpps_q8_0():
    torch.manual_seed(1)
    x = torch.randn(256) * torch.linspace(0.01, 10, 256)
    x[:32] = 0.0  # a group of zeros stays zeros
    got, expected = rounded_by_groups(x[None])[0], _q8_0(x)
    # one step apart at most (a half-way value rounds to even here, away from zero there)
    step = x.reshape(-1, 32).abs().amax(-1).repeat_interleave(32) / 127
    assert ((got - expected).abs() <= step * 1.001 + 1e-7).all()
    assert torch.isclose(got, expected, rtol=1e-5, atol=1e-7).float().mean() > 0.99
    assert torch.equal(got[:32], torch.zeros(32))


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 6, 7, 20])
@pytest.mark.parametrize("shape", [(37, 64), (48, 96), (130, 32)])
def test_the_native_product_is_the_rounded_inputs_linear(rows, shape):
    torch.manual_seed(rows)
    out_features, in_features = shape
    q = Int4Linear.from_linear(torch.nn.Linear(in_features, out_features))
    x = torch.randn(rows, in_features)
    assert q.takes_native(rows)
    expected = torch.nn.functional.linear(rounded_by_groups(x), q.dequantized_weight(), q.bias)
    torch.testing.assert_close(q(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(q(x.view(1, rows, in_features)), expected[None], rtol=1e-5,
                               atol=1e-5)


def test_quantize_keeps_in_fp32_a_layer_that_does_not_split_into_groups():
    model = torch.nn.Sequential(torch.nn.Linear(64, 8), torch.nn.Linear(8, 64))
    quantize(model, "int4")
    assert isinstance(model[0], Int4Linear) and type(model[1]) is torch.nn.Linear
    with pytest.raises(RecipeError, match="multiple of 32"):
        Int4Linear(40, 8)
    with pytest.raises(RecipeError, match="int4"):
        quantize(torch.nn.Linear(64, 8), "int3")


def test_an_int4_model_is_not_saved_and_the_refusal_names_int4(tmp_path):
    from zoo.errors import ArtifactError

    model = zoo.build("llama-tiny", quantize="int4")
    with pytest.raises(ArtifactError, match="quantize='int4'"):
        zoo.save_pretrained(model, tmp_path / "q")
    assert not (tmp_path / "q").exists()


@needs_kernel
def test_an_int4_language_model_decodes_close_to_its_fp32_self():
    """llama-tiny (random weights) in int4 against fp32: logits in the same direction and
    the same first greedy tokens; a trained model's agreement is in docs/bench.md
    (benchmarks/int4_quality.py)."""
    import copy

    torch.manual_seed(0)
    fp32 = zoo.build("llama-tiny").eval()
    int4 = quantize(copy.deepcopy(fp32), "int4")
    assert any(isinstance(m, Int4Linear) for m in int4.modules())
    prompt = torch.randint(5, fp32.settings.vocab_size, (2, 6),
                           generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = fp32(prompt), int4(prompt)
    cosine = torch.nn.functional.cosine_similarity(a.flatten(0, 1), b.flatten(0, 1))
    assert cosine.min() > 0.95, cosine
    tokens = zoo.generate(fp32, prompt, max_new_tokens=3, do_sample=False)
    assert torch.equal(zoo.generate(int4, prompt, max_new_tokens=3, do_sample=False)[:, :1],
                       tokens[:, :1])


def test_zoo_generate_dtype_int4_continues_a_prompt(with_tokenizer):
    from .conftest import run_zoo

    folder = with_tokenizer[2]
    done = run_zoo("generate", f"local-dir:{folder}", "The cat", "--dtype", "int4",
                   "--max-new-tokens", "4")
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.startswith("The cat")
    done = run_zoo("generate", f"local-dir:{folder}", "The cat", "--dtype", "int4",
                   "--device", "cuda")
    assert done.returncode == 2 and "runs on the CPU" in done.stderr


def test_without_native_products_each_layer_falls_back_to_its_own_arithmetic(monkeypatch):
    """Without zoo's native products (another device, a build that failed) an int4 layer
    rounds its input in groups of 32 and an int8 layer does not: an int8 layer of 40
    inputs (no multiple of 32) gives its dequantized weight's F.linear of x itself."""
    import torch.nn.functional as F

    from zoo import quantization
    from zoo.quantization import QuantizedLinear

    monkeypatch.setattr(quantization.native, "available", lambda: False)
    monkeypatch.setattr(quantization, "_kernels_available", lambda: False)
    torch.manual_seed(0)
    x = torch.randn(3, 40)
    int8 = QuantizedLinear.from_linear(torch.nn.Linear(40, 7))
    torch.testing.assert_close(int8(x), F.linear(x, int8.dequantized_weight(), int8.bias))
    int4 = Int4Linear.from_linear(torch.nn.Linear(64, 7))
    y = torch.randn(3, 64)
    torch.testing.assert_close(int4(y), F.linear(rounded_by_groups(y), int4.dequantized_weight(),
                                                 int4.bias))
