"""Every registered component, parametrised over the registry, plus references:
attention vs torch.nn.MultiheadAttention, kernels vs the formula, norms vs
torch.nn, positions vs the paper's formula."""

from __future__ import annotations

import importlib.util
import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo

D, H = 32, 4


def names(family):
    return [c.name for c in zoo.list_components(family)]


def runnable_kernels():
    """Kernels that run on this machine's CPU; CUDA-only ones run as ``gpu`` tests."""
    out = []
    for c in zoo.list_components("kernel"):
        marks = [pytest.mark.gpu] if c.capabilities.needs_cuda else []
        out.append(pytest.param(c.name, marks=marks, id=c.name))
    return out


def kernel(name):
    return zoo.get_component("kernel", name).load()


def attention(name, kernel_name="sdpa", **context):
    return zoo.get_component("attention", name).build(
        None, d_model=D, n_heads=H, kernel=kernel(kernel_name), **context
    ).eval()


def reference_attention(q, k, v, allowed):
    """softmax(q k^T / sqrt(d) masked) v, written from eq. 1 of the paper."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


# -- kernels ------------------------------------------------------------------------------------
def _device_for(name):
    caps = zoo.get_component("kernel", name).capabilities
    if caps.requires_package and importlib.util.find_spec(caps.requires_package) is None:
        pytest.skip(f"{caps.requires_package} is not installed")
    return "cuda" if caps.needs_cuda else "cpu"


@pytest.mark.parametrize("name", runnable_kernels())
def test_kernel_matches_formula(name):
    device = _device_for(name)
    q = torch.randn(2, H, 6, 8, device=device)
    k, v = torch.randn(2, H, 9, 8, device=device), torch.randn(2, H, 9, 8, device=device)
    allowed = torch.rand(2, 1, 6, 9, device=device) > 0.3
    allowed[..., 0] = True
    out = kernel(name)(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(out, reference_attention(q, k, v, allowed), atol=1e-4, rtol=1e-4)
    causal = torch.ones(6, 6, dtype=torch.bool, device=device).tril()
    q6, k6, v6 = torch.randn(3, 2, H, 6, 8, device=device).unbind(0)
    torch.testing.assert_close(kernel(name)(q6, k6, v6, is_causal=True),
                               reference_attention(q6, k6, v6, causal), atol=1e-4, rtol=1e-4)
    # a float mask is added to the scores (ALiBi, T5 bias)
    bias = torch.randn(1, H, 6, 9, device=device)
    expected = ((q @ k.transpose(-2, -1)) / math.sqrt(8) + bias).softmax(-1) @ v
    torch.testing.assert_close(kernel(name)(q, k, v, attn_mask=bias), expected,
                               atol=1e-4, rtol=1e-4)


# -- vanilla attention against PyTorch's (the other mechanisms: tests/test_attention.py) ---------
def _mha_from(attn: nn.Module) -> nn.MultiheadAttention:
    mha = nn.MultiheadAttention(D, H, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.kv_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.kv_proj.bias]))
        mha.out_proj.weight.copy_(attn.out_proj.weight)
        mha.out_proj.bias.copy_(attn.out_proj.bias)
    return mha


@pytest.mark.parametrize("kern", ["eager", "sdpa", "auto"])
def test_vanilla_equals_torch_multihead_attention(kern):
    attn = attention("vanilla", kern)
    mha = _mha_from(attn)
    x, mem = torch.randn(3, 7, D), torch.randn(3, 5, D)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:] = True
    pad[2, 1:] = True
    # cross-attention with a key padding mask
    cross = attention("vanilla", kern, cross=True)
    cross.load_state_dict(attn.state_dict())
    expected, _ = mha(x, mem, mem, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(cross(x, mem, key_padding_mask=pad), expected, atol=1e-5, rtol=1e-5)
    # causal self-attention with padding
    causal = attention("vanilla", kern, causal=True)
    causal.load_state_dict(attn.state_dict())
    self_pad = torch.zeros(3, 7, dtype=torch.bool)
    self_pad[0, 5:] = True
    mask = nn.Transformer.generate_square_subsequent_mask(7)
    expected, _ = mha(x, x, x, attn_mask=mask, key_padding_mask=self_pad, need_weights=False)
    torch.testing.assert_close(causal(x, key_padding_mask=self_pad), expected, atol=1e-5, rtol=1e-5)
    expected, _ = mha(x, x, x, attn_mask=mask, need_weights=False, is_causal=True)
    torch.testing.assert_close(causal(x), expected, atol=1e-5, rtol=1e-5)


def test_eager_and_sdpa_agree_with_dropout_off_and_masks():
    a, b = attention("vanilla", "eager", causal=True), attention("vanilla", "sdpa", causal=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 9, D)
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 6:] = True
    allowed = torch.rand(9, 9) > 0.2
    allowed.fill_diagonal_(True)
    for kwargs in ({}, {"key_padding_mask": pad}, {"attn_mask": allowed}):
        torch.testing.assert_close(a(x, **kwargs), b(x, **kwargs), atol=1e-5, rtol=1e-5)


def test_cross_attention_has_its_own_weights():
    model = zoo.build("transformer-tiny")
    layer = model.decoder.layers[0]
    assert layer.self_attn.kv_proj.weight.data_ptr() != layer.cross_attn.kv_proj.weight.data_ptr()
    assert layer.self_attn.q_proj.weight.data_ptr() != layer.cross_attn.q_proj.weight.data_ptr()


def test_heads_must_divide_d_model():
    with pytest.raises(zoo.RecipeError, match="d_model 30 is not divisible by n_heads 4"):
        zoo.get_component("attention", "vanilla").build(
            None, d_model=30, n_heads=4, kernel=kernel("sdpa"))


# -- norms ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", names("norm"))
def test_norm_contract(name):
    norm = zoo.get_component("norm", name).build(None, dim=D)
    x = torch.randn(2, 5, D, requires_grad=True) * 3 + 1
    y = norm(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().sum().backward()
    assert all(p.grad is not None for p in norm.parameters())
    assert norm(x.detach().bfloat16()).dtype == torch.bfloat16
    # normalising is per position: one position's values do not affect another's
    x2 = x.detach().clone()
    x2[:, 0] *= 10
    torch.testing.assert_close(norm(x2)[:, 1:], norm(x.detach())[:, 1:])


def _perturbed(module):
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return module


@pytest.mark.parametrize("name,reference", [("layernorm", nn.LayerNorm), ("rmsnorm", nn.RMSNorm)])
def test_norm_equals_torch(name, reference):
    ours = _perturbed(zoo.get_component("norm", name).build({"eps": 1e-6}, dim=D))
    ref = reference(D, eps=1e-6)
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(4, 3, D) * 5 + 2
    torch.testing.assert_close(ours(x), ref(x))


# -- feed-forward ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", names("ffn"))
def test_ffn_is_position_wise(name):
    ffn = zoo.get_component("ffn", name).build(None, d_model=D, d_ff=64, dropout=0.0)
    x = torch.randn(2, 6, D, requires_grad=True)
    perm = torch.randperm(6)
    torch.testing.assert_close(ffn(x)[:, perm], ffn(x[:, perm]))
    ffn(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ffn.parameters())


def test_ffn_formulas():
    x = torch.randn(3, D)
    relu = zoo.get_component("ffn", "relu").build(None, d_model=D, d_ff=64)
    torch.testing.assert_close(relu(x), F.relu(x @ relu.fc1.weight.T + relu.fc1.bias)
                               @ relu.fc2.weight.T + relu.fc2.bias)
    gelu = zoo.get_component("ffn", "gelu").build({"approximate": "tanh"}, d_model=D, d_ff=64)
    h = x @ gelu.fc1.weight.T + gelu.fc1.bias
    h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))
    torch.testing.assert_close(gelu(x), h @ gelu.fc2.weight.T + gelu.fc2.bias)
    swiglu = zoo.get_component("ffn", "swiglu").build(None, d_model=D, d_ff=64)
    g, u = x @ swiglu.fc1_g.weight.T, x @ swiglu.fc1_x.weight.T
    torch.testing.assert_close(swiglu(x), (g * torch.sigmoid(g) * u) @ swiglu.fc2.weight.T)


# -- losses ---------------------------------------------------------------------------------------
def _focal_written_out(logits, target, pad, alpha, gamma):
    total, count = 0.0, 0
    for row, t in zip(logits.tolist(), target.tolist()):
        if t == pad:
            continue
        p_t = math.exp(row[t]) / sum(math.exp(v) for v in row)
        total += alpha * (1 - p_t) ** gamma * -math.log(p_t)
        count += 1
    return total / count


@pytest.mark.parametrize("alpha,gamma", [(1.0, 2.0), (0.25, 0.5), (2.0, 5.0)])
def test_focal_loss_against_its_formula(alpha, gamma):
    logits, target = torch.randn(20, 9, dtype=torch.float64) * 3, torch.randint(0, 9, (20,))
    focal = zoo.get_component("loss", "focal").build({"alpha": alpha, "gamma": gamma})
    ours = focal(logits, target, ignore_index=0)
    assert float(ours) == pytest.approx(_focal_written_out(logits, target, 0, alpha, gamma),
                                        rel=1e-5)


def test_focal_loss_with_gamma_0_is_cross_entropy():
    logits, target = torch.randn(30, 11), torch.randint(0, 11, (30,))
    target[:5] = 3
    focal = zoo.get_component("loss", "focal").build({"gamma": 0.0})
    torch.testing.assert_close(focal(logits, target, ignore_index=3),
                               F.cross_entropy(logits, target, ignore_index=3))
    assert zoo.get_component("loss", "focal").build(None).gamma == 2.0  # the article's default


def test_focal_loss_down_weights_confident_targets():
    focal = zoo.get_component("loss", "focal").build({"gamma": 2.0})
    sure, unsure = torch.tensor([[8.0, 0.0, 0.0]]), torch.tensor([[0.5, 0.0, 0.0]])
    target = torch.tensor([0])
    ce = [float(F.cross_entropy(x, target)) for x in (sure, unsure)]
    fl = [float(focal(x, target)) for x in (sure, unsure)]
    assert fl[0] / ce[0] < 0.01 < 0.3 < fl[1] / ce[1]


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_loss_is_torchs(smoothing):
    logits, target = torch.randn(30, 11), torch.randint(0, 11, (30,))
    ce = zoo.get_component("loss", "cross-entropy").build({"label_smoothing": smoothing})
    torch.testing.assert_close(ce(logits, target, ignore_index=4),
                               F.cross_entropy(logits, target, ignore_index=4,
                                               label_smoothing=smoothing))


# -- positions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", names("positional"))
def test_positional_offset_contract(name):
    comp = zoo.get_component("positional", name)
    if comp.capabilities.kind not in ("absolute", "none"):
        pytest.skip("acts inside attention")
    pos = comp.build(None, d_model=D, max_len=32)
    x = torch.randn(2, 10, D)
    full = pos(x)
    assert full.shape == x.shape
    torch.testing.assert_close(pos(x[:, 6:], offset=6), full[:, 6:])
    if comp.capabilities.kind == "absolute":
        assert not torch.allclose(full[:, 0] - x[:, 0], full[:, 1] - x[:, 1])


def test_sinusoidal_equals_paper_formula():
    d = 16
    pos = zoo.get_component("positional", "sinusoidal").build(None, d_model=d, max_len=8)
    table = pos(torch.zeros(1, 50, d))[0]  # grows past max_len on demand
    for p in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


def test_learned_positions_refuse_beyond_max_len():
    pos = zoo.get_component("positional", "learned").build(None, d_model=D, max_len=4)
    with pytest.raises(ValueError, match="raise max_len"):
        pos(torch.zeros(1, 5, D))


@pytest.mark.parametrize("cache_length", [0, 3])
def test_learned_positions_counting_real_tokens_are_robertas(cache_length):
    transformers = pytest.importorskip("transformers")
    positions = transformers.models.roberta.modeling_roberta.RobertaEmbeddings \
        .create_position_ids_from_input_ids
    pad = 1  # RoBERTa's pad id: real tokens from row 2, padding at row 1
    pos = zoo.get_component("positional", "learned").build(
        {"offset": pad + 1, "count": "real"}, d_model=D, max_len=16)
    ids = torch.tensor([[5, 6, 7, 8, 9], [pad, pad, 6, 7, 8], [5, 6, pad, pad, pad]])
    x = torch.randn(3, 5, D)
    rows = positions(ids, pad, cache_length)
    expected = x + pos.weight[rows]
    torch.testing.assert_close(pos(x, offset=cache_length, padding_mask=ids.eq(pad)), expected)
    # a sentence padded on the left gets the positions it gets alone
    alone = pos(x[1:2, 2:], padding_mask=ids[1:2, 2:].eq(pad))
    torch.testing.assert_close(pos(x[1:2], padding_mask=ids[1:2].eq(pad))[:, 2:], alone)
    # every place counted (the default): the mask changes nothing
    every = zoo.get_component("positional", "learned").build({"offset": 2}, d_model=D,
                                                              max_len=16)
    torch.testing.assert_close(every(x, padding_mask=ids.eq(pad)), every(x))


def test_a_seq2seq_model_gives_padding_aware_positions_its_padding():
    model = zoo.build("transformer-tiny", positional={"name": "learned",
                                                      "settings": {"count": "real"}},
                      dropout=0.0).eval()
    assert model.positions_see_padding
    src = torch.randint(3, 1000, (1, 6))
    left = torch.cat([torch.zeros(1, 3, dtype=torch.long), src], 1)  # pad id 0 on the left
    tgt = torch.randint(3, 1000, (1, 4))
    with torch.no_grad():
        torch.testing.assert_close(model(left, tgt), model(src, tgt), rtol=1e-5, atol=1e-5)


# -- blocks ---------------------------------------------------------------------------------------
def _block(name, norm_first):
    role = zoo.get_component("block", name).capabilities.role
    make_attention = partial(attention, "vanilla", "sdpa")
    return role, zoo.get_component("block", name).build(
        None, d_model=D, dropout=0.0, norm_first=norm_first,
        make_attention=make_attention,
        make_norm=partial(zoo.get_component("norm", "layernorm").build, None, dim=D),
        make_ffn=partial(zoo.get_component("ffn", "relu").build, None, d_model=D, d_ff=64),
    ).eval()


@pytest.mark.parametrize("name", names("block"))
@pytest.mark.parametrize("norm_first", [False, True])
def test_block_contracts(name, norm_first):
    role, block = _block(name, norm_first)
    x = torch.randn(2, 6, D, requires_grad=True)
    if role == "encoder":
        pad = torch.zeros(2, 6, dtype=torch.bool)
        pad[0, 4:] = True
        y = x.detach().clone()
        y[0, 4:] += 3.0
        a, b = block(x, key_padding_mask=pad), block(y, key_padding_mask=pad)
        torch.testing.assert_close(a[0, :4], b[0, :4])
    elif role == "causal":
        y = x.detach().clone()
        y[:, 3] += 3.0
        a, b = block(x), block(y)
        torch.testing.assert_close(a[:, :3], b[:, :3])
        assert not torch.allclose(a[:, 3:], b[:, 3:])
    else:
        memory = torch.randn(2, 5, D)
        y = x.detach().clone()
        y[:, 3] += 3.0
        a, b = block(x, memory), block(y, memory)
        torch.testing.assert_close(a[:, :3], b[:, :3])
        assert not torch.allclose(a[:, 3:], b[:, 3:])
    assert a.shape == x.shape
    a.sum().backward()
    assert all(p.grad is not None for p in block.parameters())
