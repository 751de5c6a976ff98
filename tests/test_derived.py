"""Copies derived from weights (zoo/derived.py) are never used once the weights they were made
from have changed, even by writes torch does not count: through ``.data``, a NumPy view, or
another tensor on the same storage. Each trial is checked against ``F.linear`` on the weight
as it is now, inside a block that fixes the weights (where the copies are kept), across two
blocks, and outside any block."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo import derived
from zoo.decoding import generate
from zoo.derived import fixed_weights
from zoo.ops import Linear
from zoo.plugins.architectures.static_decoder import fused_qkv
from zoo.quantization import QuantizedLinear

from .test_native import needs_kernel
from .test_static_decoder import both_paths, source, tiny


def _data_mul(w):
    w.data.mul_(3)


def _data_item(w):
    w.data[0] = 100


def _numpy(w):
    w.detach().numpy()[:] = 0.5


def _shared_storage(w):
    twin = torch.empty(0).set_(w.untyped_storage(), w.storage_offset(), w.shape, w.stride())
    twin[1, 2] = -7.0


def _one_bit(w):
    flat = w.detach().numpy().reshape(-1).view("int32")
    flat[-1] ^= 1  # the last value, one unit in its last place


def _swap(w):
    flat = w.detach().numpy().reshape(-1)
    flat[3], flat[4] = flat[4].copy(), flat[3].copy()


WRITES = [_data_mul, _data_item, _numpy, _shared_storage, _one_bit, _swap]
"""Writes to a weight that leave its version counter as it was (the issue's trials, and the
smallest changes a fingerprint must see)."""


def _reference(layer, x):
    return F.linear(x, layer.weight.detach(), layer.bias)


@pytest.mark.parametrize("rows", [1, 5, Linear(1, 1).native_row_limit() + 3])
@pytest.mark.parametrize("write", WRITES, ids=lambda f: f.__name__.strip("_"))
def test_a_write_torch_does_not_count_is_seen_by_the_next_product(write, rows):
    torch.manual_seed(0)
    layer = Linear(24, 40).eval()
    x = torch.randn(rows, 24)
    with torch.no_grad():
        with fixed_weights(layer):
            layer(x)  # packed copies made
        version = layer.weight._version
        write(layer.weight)
        assert layer.weight._version == version  # torch did not count it
        torch.testing.assert_close(layer(x), _reference(layer, x), rtol=1e-5, atol=1e-5)
        with fixed_weights(layer):  # a new block reads the weights again
            torch.testing.assert_close(layer(x), _reference(layer, x), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(layer(x), _reference(layer, x), rtol=1e-5, atol=1e-5)


INT8_WRITES = {
    "data_mul": lambda q: q.weight_int8.data.mul_(-1),
    "data_item": lambda q: q.weight_int8.data.__setitem__(0, 9),
    "numpy_scales": lambda q: _numpy(q.weight_scale),
    "one_bit_of_a_scale": lambda q: _one_bit(q.weight_scale),
    "swapped_scales": lambda q: _swap(q.weight_scale),
}


@pytest.mark.parametrize("kernel", ["native", "fbgemm"])
@pytest.mark.parametrize("write", INT8_WRITES.values(), ids=INT8_WRITES.keys())
def test_int8_layers_repack_after_such_a_write(write, kernel, monkeypatch):
    torch.manual_seed(0)
    monkeypatch.setattr(QuantizedLinear, "native_rows", 16 if kernel == "native" else 0)
    layer = QuantizedLinear.from_linear(torch.nn.Linear(24, 40)).eval()
    x = torch.randn(3, 24)
    with torch.no_grad():
        before = layer(x)
        write(layer)
        fresh = QuantizedLinear(24, 40)  # packed now, from copies of the written tensors
        fresh.weight_int8 = layer.weight_int8.clone()
        fresh.weight_scale, fresh.bias = layer.weight_scale.clone(), layer.bias.clone()
        reference = fresh(x)
        assert not torch.equal(reference, before)
        assert torch.equal(layer(x), reference)
        with fixed_weights(layer):
            assert torch.equal(layer(x), reference)


def test_the_joined_qkv_of_the_static_decoder_follows_a_data_write():
    model = tiny()
    attn = model.decoder.layers[0].self_attn
    src = source()
    before = generate(model, src, max_new_tokens=8)
    first = fused_qkv(attn)
    attn.kv_proj.weight.data.mul_(-2.0)  # unseen by the version counter
    assert fused_qkv(attn) is not first
    torch.testing.assert_close(fused_qkv(attn).weight[attn.inner_dim:], attn.kv_proj.weight)
    a, b = both_paths(model, lambda: generate(model, src, max_new_tokens=8))
    assert torch.equal(a, b) and not torch.equal(a, before)


def test_inside_one_block_a_copy_is_checked_once_and_outside_at_every_use(monkeypatch):
    layer = QuantizedLinear.from_linear(torch.nn.Linear(8, 8)).eval()
    layer.native_rows = 0  # FBGEMM's pack, which reads the bias too
    x = torch.randn(2, 8)
    reads = []
    real = derived.fingerprints
    monkeypatch.setattr(derived, "fingerprints", lambda ts: reads.extend(ts) or real(ts))
    with torch.no_grad():
        layer(x)  # made: its sources read once
        made = len(reads)
        assert made == 3  # int8 weight, scales, bias
        layer(x)
        assert len(reads) == 2 * made  # outside a block: read again
        with fixed_weights(layer):
            layer(x)
            layer(x)
            layer(x)
            with fixed_weights(layer):  # nested: nothing more
                layer(x)
        assert len(reads) == 3 * made  # once for the whole block
    assert derived.trusted(layer) is False


def test_a_block_trusts_only_its_own_models_layers_and_only_in_its_thread():
    import threading

    inside, outside = Linear(4, 4).eval(), Linear(4, 4).eval()
    seen = {}
    with fixed_weights(inside):
        assert derived.trusted(inside) and not derived.trusted(outside)
        thread = threading.Thread(target=lambda: seen.setdefault("other", derived.trusted(inside)))
        thread.start()
        thread.join()
    assert seen["other"] is False and not derived.trusted(inside)


def test_the_fingerprint_sees_every_single_change_and_ignores_copies(monkeypatch):
    torch.manual_seed(0)
    for tensor in (torch.randn(1000, 37), torch.randint(-128, 127, (999,), dtype=torch.int8),
                   torch.randn(5)[1:]):
        print_ = derived.fingerprint(tensor)
        assert derived.fingerprint(tensor.clone()) == print_
        for index in (0, tensor.numel() // 2, tensor.numel() - 1):
            changed = tensor.clone().reshape(-1)
            changed[index] += 1
            assert derived.fingerprint(changed.reshape(tensor.shape)) != print_
    monkeypatch.setattr(derived.native, "available", lambda: False)  # torch's fallback
    w = torch.randn(300, 7)
    fallback = derived.fingerprint(w)
    assert derived.fingerprint(w.clone()) == fallback
    for write in (_data_mul, _data_item, _one_bit):
        changed = w.clone()
        write(changed)
        assert derived.fingerprint(changed) != fallback


@needs_kernel
def test_the_native_fingerprint_is_the_digest_of_the_bytes():
    from zoo import native

    assert native.available()
    a = torch.arange(13, dtype=torch.int8)
    assert torch.ops.zoo.fingerprint(a[1:]) == torch.ops.zoo.fingerprint(a[1:].clone())
    big = torch.randn(1 << 20)  # several threads' blocks
    swapped = big.clone()
    swapped[[10, 600_000]] = swapped[[600_000, 10]]
    assert torch.ops.zoo.fingerprint(big) != torch.ops.zoo.fingerprint(swapped)
    with pytest.raises(RuntimeError, match="contiguous"):
        torch.ops.zoo.fingerprint(torch.randn(4, 4).t())
    many = [big, a, torch.randn(3, 5), torch.empty(0)]
    assert derived.fingerprints(many) == [torch.ops.zoo.fingerprint(t) for t in many]
    strided = torch.randn(6, 4).t()  # read through its contiguous copy, one by one
    assert derived.fingerprints([strided, a]) == [
        torch.ops.zoo.fingerprint(strided.contiguous()), torch.ops.zoo.fingerprint(a)]


def test_a_copy_checked_in_a_block_is_held_there_without_its_sources():
    layer = Linear(4, 4).eval()
    make = []
    derived.derived(layer, "copy", (layer.weight,), lambda: make.append(1) or "made")
    assert derived.held(layer, "copy") is None  # checked outside a block: not held
    with fixed_weights(layer):
        assert derived.held(layer, "copy") is None  # not yet checked in this block
        derived.derived(layer, "copy", (layer.weight,), lambda: make.append(1) or "made")
        assert derived.held(layer, "copy") == "made" and make == [1]
        assert derived.held(layer, "other") is None
    assert derived.held(layer, "copy") is None  # the block is closed
