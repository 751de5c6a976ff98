"""GPU paths: the same models on CUDA give the CPU's results; bf16 and the
sdpa kernel (FlashAttention where the card has it) agree with eager. Marked
``gpu``; skipped without a CUDA device."""

from __future__ import annotations

import pytest
import torch

import zoo

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["transformer-tiny", "vit-tiny-patch4-28"])
def test_cuda_equals_cpu(name):
    cpu = zoo.build(name, dropout=0.0).eval()
    gpu = zoo.build(name, dropout=0.0, device="cuda").eval()
    gpu.load_state_dict(cpu.state_dict())
    if name.startswith("vit"):
        inputs = (torch.randn(4, 1, 28, 28),)
    else:
        inputs = (torch.randint(1, 1000, (4, 12)), torch.randint(1, 1000, (4, 10)))
    with torch.no_grad():
        expected = cpu(*inputs)
        got = gpu(*(t.cuda() for t in inputs)).cpu()
    torch.testing.assert_close(got, expected, atol=1e-3, rtol=1e-3)


def test_bf16_sdpa_agrees_with_eager_on_cuda():
    a = zoo.build("transformer-base", kernel="sdpa", dropout=0.0, device="cuda",
                  dtype=torch.bfloat16).eval()
    b = zoo.build("transformer-base", kernel="eager", dropout=0.0, device="cuda",
                  dtype=torch.bfloat16).eval()
    b.load_state_dict(a.state_dict())
    src = torch.randint(1, 37000, (8, 64), device="cuda")
    tgt = torch.randint(1, 37000, (8, 64), device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(a(src, tgt).float(), b(src, tgt).float(), atol=0.1, rtol=0.05)


@pytest.mark.parametrize("name", [c.name for c in zoo.list_components("attention")])
def test_every_attention_on_cuda_equals_cpu(name):
    settings = {"bigbird": {"block_size": 4}, "sliding-window": {"window": 8}}.get(name, {})
    kw = dict(attention={"name": name, "settings": settings}, positional="rope", dropout=0.0)
    cpu = zoo.build("transformer-tiny", **kw).eval()
    gpu = zoo.build("transformer-tiny", device="cuda", **kw).eval()
    gpu.load_state_dict(cpu.state_dict())
    src, tgt = torch.randint(1, 1000, (2, 40)), torch.randint(1, 1000, (2, 33))
    with torch.no_grad():
        torch.testing.assert_close(gpu(src.cuda(), tgt.cuda()).cpu(), cpu(src, tgt),
                                   atol=1e-3, rtol=1e-3)


def test_xformers_and_auto_kernels_agree_with_sdpa_in_bf16():
    pytest.importorskip("xformers")
    ref = zoo.build("transformer-tiny", kernel="sdpa", positional="alibi", dropout=0.0,
                    device="cuda", dtype=torch.bfloat16).eval()
    src = torch.randint(1, 1000, (4, 48), device="cuda")
    tgt = torch.randint(1, 1000, (4, 40), device="cuda")
    for kernel in ("xformers", "auto"):
        other = zoo.build("transformer-tiny", kernel=kernel, positional="alibi", dropout=0.0,
                          device="cuda", dtype=torch.bfloat16).eval()
        other.load_state_dict(ref.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(other(src, tgt).float(), ref(src, tgt).float(),
                                       atol=0.05, rtol=0.05)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_training_on_cuda_in_half_precision(tmp_path, precision):
    overrides = {"model.d_model": 64, "model.n_heads": 4, "model.encoder_layers": 2,
                 "model.decoder_layers": 2, "model.d_ff": 128, "task.num_samples": 2048,
                 "train.steps": 120, "train.log_every": 10, "train.precision": precision,
                 "train.target": None}
    result = zoo.train("sort", overrides=overrides, run_dir=tmp_path / precision,
                       device="cuda", progress=False)
    import json

    losses = [json.loads(line)["loss"] for line in
              (result.run_dir / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["split"] == "train"]
    assert losses[-1] < 0.5 * losses[0]
    assert result.metrics["token_accuracy"] > 0.5


def test_fast_paths_on_cuda_are_pytorchs_own():
    from zoo.ops import Linear, dropout

    layer = Linear(32, 16).cuda()
    x = torch.randn(4, 32, device="cuda")
    with torch.no_grad():
        assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    torch.manual_seed(0)
    a = dropout(x, 0.1)
    torch.manual_seed(0)
    assert torch.equal(a, torch.nn.functional.dropout(x, 0.1))


def test_zoo_bench_train_and_decode_on_cuda(tmp_path):
    import json

    from .conftest import run_zoo

    for bench, extra in (("train", ["--dtypes", "bf16"]), ("decode", ["--new-tokens", "4"])):
        out = tmp_path / f"{bench}.json"
        done = run_zoo("bench", bench, "--device", "cuda", "--batch", "2", "--length", "16",
                       "--vocab", "128", "--repeats", "1", "--wait", "0", "--impls",
                       "zoo,marian", *extra, "--json", str(out))
        assert done.returncode == 0, done.stderr
        rows = json.loads(out.read_text())
        assert {r["impl"] for r in rows} == {"zoo", "marian"}
        assert all(r["device"] == "cuda" and r["throughput"] > 0 for r in rows)
