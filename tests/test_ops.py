"""The fast paths change speed, not results: zoo's dropout is a Bernoulli mask with the
right rate and gradient, the packed linear layer equals F.linear, the attention
kernel's CPU shortcuts equal PyTorch's SDPA, and the growing KV cache equals
concatenation."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo import derived
from zoo.cache import DecoderCache, KVCache
from zoo.ops import Dropout, Linear, dropout

sdpa_attention = zoo.get_component("kernel", "sdpa").load()


# -- dropout -------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_dropout_keeps_the_right_fraction_and_the_mean(p):
    x = torch.ones(400_000)
    out = dropout(x, p)
    kept = (out != 0).float().mean().item()
    n, q = x.numel(), 1 - round(p * 2**15) / 2**15
    assert abs(kept - q) < 5 * math.sqrt(q * (1 - q) / n)  # five binomial sigmas
    assert torch.allclose(out[out != 0], torch.full_like(out[out != 0], 1 / q))
    assert abs(out.mean().item() - 1.0) < 0.01


def test_dropout_gradient_is_the_mask_times_the_scale():
    x = torch.randn(64, 33, requires_grad=True)
    out = dropout(x, 0.2)
    out.sum().backward()
    expected = (out != 0).float() * (1 / (1 - round(0.2 * 2**15) / 2**15))
    assert torch.allclose(x.grad, expected)
    torch.testing.assert_close(out, x.detach() * expected)


def test_dropout_follows_torchs_seed_and_is_off_in_eval():
    x = torch.randn(1000)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    assert torch.equal(a, b) and not torch.equal(a, dropout(x, 0.1))
    layer = Dropout(0.1).eval()
    assert layer(x) is x
    assert torch.equal(dropout(x, 0.0), x)


def test_masks_are_independent_across_positions():
    x = torch.ones(8, 100_000)
    keep = dropout(x, 0.5) != 0
    # neighbouring elements (drawn from the same 64-bit word) are uncorrelated
    corr = torch.corrcoef(torch.stack([keep[:, :-1].flatten().float(),
                                       keep[:, 1:].flatten().float()]))[0, 1]
    assert abs(corr.item()) < 0.01


# -- linear ---------------------------------------------------------------------------------------
def test_packed_linear_equals_f_linear_without_gradients():
    torch.manual_seed(0)
    layer = Linear(96, 200)
    for rows in (1, 7, 64, 300):
        x = torch.randn(rows, 96)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                       rtol=1e-5, atol=1e-5)
    x3 = torch.randn(2, 5, 96)
    with torch.no_grad():
        assert layer(x3).shape == (2, 5, 200)


def test_with_gradients_it_is_exactly_nn_linear():
    layer = Linear(32, 16)
    x = torch.randn(4, 32, requires_grad=True)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert layer.state_dict().keys() == torch.nn.Linear(32, 16).state_dict().keys()


def test_compiled_inference_traces_f_linear_in_one_graph():
    """Inside torch.compile the layer is F.linear (for more rows than zoo's native product
    takes, test_native.py): fullgraph=True raises on a graph break, which the packing
    (an opaque oneDNN reorder) was."""
    torch.manual_seed(0)
    layer = torch.nn.Sequential(Linear(16, 32), torch.nn.ReLU(), Linear(32, 8)).eval()
    x = torch.randn(Linear(1, 1).native_row_limit() + 4, 16)
    with torch.no_grad():
        out = torch.compile(layer, backend="eager", fullgraph=True)(x)
        expected = F.linear(torch.relu(F.linear(x, layer[0].weight, layer[0].bias)),
                            layer[2].weight, layer[2].bias)
    torch.testing.assert_close(out, expected)
    assert "_packed_cache" not in derived.kept(layer[0])  # nothing was packed while tracing


def test_a_changed_weight_is_packed_again():
    layer = Linear(16, 8)
    x = torch.randn(Linear(1, 1).native_row_limit() + 4, 16)  # more rows than the native product takes
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2)
        after = layer(x)
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias), rtol=1e-5,
                               atol=1e-5)
    assert not torch.allclose(before, after)
    layer.load_state_dict({"weight": torch.zeros(8, 16), "bias": torch.ones(8)})
    with torch.no_grad():
        assert torch.equal(layer(x), torch.ones(len(x), 8))


def test_copies_and_pickles_leave_the_packed_weight_behind():
    model = zoo.build("transformer-tiny").eval()
    x = torch.randint(4, 100, (2, 5))
    with torch.no_grad():
        y = model(x, x)
        twin = copy.deepcopy(model)
        again = pickle.loads(pickle.dumps(model))
        assert torch.equal(twin(x, x), y) and torch.equal(again(x, x), y)


def test_bf16_autocast_inference_matches_autocast_linear():
    layer = Linear(64, 48)
    x = torch.randn(10, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours = layer(x)
        ref = F.linear(x, layer.weight, layer.bias)
    assert ours.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(ours.float(), ref.float(), rtol=2e-2, atol=2e-2)


def test_a_bf16_layer_with_fixed_weights_multiplies_by_its_weight_packed_once_in_bf16():
    """A model converted to bf16 (its weights bf16) multiplies, inside a block that fixes
    its weights, through oneDNN's bf16 product with the weight packed once, where oneDNN
    packs bf16; elsewhere through F.linear. Either gives F.linear's bf16 product within
    bf16's rounding, and a weight written in the block between calls is seen."""
    from zoo.ops import onednn_bf16

    layer = Linear(64, 48).to(torch.bfloat16).eval()
    x = torch.randn(3, 64).bfloat16()
    with torch.no_grad(), derived.fixed_weights(layer):
        ours = layer(x)
        assert ("_packed_cache" in derived.kept(layer)) == onednn_bf16()
        ref = F.linear(x.float(), layer.weight.float(), layer.bias.float())
        assert ours.dtype == torch.bfloat16
        torch.testing.assert_close(ours.float(), ref, rtol=1.6e-2, atol=1e-2)
    with torch.no_grad():
        layer.weight.mul_(-1)
        torch.testing.assert_close(layer(x).float(), -ref + 2 * layer.bias.float(),
                                   rtol=1.6e-2, atol=1e-2)


# -- the sdpa kernel's CPU shortcuts --------------------------------------------------------------
@pytest.mark.parametrize("lq", [1, 3, 17])
def test_sdpa_kernel_equals_pytorchs_with_masks(lq):
    q, k, v = torch.randn(3, 4, lq, 16), torch.randn(3, 4, 20, 16), torch.randn(3, 4, 20, 16)
    mask = torch.rand(3, 1, lq, 20) > 0.3
    mask[..., 0] = True
    with torch.no_grad():
        torch.testing.assert_close(sdpa_attention(q, k, v, attn_mask=mask),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                   rtol=1e-5, atol=1e-5)


def test_sdpa_kernel_in_bf16_is_the_fp32_attention_rounded():
    q, k, v = (torch.randn(2, 4, 9, 16, requires_grad=True) for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sdpa_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), is_causal=True)
    assert out.dtype == torch.bfloat16
    ref = F.scaled_dot_product_attention(q.bfloat16().float(), k.bfloat16().float(),
                                         v.bfloat16().float(), is_causal=True)
    torch.testing.assert_close(out.float(), ref.bfloat16().float())
    out.float().sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.float32


@pytest.mark.parametrize("amx", [True, False], ids=["tiles", "no-tiles"])
def test_sdpa_kernel_in_bf16_inference_is_pytorchs_bf16_attention_on_amx(amx, monkeypatch):
    """Inference in bf16 on a CPU with AMX tiles runs PyTorch's bf16 kernel as it is
    (its additive mask cast to bf16); elsewhere the fp32 attention rounded. Both within
    bf16's rounding of the fp32 attention."""
    import dataclasses

    from zoo.plugins.kernels import sdpa

    machine = sdpa.detect_hardware()
    cpu = dataclasses.replace(machine.cpu, amx=amx)
    monkeypatch.setattr(sdpa, "detect_hardware",
                        lambda: dataclasses.replace(machine, cpu=cpu))
    q, k, v = (torch.randn(2, 4, 9, 16) for _ in range(3))
    bias = torch.randn(1, 4, 9, 9)  # a float mask: a relative bias, say
    with torch.no_grad():
        out = sdpa_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), attn_mask=bias)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        tiles = F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(),
                                               attn_mask=bias.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=3e-2, atol=3e-2)
    if amx:
        assert torch.equal(out, tiles)


# -- the KV cache ---------------------------------------------------------------------------------
def test_growing_cache_equals_concatenation_and_reorders_rows():
    cache, ks, vs = KVCache(), [], []
    for step in range(40):
        k, v = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        ks.append(k)
        vs.append(v)
        got_k, got_v = cache.append(k, v)
        assert torch.equal(got_k, torch.cat(ks, 2)) and torch.equal(got_v, torch.cat(vs, 2))
        if step in (5, 20):
            index = torch.tensor([2, 2, 0])
            cache.reorder(index)
            ks, vs = [t.index_select(0, index) for t in ks], [t.index_select(0, index) for t in vs]
            assert torch.equal(cache.k, torch.cat(ks, 2))
    assert len(cache) == 40
    spread = torch.tensor([0, 0, 1, 1, 2, 2])
    cache.reorder(spread)  # more rows than before: beams made from sources
    assert torch.equal(cache.v, torch.cat(vs, 2).index_select(0, spread))


@pytest.mark.parametrize("index", [[0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 3, 4, 5, 6, 7],
                                   [0, 2, 1, 3, 4, 5, 6, 6], [7, 6, 5, 4, 3, 2, 1, 0],
                                   [3, 3, 3, 3, 3, 3, 3, 3]])
def test_reorder_copies_only_moved_rows_and_equals_a_gather(index):
    # a few rows moved (in place; sources read before any is written: rows 1 and 2 swap),
    # and most rows moved (the gather into a second buffer): the same as index_select
    cache = KVCache()
    k, v = torch.randn(8, 2, 5, 4), torch.randn(8, 2, 5, 4)
    cache.append(k, v)
    index = torch.tensor(index)
    cache.reorder(index)
    assert torch.equal(cache.k, k.index_select(0, index))
    assert torch.equal(cache.v, v.index_select(0, index))
    more_k, more_v = torch.randn(8, 2, 1, 4), torch.randn(8, 2, 1, 4)
    got_k, _ = cache.append(more_k, more_v)  # still appends after the in-place copy
    assert torch.equal(got_k, torch.cat([k.index_select(0, index), more_k], 2))


def test_spread_shares_fixed_contexts_and_a_full_reorder_ungroups_them():
    cache = DecoderCache(2)
    for layer in cache:
        layer["self"].append(torch.randn(2, 3, 1, 4), torch.randn(2, 3, 1, 4))
        layer["cross"].set(torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4))
    cross_k = cache[0]["cross"].k.clone()
    self_k = cache[1]["self"].k.clone()
    cache.spread(3)
    assert cache[0]["cross"].groups == 3 and cache[0]["cross"].k.shape[0] == 2
    assert torch.equal(cache[1]["self"].k, self_k.repeat_interleave(3, 0))
    cache.reorder(torch.tensor([2, 1, 0, 3, 3, 5]), within_groups=True)
    assert cache[0]["cross"].groups == 3  # beams move within their source: shared as is
    index = torch.tensor([5, 0, 3, 1, 2, 4])  # rows leave their source: one row each
    cache.reorder(index)
    assert cache[0]["cross"].groups == 1
    assert torch.equal(cache[0]["cross"].k, cross_k.repeat_interleave(3, 0).index_select(0, index))
