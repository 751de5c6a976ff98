"""Inference where users deploy: int8 (zoo.quantize) against the fp32 model and the
quantization formula; exports that CTranslate2 and ONNX Runtime run, against zoo's own
tokens, log-probabilities and logits on the same inputs."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo import hardware
from zoo.errors import ArtifactError, RecipeError
from zoo.export import ExportError, default_vocabulary, to_ctranslate2, to_onnx
from zoo.plugin_api import Format, refuse_options
from zoo.tied import weights_to_save
from zoo.quantization import QuantizedLinear, is_quantized, quantize

from .test_cli import run_zoo

BOS, EOS = 1, 2


def sharp(recipe="transformer-tiny", **kw):
    """A built model whose weights are scaled up: sharper, less uniform outputs than at
    initialisation (so that tokens are not all ties)."""
    torch.manual_seed(0)
    model = zoo.build(recipe, dropout=0.0, **kw).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    return model


# -- int8 -------------------------------------------------------------------------------------------
def test_quantized_weight_is_the_per_row_int8_formula():
    torch.manual_seed(0)
    lin = nn.Linear(48, 20)
    with torch.no_grad():
        lin.weight[3] = 0.0  # an all-zero row: scale 1, not a division by zero
    q = QuantizedLinear.from_linear(lin)
    w = lin.weight.detach()
    for row in range(20):
        top = max(abs(float(x)) for x in w[row])
        scale = top / 127 if top > 0 else 1.0
        assert q.weight_scale[row].item() == pytest.approx(scale, rel=1e-6)
        expected = [max(-127, min(127, round(float(x) / scale))) for x in w[row]]
        assert q.weight_int8[row].tolist() == expected
    # dequantized, each weight is within half a step of the original
    assert (q.dequantized_weight() - w).abs().le(q.weight_scale[:, None] / 2 + 1e-7).all()
    assert torch.equal(q.bias, lin.bias.detach())


def test_quantized_linear_is_close_to_fp32_and_its_dequantized_product():
    torch.manual_seed(0)
    lin = nn.Linear(256, 64)
    q = QuantizedLinear.from_linear(lin)
    x = torch.randn(3, 5, 256)
    with torch.no_grad():
        ours, fp32 = q(x), lin(x)
        dequantized = F.linear(x, q.dequantized_weight(), q.bias)
    assert ours.shape == (3, 5, 64)
    # the only further error is the activations' 7-bit rounding: far under the outputs' size
    assert (ours - dequantized).norm() / dequantized.norm() < 0.02
    assert (ours - fp32).norm() / fp32.norm() < 0.03


def test_build_quantize_int8_replaces_every_linear_layer():
    fp32 = sharp(vocab_size=30)
    torch.manual_seed(0)
    model = zoo.build("transformer-tiny", vocab_size=30, dropout=0.0, quantize="int8")
    assert is_quantized(model) and not model.training
    assert not [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert isinstance(model.lm_head, QuantizedLinear)
    assert model.tgt_embed.weight.dtype == torch.float32  # embeddings stay fp32
    q = quantize(sharp(vocab_size=30))
    src, tgt = torch.randint(3, 30, (4, 9)), torch.randint(3, 30, (4, 6))
    with torch.no_grad():
        a, b = q(src, tgt), fp32(src, tgt)
    assert (a - b).norm() / b.norm() < 0.05
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


def test_int8_vit_keeps_the_fp32_predictions():
    torch.manual_seed(0)
    fp32 = zoo.build("vit-tiny-patch4-28").eval()
    torch.manual_seed(0)
    q = zoo.build("vit-tiny-patch4-28", quantize="int8")  # the same weights, quantized
    x = torch.randn(16, 1, 28, 28)
    with torch.no_grad():
        a, b = q(x), fp32(x)
    assert (a - b).norm() / b.norm() < 0.05
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9


def test_quantize_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(RecipeError, match=r"quantize='int3'.*'int8', 'int4'"):
        zoo.build("transformer-tiny", quantize="int3")
    with pytest.raises(RecipeError, match="runs on the CPU"):
        zoo.build("transformer-tiny", quantize="int8", device="cuda")
    model = zoo.build("transformer-tiny", quantize="int8")
    with pytest.raises(ArtifactError, match="quantize after loading"):
        zoo.save_pretrained(model, tmp_path / "q")
    assert not (tmp_path / "q").exists()


def test_a_saved_model_loads_quantized(tmp_path):
    model = sharp(vocab_size=30)
    zoo.save_pretrained(model, tmp_path / "m")
    q = zoo.build(f"local-dir:{tmp_path / 'm'}", quantize="int8")
    ref = quantize(model)
    src, tgt = torch.randint(3, 30, (2, 5)), torch.randint(3, 30, (2, 4))
    with torch.no_grad():
        assert torch.equal(q(src, tgt), ref(src, tgt))


# -- CTranslate2 ------------------------------------------------------------------------------------

VARIANTS = {
    "the paper's": {},
    "pre-norm, rmsnorm, swiglu, learned": {"norm_placement": "pre", "norm": "rmsnorm",
                                           "ffn": "swiglu", "positional": "learned"},
    "gelu, no biases, unscaled embeddings": {"ffn": "gelu", "scale_embeddings": False,
                                             "attention.bias": False},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ctranslate2_export_gives_zoos_tokens_and_log_probabilities(tmp_path, variant):
    ctranslate2 = pytest.importorskip("ctranslate2")
    overrides = {k: v for k, v in VARIANTS[variant].items() if "." not in k}
    dotted = {k: v for k, v in VARIANTS[variant].items() if "." in k}
    model = sharp(vocab_size=40, **overrides, **dotted)
    to_ctranslate2(model, tmp_path / "ct2")
    info = json.loads((tmp_path / "ct2" / "zoo-export.json").read_text())
    assert info["format"] == "ctranslate2" and info["recipe"]["name"] == "transformer-tiny"
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    vocab = default_vocabulary(40)
    torch.manual_seed(1)
    src = torch.randint(4, 40, (4, 7))
    src[1, 4:] = 0  # a shorter sentence: CTranslate2 pads it itself
    sources = [[vocab[i] for i in row if i != 0] for row in src.tolist()]
    ours = model.generate(src, max_new_tokens=10, start_id=BOS, eos_ids=(EOS,))
    theirs = translator.translate_batch(sources, beam_size=1, max_decoding_length=10)
    for row, result in zip(ours.tolist(), theirs):
        ids = row[: row.index(EOS)] if EOS in row else row
        assert result.hypotheses[0] == [vocab[i] for i in ids]
    # every token's log-probability of a given target, teacher-forced
    tgt = torch.randint(4, 40, (4, 6))
    with torch.no_grad():
        logp = model(src, torch.cat([torch.full((4, 1), BOS), tgt], 1)).log_softmax(-1)
    expected = logp.gather(-1, torch.cat([tgt, torch.full((4, 1), EOS)], 1)[..., None])[..., 0]
    scored = translator.score_batch(sources, [[vocab[i] for i in row] for row in tgt.tolist()])
    got = torch.tensor([s.log_probs for s in scored])
    torch.testing.assert_close(got, expected, atol=2e-4, rtol=1e-4)


@pytest.mark.skipif(not hardware.detect().cpu.vnni, reason="CTranslate2 4.8.5's int8 on an AVX2 "
                    "CPU without VNNI measured 14% mean log-prob error on this model (1% for "
                    "zoo's int8 on the same CPU; 16-bit saturation of u8s8 products is the "
                    "likely cause, issue 26); the 5% bound held on AVX-512 with VNNI")
def test_ctranslate2_int8_export_keeps_most_tokens(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    model = sharp(vocab_size=40)
    to_ctranslate2(model, tmp_path / "ct2", quantization="int8")
    assert json.loads((tmp_path / "ct2" / "zoo-export.json").read_text())["quantization"] == "int8"
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), intra_threads=1)
    vocab = default_vocabulary(40)
    src = torch.randint(4, 40, (8, 7))
    tgt = torch.randint(4, 40, (8, 6))
    with torch.no_grad():
        logp = model(src, torch.cat([torch.full((8, 1), BOS), tgt], 1)).log_softmax(-1)
    expected = logp.gather(-1, torch.cat([tgt, torch.full((8, 1), EOS)], 1)[..., None])[..., 0]
    scored = translator.score_batch([[vocab[i] for i in r] for r in src.tolist()],
                                    [[vocab[i] for i in r] for r in tgt.tolist()])
    got = torch.tensor([s.log_probs for s in scored])
    assert (got - expected).abs().mean() < 0.05 * expected.abs().mean()


@pytest.mark.parametrize("recipe, overrides, named", [
    ("transformer-tiny", {"positional": "rope"}, "positional 'rope'"),
    ("transformer-tiny", {"attention": "performer"}, "attention 'performer'"),
    ("transformer-tiny", {"final_norm": True}, "final_norm with post-norm"),
    ("transformer-tiny", {"attention.scale": 1.0}, "scale 1.0"),
    ("vit-tiny-patch4-28", {}, "architecture 'vit'"),
])
def test_ctranslate2_export_refuses_what_it_cannot_express(tmp_path, recipe, overrides, named):
    pytest.importorskip("ctranslate2")
    model = zoo.build(recipe, **overrides)
    with pytest.raises(ExportError, match=named.replace("(", r"\(")):
        to_ctranslate2(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_ctranslate2_export_checks_the_vocabulary_and_the_folder(tmp_path):
    pytest.importorskip("ctranslate2")
    model = zoo.build("transformer-tiny", vocab_size=20)
    with pytest.raises(ExportError, match="has 19 tokens; the model has 20"):
        to_ctranslate2(model, tmp_path / "a", vocabulary=default_vocabulary(19))
    with pytest.raises(ExportError, match="names a token twice"):
        to_ctranslate2(model, tmp_path / "a", vocabulary=["x"] * 20)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "mine.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not empty"):
        to_ctranslate2(model, tmp_path / "full")
    assert (tmp_path / "full" / "mine.txt").read_text() == "keep me"
    with pytest.raises(ExportError, match="fp32 model"):
        to_ctranslate2(quantize(model), tmp_path / "b")


# -- ONNX -------------------------------------------------------------------------------------------
def test_onnx_vit_gives_zoos_logits_at_another_batch_size(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = sharp("vit-tiny-patch4-28")
    to_onnx(model, tmp_path / "onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    x = torch.randn(5, 1, 28, 28)  # exported with a batch of 2
    (logits,) = session.run(None, {"pixel_values": x.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(logits), model(x), atol=1e-4, rtol=1e-4)


def test_onnx_seq2seq_encoder_and_decoder_give_zoos_logits(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = sharp(vocab_size=40)
    to_onnx(model, tmp_path / "onnx")
    encoder = ort.InferenceSession(str(tmp_path / "onnx" / "encoder.onnx"))
    decoder = ort.InferenceSession(str(tmp_path / "onnx" / "decoder.onnx"))
    src = torch.randint(4, 40, (3, 11))  # exported with (2, 7) sources, (2, 5) targets
    src[2, 8:] = 0
    tgt = torch.randint(4, 40, (3, 4))
    (memory,) = encoder.run(None, {"src": src.numpy()})
    (logits,) = decoder.run(None, {"tgt": tgt.numpy(), "memory": memory, "src": src.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(logits), model(src, tgt), atol=1e-4,
                                   rtol=1e-4)


def test_zoo_export_command(tmp_path):
    pytest.importorskip("ctranslate2")
    done = run_zoo("export", "transformer-tiny", "--format", "ctranslate2", "--out",
                   str(tmp_path / "ct2"), "--quantization", "int8")
    assert done.returncode == 0, done.stderr
    assert {"model.bin", "config.json", "zoo-export.json"} <= {
        p.name for p in (tmp_path / "ct2").iterdir()}
    again = run_zoo("export", "transformer-tiny", "--format", "ctranslate2", "--out",
                    str(tmp_path / "ct2"))
    assert again.returncode == 2 and "not empty" in again.stderr and "--force" in again.stderr
    refused = run_zoo("export", "transformer-tiny", "--set", "positional=alibi", "--format",
                      "ctranslate2", "--out", str(tmp_path / "alibi"))
    assert refused.returncode == 2 and "positional 'alibi'" in refused.stderr
    assert "Traceback" not in refused.stderr
    wrong = run_zoo("export", "transformer-tiny", "--format", "onnx", "--quantization", "int8",
                    "--out", str(tmp_path / "onnx"))
    assert wrong.returncode == 2 and "--format onnx takes no option quantization" in wrong.stderr
    unknown = run_zoo("export", "transformer-tiny", "--format", "tflite", "--out",
                      str(tmp_path / "x"))
    assert unknown.returncode != 0 and "ctranslate2, onnx, transformers" in unknown.stderr
    assert not (tmp_path / "onnx").exists() and not (tmp_path / "x").exists()


class NumpyWriter(Format):
    """A plugin's export target: every weight in one .npz archive (numpy's own format)."""

    family = "npz"

    def write(self, model, folder, *, export, vocabulary=None, tokenizer=None, bos_id=None,
              eos_id=None, **options):
        import numpy as np

        refuse_options(options, "--format npz")
        state = {k: v.numpy() for k, v in weights_to_save(model).items()}
        np.savez(folder / "weights.npz", **state)
        return {"load": "numpy.load(FILE)"}


def test_an_export_target_is_a_format_a_plugin_adds(tmp_path, fresh_registry):
    # the core keeps the lookup, the atomic write and the manifest; the target is a plugin's
    import types

    import numpy as np

    from zoo.export import export, formats

    def hook(register):
        register("npz", NumpyWriter, capabilities={"writes": "npz"})

    assert "npz" not in formats()
    zoo.register_plugin(types.SimpleNamespace(register_formats=zoo.hookimpl(hook)), name="np")
    assert formats() == ["ctranslate2", "npz", "onnx", "transformers"]
    model = sharp()
    export(model, tmp_path / "out", "npz")
    saved = np.load(tmp_path / "out" / "weights.npz")
    expected = weights_to_save(model)
    assert set(saved.files) == set(expected)
    assert all(torch.equal(torch.from_numpy(saved[k]), v) for k, v in expected.items())
    manifest = json.loads((tmp_path / "out" / "zoo-export.json").read_text())
    assert manifest["format"] == "npz" and manifest["load"] == "numpy.load(FILE)"
    with pytest.raises(ExportError, match="--format npz takes no option opset"):
        export(model, tmp_path / "again", "npz", opset=17)
    assert not (tmp_path / "again").exists()  # nothing half-written


def test_the_cores_export_knows_no_plugins_layout():
    # the architecture review's figure: zoo/export.py names no component, slot, layer or
    # architecture of a plugin (they live in the format plugins that write each target)
    from pathlib import Path

    import re

    source = (Path(zoo.__file__).parent / "export.py").read_text()
    names = {c.name for family in ("attention", "positional", "norm", "ffn", "block",
                                   "architecture") for c in zoo.list_components(family)}
    layout = {"norm1", "norm2", "norm3", "q_proj", "kv_proj", "fc1", "lm_head", "encoder",
              "decoder", "ctranslate2.specs", "torch.onnx"}
    quoted = set(re.findall(r'"([\w.-]+)"', source))
    assert not quoted & (names | layout), sorted(quoted & (names | layout))
