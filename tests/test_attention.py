"""Every attention mechanism and every position that acts inside attention,
parametrised over the registry, and each checked against a reference: dense
attention, the masked quadratic form, exact softmax, the papers' formulas."""

from __future__ import annotations

import importlib.util
import itertools
import math

import pytest
import torch

import zoo

D, H = 32, 4

# settings small enough that the sparse patterns are really sparse at these lengths
SMALL = {
    "sliding-window": {"window": 2, "block_size": 4, "global_tokens": [0]},
    "bigbird": {"block_size": 2, "window_blocks": 3, "global_blocks": 1, "random_blocks": 1},
    "performer": {"features": 64},
    "lsh": {"n_buckets": 4, "chunk_size": 4, "n_hashes": 2},
}


def kernel(name):
    return zoo.get_component("kernel", name).load()


def positional(name, *, causal=False, settings=None, d_model=D, n_heads=H):
    comp = zoo.get_component("positional", name)
    if comp.capabilities.kind in ("absolute", "none"):
        return None
    return comp.build(settings, d_model=d_model, n_heads=n_heads, max_len=64, causal=causal)


def make(name, pos="none", kern="sdpa", *, causal=False, cross=False, settings=None,
         pos_settings=None):
    if settings is None:
        settings = SMALL.get(name)
    return zoo.get_component("attention", name).build(
        settings, d_model=D, n_heads=H, kernel=kernel(kern), causal=causal, cross=cross,
        positional=positional(pos, causal=causal, settings=pos_settings),
    ).eval()


def inside_positions():
    return [c.name for c in zoo.list_components("positional")
            if c.capabilities.kind not in ("absolute", "none")]


PAIRS = [
    (a.name, p)
    for a in zoo.list_components("attention")
    for p in ["none", *inside_positions()]
    if p == "none" or zoo.get_component("positional", p).capabilities.kind in a.capabilities.positions
]
CPU_KERNELS = [c.name for c in zoo.list_components("kernel") if not c.capabilities.needs_cuda]


def caps(name):
    return zoo.get_component("attention", name).capabilities


# -- the contract, for every attention x position -----------------------------------------------
@pytest.mark.parametrize("name,pos", PAIRS)
def test_causal_contract(name, pos):
    if not caps(name).causal:
        pytest.skip("not causal")
    attn = make(name, pos, causal=True)
    x = torch.randn(2, 13, D)
    y = x.clone()
    y[:, 7] += 1.0
    a, b = attn(x), attn(y)
    torch.testing.assert_close(a[:, :7], b[:, :7], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name,pos", PAIRS)
def test_padding_keys_change_nothing(name, pos, causal):
    if not caps(name).padding_mask:
        pytest.skip("no padding mask")
    attn = make(name, pos, causal=causal)
    x = torch.randn(2, 11, D)
    pad = torch.zeros(2, 11, dtype=torch.bool)
    pad[0, 8:] = True
    y = x.clone()
    y[0, 8:] = torch.randn(3, D) * 5
    a, b = attn(x, key_padding_mask=pad), attn(y, key_padding_mask=pad)
    torch.testing.assert_close(a[0, :8], b[0, :8], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a[1], b[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,pos", PAIRS)
def test_kv_cache_decoding_equals_full_forward(name, pos):
    if not caps(name).kv_cache:
        pytest.skip("no KV cache")
    attn = make(name, pos, causal=True)
    x = torch.randn(2, 12, D)
    full = attn(x)
    cache = zoo.KVCache()
    steps = [attn(x[:, :5], cache=cache)] + [attn(x[:, t:t + 1], cache=cache)
                                             for t in range(5, 12)]
    assert len(cache) == 12
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)
    if caps(name).cross_attention:
        cross = make(name, pos, cross=True)
        memory = torch.randn(2, 9, D)
        mem_pad = torch.zeros(2, 9, dtype=torch.bool)
        mem_pad[1, 6:] = True
        cache = zoo.KVCache()
        steps = [cross(x[:, t:t + 1], memory, key_padding_mask=mem_pad, cache=cache)
                 for t in range(12)]
        torch.testing.assert_close(torch.cat(steps, 1), cross(x, memory, key_padding_mask=mem_pad),
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name,pos", PAIRS)
def test_gradients_flow(name, pos):
    attn = make(name, pos, causal=caps(name).causal).train()
    x = torch.randn(2, 10, D, requires_grad=True)
    attn(x).square().mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("kern", CPU_KERNELS)
@pytest.mark.parametrize("name", [c.name for c in zoo.list_components("attention")
                                  if c.capabilities.uses_kernel])
def test_kernels_agree_inside_every_mechanism(name, kern):
    reference = make(name, "alibi" if "bias" in caps(name).positions else "none", "eager",
                     causal=True)
    other = make(name, "alibi" if "bias" in caps(name).positions else "none", kern, causal=True)
    other.load_state_dict(reference.state_dict())
    x = torch.randn(2, 9, D)
    torch.testing.assert_close(other(x), reference(x), atol=1e-5, rtol=1e-5)


# -- sparse attention against dense -------------------------------------------------------------
def _dense_like(attn, pos="none", causal=False):
    dense = make("vanilla", pos, causal=causal)
    dense.load_state_dict(attn.state_dict(), strict=False)
    if attn.positional is not None:
        dense.positional = attn.positional
    return dense


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_covering_the_sequence_is_dense(causal):
    attn = make("sliding-window", causal=causal, settings={"window": 32})
    dense = _dense_like(attn, causal=causal)
    x = torch.randn(3, 20, D)
    pad = torch.zeros(3, 20, dtype=torch.bool)
    pad[1, 15:] = True
    torch.testing.assert_close(attn(x), dense(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn(x, key_padding_mask=pad), dense(x, key_padding_mask=pad),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pos", ["none", "alibi", "rope"])
def test_sliding_window_equals_dense_attention_with_the_band_mask(causal, pos):
    w, glob = 3, [0, 9]
    attn = make("sliding-window", pos, causal=causal,
                settings={"window": w, "global_tokens": glob, "block_size": 4})
    dense = _dense_like(attn, pos, causal)
    n = 23
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    band = ((i - j).abs() <= w) | torch.isin(j, torch.tensor(glob)) | torch.isin(i, torch.tensor(glob))
    x = torch.randn(2, n, D)
    torch.testing.assert_close(attn(x), dense(x, attn_mask=band), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_bigbird_with_every_block_global_is_dense(causal):
    attn = make("bigbird", causal=causal,
                settings={"block_size": 4, "global_blocks": 8, "random_blocks": 2})
    dense = _dense_like(attn, causal=causal)
    x = torch.randn(2, 29, D)  # 8 blocks of 4, the last one partial
    pad = torch.zeros(2, 29, dtype=torch.bool)
    pad[0, 20:] = True
    torch.testing.assert_close(attn(x, key_padding_mask=pad), dense(x, key_padding_mask=pad),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_bigbird_blocks_equal_dense_attention_with_its_pattern(causal):
    settings = {"block_size": 3, "window_blocks": 3, "global_blocks": 1, "random_blocks": 2,
                "seed": 7}
    attn = make("bigbird", "alibi", causal=causal, settings=settings)
    n = 42  # 14 whole blocks
    pattern = attn.allowed(torch.arange(n), torch.arange(n))
    # the pattern: window and global blocks always (the past ones when causal), the first
    # block's queries everything, and 2 random blocks for every query block with enough room
    qb, kb = torch.arange(n)[:, None] // 3, torch.arange(n)[None, :] // 3
    window = (qb - kb).abs() <= 1
    if causal:
        window &= kb <= qb
    assert pattern[window].all() and pattern[:, :3].all() and pattern[:3].all()
    extra = pattern & ~window & (kb > 0) & (qb > 0)
    random_blocks = extra[::3].sum(1) // 3  # per query block
    room = (qb[::3, 0] - 2 if causal else torch.full((14,), 10)).clamp(0, 2)
    room[0] = 0
    assert torch.equal(random_blocks, room)
    dense = _dense_like(attn, "alibi", causal)
    x = torch.randn(2, n, D)
    torch.testing.assert_close(attn(x), dense(x, attn_mask=pattern), atol=1e-5, rtol=1e-5)


def test_bigbird_pattern_is_seeded():
    n = 64
    kw = dict(block_size=4, global_blocks=1, random_blocks=2)
    a = make("bigbird", settings={**kw, "seed": 1}).allowed(torch.arange(n), torch.arange(n))
    b = make("bigbird", settings={**kw, "seed": 1}).allowed(torch.arange(n), torch.arange(n))
    c = make("bigbird", settings={**kw, "seed": 2}).allowed(torch.arange(n), torch.arange(n))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sparse_attention_refuses_an_arbitrary_mask():
    attn = make("sliding-window")
    with pytest.raises(ValueError, match="takes no attn_mask.*'vanilla'"):
        attn(torch.randn(1, 5, D), attn_mask=torch.ones(5, 5, dtype=torch.bool))


# -- linear attention ---------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_causal_linear_attention_prefix_sums_equal_the_quadratic_form(chunk):
    from zoo.plugins.attention._linear import (
        causal_linear_attention,
        causal_linear_attention_quadratic,
    )

    phi_q, phi_k = torch.rand(2, 3, 2, 17, 8).unbind(0)
    v = torch.randn(3, 2, 17, 5)
    out, _ = causal_linear_attention(phi_q, phi_k, v, chunk=chunk)
    # the definition, one query at a time
    expected = torch.stack([
        (phi_q[:, :, t, None, :] @ phi_k[:, :, : t + 1].transpose(-2, -1) @ v[:, :, : t + 1])[:, :, 0]
        / (phi_q[:, :, t, None, :] @ phi_k[:, :, : t + 1].transpose(-2, -1)).sum(-1)
        for t in range(17)
    ], dim=2)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(causal_linear_attention_quadratic(phi_q, phi_k, v), expected,
                               atol=1e-5, rtol=1e-5)


def test_linear_attention_is_elu_feature_attention():
    attn = make("linear")
    x = torch.randn(2, 7, D)
    q = attn._heads(attn.q_proj(x))
    k, v = attn._keys_values(x)
    phi_q, phi_k = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    scores = phi_q @ phi_k.transpose(-2, -1)
    expected = attn.out_proj(attn._merge((scores / scores.sum(-1, keepdim=True)) @ v))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-5)


def test_linear_attention_state_is_constant_size():
    attn = make("linear", causal=True)
    cache = zoo.KVCache()
    for t in range(6):
        attn(torch.randn(1, 1, D), cache=cache)
        sizes = {k: tuple(v.shape) for k, v in cache.state.items()}
    assert cache.k is None and len(cache) == 6
    assert sizes == {"s": (1, H, D // H, D // H), "z": (1, H, D // H)}


# -- Performer ----------------------------------------------------------------------------------
def _softmax_attention(q, k, v, causal=False):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_performer_error_falls_as_features_grow(causal):
    from zoo.plugins.attention.performer import favor_attention, orthogonal_features

    counts, seeds = [8, 32, 128, 512], range(6)
    errors = []
    for m in counts:
        errs = []
        for seed in seeds:
            g = torch.Generator().manual_seed(seed)
            q, k = (torch.randn(2, 2, 32, 16, generator=g) * 0.6).unbind(0)
            v = torch.randn(2, 32, 16, generator=g)
            exact = _softmax_attention(q[None], k[None], v[None], causal)
            approx = favor_attention(q[None], k[None], v[None],
                                     orthogonal_features(m, 16, g), causal=causal)
            errs.append(((approx - exact).norm() / exact.norm()).item())
        errors.append(sum(errs) / len(errs))
    # each 4x more features: a clearly smaller error (Monte Carlo: about half, 1/sqrt(m))
    assert all(b < 0.8 * a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.2, errors


def test_performer_features_are_orthogonal_in_blocks():
    from zoo.plugins.attention.performer import orthogonal_features

    w = orthogonal_features(48, 16)
    block = w[:16] / w[:16].norm(dim=1, keepdim=True)
    torch.testing.assert_close(block @ block.T, torch.eye(16), atol=1e-5, rtol=0)


def test_performer_redraws_its_features_on_schedule():
    attn = make("performer", settings={"features": 16, "redraw_interval": 2}).train()
    first = attn.projection.clone()
    x = torch.randn(1, 4, D)
    attn(x)
    attn(x)
    assert torch.equal(attn.projection, first)
    attn(x)  # the third call starts a new interval
    assert not torch.equal(attn.projection, first)
    attn.eval()
    frozen = attn.projection.clone()
    attn(x), attn(x), attn(x)
    assert torch.equal(attn.projection, frozen)
    assert "projection" in attn.state_dict()


# -- positions ----------------------------------------------------------------------------------
def _rope_paper(x, positions, base=10000.0, layout="interleaved"):
    """R^d_{Theta,m} x of RoFormer eq. (15), pair by pair, with plain Python floats."""
    out = x.clone()
    d = x.shape[-1]
    for t, m in enumerate(positions.tolist()):
        for i in range(d // 2):
            theta = base ** (-2 * i / d)
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d // 2)
            x1, x2 = x[..., t, a], x[..., t, b]
            out[..., t, a] = x1 * math.cos(m * theta) - x2 * math.sin(m * theta)
            out[..., t, b] = x1 * math.sin(m * theta) + x2 * math.cos(m * theta)
    return out


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rope_equals_the_paper_formula(layout, base):
    rope = positional("rope", settings={"layout": layout, "base": base})
    x = torch.randn(2, H, 5, D // H)
    positions = torch.tensor([0, 1, 7, 30, 100])
    torch.testing.assert_close(rope.rotate(x, positions), _rope_paper(x, positions, base, layout),
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_rope_dot_product_depends_only_on_the_offset(layout):
    rope = positional("rope", settings={"layout": layout})
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 1, 1, 1, D // H, generator=g).unbind(0)
    for m, n in [(0, 0), (5, 2), (40, 3), (7, 19)]:
        ref = (rope.rotate(q, torch.tensor([m])) * rope.rotate(k, torch.tensor([n]))).sum()
        for shift in (1, 13, 250):
            got = (rope.rotate(q, torch.tensor([m + shift]))
                   * rope.rotate(k, torch.tensor([n + shift]))).sum()
            assert got.item() == pytest.approx(ref.item(), abs=1e-4)
    # and it does depend on the offset
    a = (rope.rotate(q, torch.tensor([0])) * rope.rotate(k, torch.tensor([1]))).sum()
    b = (rope.rotate(q, torch.tensor([0])) * rope.rotate(k, torch.tensor([4]))).sum()
    assert abs(a.item() - b.item()) > 1e-4


def test_rope_refuses_an_odd_head_size():
    with pytest.raises(zoo.RecipeError, match="head size 5 .* is odd"):
        positional("rope", d_model=20, n_heads=4)


def test_alibi_slopes_are_the_papers():
    from zoo.plugins.positional.alibi import alibi_slopes

    assert alibi_slopes(8) == pytest.approx([2.0**-k for k in range(1, 9)])
    # 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads
    assert alibi_slopes(12) == pytest.approx(
        [2.0**-k for k in range(1, 9)] + [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5])


def test_alibi_attention_adds_minus_slope_times_distance():
    attn = make("vanilla", "alibi", causal=True)
    x = torch.randn(2, 6, D)
    q = attn._heads(attn.q_proj(x))
    k, v = attn._keys_values(x)
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8])  # 4 heads
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // H) - slopes[:, None, None] * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    expected = attn.out_proj(attn._merge(scores.softmax(-1) @ v))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-5)


def _t5_bucket_by_hand(rel, bidirectional, num_buckets=32, max_distance=128):
    """T5's bucketing (Raffel et al. 2020; mesh_tensorflow's
    ``_relative_position_bucket``), one integer at a time."""
    n = -rel
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            bucket += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return bucket + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                            * (num_buckets - max_exact))
    return bucket + min(large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_equal_the_reference(bidirectional):
    from zoo.plugins.positional.t5 import relative_position_bucket

    rel = torch.arange(-300, 301)
    got = relative_position_bucket(rel, bidirectional=bidirectional)
    expected = [_t5_bucket_by_hand(r, bidirectional) for r in rel.tolist()]
    assert got.tolist() == expected
    # a few worked by hand: distances 0..7 exact, 8 -> 8, 16 -> 10, 128 and beyond -> 15
    b = {r: _t5_bucket_by_hand(r, True) for r in (0, -1, 1, -8, -16, -127, -128, -1000, 1000)}
    assert b == {0: 0, -1: 1, 1: 17, -8: 8, -16: 10, -127: 15, -128: 15, -1000: 15, 1000: 31}


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_buckets_equal_transformers(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention
    from zoo.plugins.positional.t5 import relative_position_bucket

    rel = torch.arange(-300, 301)[None, :] - torch.zeros(1, 1, dtype=torch.long)
    expected = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                                     num_buckets=32, max_distance=128)
    assert torch.equal(relative_position_bucket(rel, bidirectional=bidirectional), expected)


def test_shaw_attention_equals_the_papers_equations():
    attn = make("vanilla", "shaw", pos_settings={"max_distance": 2})
    with torch.no_grad():
        attn.positional.keys.normal_()
        attn.positional.values.normal_()
    x = torch.randn(2, 6, D)
    q = attn._heads(attn.q_proj(x))
    k, v = attn._keys_values(x)
    idx = (torch.arange(6)[None, :] - torch.arange(6)[:, None]).clamp(-2, 2) + 2
    a_k, a_v = attn.positional.keys[idx], attn.positional.values[idx]  # (Lq, Lk, d)
    # eq. (4): e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z); eq. (3): z_i = sum a_ij (x_j W^V + a^V_ij)
    e = torch.einsum("bhid,bhjd->bhij", q, k[:, :, None, :, :].expand(-1, -1, 6, -1, -1)[:, :, 0]
                     ) + torch.einsum("bhid,ijd->bhij", q, a_k)
    alpha = (e / math.sqrt(D // H)).softmax(-1)
    z = alpha @ v + torch.einsum("bhij,ijd->bhid", alpha, a_v)
    torch.testing.assert_close(attn(x), attn.out_proj(attn._merge(z)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_transformer_xl_attention_is_the_papers_four_terms(causal):
    attn = make("vanilla", "xl", causal=causal)
    pos = attn.positional
    with torch.no_grad():
        pos.u.normal_()
        pos.v.normal_()
    L, d, dh = 6, D, D // H
    x = torch.randn(2, L, D)
    q = attn._heads(attn.q_proj(x))
    k, v = attn._keys_values(x)
    w_r = pos.r_proj.weight  # (d, d)

    def r(distance):  # the sinusoid of distance i - j, [sin | cos], as the paper's code
        freqs = [10000 ** (-2 * f / d) for f in range(d // 2)]
        return torch.tensor([math.sin(distance * f) for f in freqs]
                            + [math.cos(distance * f) for f in freqs])

    scores = torch.empty(2, H, L, L)
    for i in range(L):
        for j in range(L):
            wr = (w_r @ r(i - j)).view(H, dh)  # W_{k,R} R_{i-j}, per head
            a = (q[:, :, i] * k[:, :, j]).sum(-1)
            b = (q[:, :, i] * wr).sum(-1)
            c = (pos.u * k[:, :, j]).sum(-1)
            d_ = (pos.v * wr).sum(-1)
            scores[:, :, i, j] = a + b + c + d_
    scores = scores / math.sqrt(dh)
    if causal:
        scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    z = scores.softmax(-1) @ v
    torch.testing.assert_close(attn(x), attn.out_proj(attn._merge(z)), atol=1e-5, rtol=1e-5)


def test_transformer_xl_scores_depend_only_on_offsets_and_the_shift_is_a_gather():
    from zoo.plugins.positional.xl import rel_shift

    pos = positional("xl")
    q = torch.randn(2, H, 5, D // H)
    for offset in (0, 3):  # queries 0..4 (or 3..7) against keys 0..6
        rel = zoo.plugin_api.relative_positions(5, 7, offset, "cpu")
        shifted = pos.scores(q, rel)  # the contiguous case goes through the shift
        gathered = pos.scores(q, rel[None])[:, :, 0]  # a 3-d rel is gathered
        torch.testing.assert_close(shifted, gathered)
    same = q[:, :, :1].expand(2, H, 5, D // H)  # one query at every position
    s = pos.scores(same, zoo.plugin_api.relative_positions(5, 7, 0, "cpu"))
    for i in range(4):
        torch.testing.assert_close(s[:, :, i + 1, 1:], s[:, :, i, :-1])
    per_offset = torch.arange(2 * 11).float().view(2, 11)  # Lq 4, Lk 8: offsets -3 .. 7
    expected = torch.tensor([[per_offset[0, j - i + 3].item() for j in range(8)] for i in range(4)])
    assert torch.equal(rel_shift(per_offset[:1].expand(4, 11).contiguous(), 4, 8), expected)


@pytest.mark.parametrize("kern", ["eager", "sdpa"])
@pytest.mark.parametrize("pos", ["none", "alibi", "shaw"])
def test_vanilla_scale_setting_is_the_factor_of_qk(kern, pos):
    attn = make("vanilla", pos, kern, settings={"scale": 1.0})
    x = torch.randn(2, 5, D)
    q = attn._heads(attn.q_proj(x))
    k, v = attn._keys_values(x)
    rel = zoo.plugin_api.relative_positions(5, 5, 0, "cpu")
    scores = q @ k.transpose(-2, -1)
    if pos == "shaw":
        scores = scores + attn.positional.scores(q, rel)
    if pos == "alibi":
        scores = scores + attn.positional.bias(rel)[None]
    z = scores.softmax(-1) @ v
    if pos == "shaw":
        z = z + attn.positional.values_term(scores.softmax(-1), rel)
    torch.testing.assert_close(attn(x), attn.out_proj(attn._merge(z)), atol=1e-5, rtol=1e-5)
    default = make("vanilla", pos, kern)
    default.load_state_dict(attn.state_dict())
    assert not torch.allclose(default(x), attn(x))


def _dense_shared_qk(attn, x, *, causal, pad=None):
    """Shared-QK attention written out (Reformer sec. 2): k = q / |q|, a position attends
    to itself only when nothing else is allowed (score -1e5)."""
    q = attn._heads(attn.q_proj(x))
    v = attn._heads(attn.kv_proj(x))
    k = q / q.norm(dim=-1, keepdim=True)
    L = x.shape[1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)
    allowed = torch.ones(L, L, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    allowed = allowed.expand(x.shape[0], 1, L, L)
    if pad is not None:
        allowed = allowed & ~pad[:, None, None, :]
    scores = scores.masked_fill(~allowed, -1e9).masked_fill(torch.eye(L, dtype=torch.bool), -1e5)
    return attn.out_proj(attn._merge(scores.softmax(-1) @ v))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rounds", [1, 3])
def test_lsh_with_one_bucket_and_one_chunk_is_dense_shared_qk_attention(causal, rounds):
    attn = make("lsh", causal=causal, settings={"n_buckets": 1, "chunk_size": 16,
                                                  "n_hashes": rounds})
    x = torch.randn(2, 11, D)
    pad = torch.zeros(2, 11, dtype=torch.bool)
    pad[1, 8:] = True
    torch.testing.assert_close(attn(x), _dense_shared_qk(attn, x, causal=causal),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn(x, key_padding_mask=pad)[1, :8],
                               _dense_shared_qk(attn, x, causal=causal, pad=pad)[1, :8],
                               atol=1e-5, rtol=1e-5)


def test_lsh_buckets_are_the_papers_argmax_of_xr_and_minus_xr():
    from zoo.plugins.attention.lsh import lsh_buckets

    x, rotations = torch.randn(2, 3, 7, 8), torch.randn(8, 4)
    expected = torch.empty(2, 3, 7, dtype=torch.long)
    for index in itertools.product(range(2), range(3), range(7)):
        xr = [sum(x[index][i] * rotations[i, j] for i in range(8)) for j in range(4)]
        both = xr + [-v for v in xr]
        expected[index] = max(range(8), key=lambda j: both[j])
    assert torch.equal(lsh_buckets(x, rotations), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_lsh_attends_to_its_bucket_in_its_chunk_and_the_one_before(causal):
    from zoo.plugins.attention.lsh import lsh_buckets

    attn = make("lsh", causal=causal, settings={"n_buckets": 4, "chunk_size": 3, "n_hashes": 1})
    L = 30
    x = torch.randn(1, L, D)
    q = attn._heads(attn.q_proj(x))
    buckets = lsh_buckets(q, attn.rotations[0])[0]  # (H, L)
    allowed = torch.zeros(1, H, L, L, dtype=torch.bool)
    for head in range(H):
        members = {}  # bucket -> its positions in order; a position's rank is its index
        for i, bucket in enumerate(buckets[head].tolist()):
            members.setdefault(bucket, []).append(i)
        for bucket, positions in members.items():
            for r_i, i in enumerate(positions):
                for r_j, j in enumerate(positions):
                    if r_j // 3 in (r_i // 3, r_i // 3 - 1) and (not causal or j <= i):
                        allowed[0, head, i, j] = True
    assert allowed.sum() < H * L * L / 3  # far from dense
    v = attn._heads(attn.kv_proj(x))
    k = q / q.norm(dim=-1, keepdim=True)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(D // H)).masked_fill(~allowed, -1e9)
    scores = scores.masked_fill(torch.eye(L, dtype=torch.bool), -1e5)
    expected = attn.out_proj(attn._merge(scores.softmax(-1) @ v))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-5)


def test_lsh_causal_outputs_ignore_every_later_token():
    attn = make("lsh", causal=True, settings={"n_buckets": 4, "chunk_size": 2, "n_hashes": 2})
    x = torch.randn(2, 24, D)
    out = attn(x)
    for t in (3, 10, 17):
        for seed in range(3):  # later tokens redrawn at random: their buckets change
            y = x.clone()
            y[:, t:] = torch.randn(2, 24 - t, D, generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(attn(y)[:, :t], out[:, :t], atol=1e-5, rtol=1e-5)


# -- in models ----------------------------------------------------------------------------------
MODEL_PAIRS = [(a, p) for a, p in PAIRS] + [("vanilla", "sinusoidal"), ("performer", "learned")]


@pytest.mark.parametrize("name,pos", MODEL_PAIRS)
def test_every_attention_and_position_in_the_seq2seq_model(name, pos):
    settings = SMALL.get(name, {})
    model = zoo.build("transformer-tiny", attention={"name": name, "settings": settings},
                      positional=pos, dropout=0.0).eval()
    src, tgt = torch.randint(1, 1000, (2, 9)), torch.randint(1, 1000, (2, 7))
    full = model(src, tgt)
    if not caps(name).kv_cache:  # decoding re-runs the decoder over the prefix by itself
        assert not model.decodes_incrementally
        ours = model.generate(src, max_new_tokens=6)
        rerun = zoo.generate(model, src, max_new_tokens=6, use_cache=False)
        assert torch.equal(ours, rerun)
        return
    memory = model.encode(src)
    cache = model.init_cache()
    steps = [model.decode(tgt[:, t:t + 1], memory, model.padding_mask(src), cache=cache)
             for t in range(7)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", [c.name for c in zoo.list_components("attention")])
@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_every_attention_in_vit(name, pos):
    """Each attention in a ViT, with absolute positions and with positions inside the
    attention (rotary; DeBERTa's table for disentangled attention, its only kind)."""
    kinds = zoo.get_component("attention", name).capabilities.positions
    if pos == "rope" and "rotary" not in kinds:
        pos = "deberta"
    settings = SMALL.get(name, {})
    model = zoo.build("vit-tiny-patch4-28", attention={"name": name, "settings": settings},
                      positional=pos).eval()
    logits = model(torch.randn(2, 1, 28, 28))
    assert logits.shape == (2, 10) and torch.isfinite(logits).all()


def test_t5_bias_is_shared_by_the_layers_of_a_stack():
    model = zoo.build("transformer-tiny", positional="t5-bias")
    enc = [layer.attn.positional for layer in model.encoder.layers]
    dec = [layer.self_attn.positional for layer in model.decoder.layers]
    assert all(p is enc[0] for p in enc) and all(p is dec[0] for p in dec)
    assert enc[0] is not dec[0] and enc[0].bidirectional and not dec[0].bidirectional
    assert all(layer.cross_attn.positional is None for layer in model.decoder.layers)
    base = sum(p.numel() for p in zoo.build("transformer-tiny", positional="none").parameters())
    assert sum(p.numel() for p in model.parameters()) == base + 2 * 32 * 4


def test_shaw_vectors_are_per_layer():
    model = zoo.build("transformer-tiny", positional="shaw")
    enc = [layer.attn.positional for layer in model.encoder.layers]
    assert enc[0] is not enc[1]


def test_seq2seq_cross_attention_slot_defaults_to_dense():
    model = zoo.build("transformer-tiny", attention={"name": "sliding-window",
                                                     "settings": {"window": 4}})
    layer = model.decoder.layers[0]
    assert type(layer.self_attn).__name__ == "SlidingWindowAttention"
    assert type(layer.cross_attn).__name__ == "VanillaAttention"
    model = zoo.build("transformer-tiny", attention="performer", cross_attention="performer")
    assert type(model.decoder.layers[0].cross_attn).__name__ == "PerformerAttention"


# -- clear errors -------------------------------------------------------------------------------
def test_capabilities_refuse_what_cannot_work():
    with pytest.raises(zoo.CapabilityError, match=r"cross_attention=True.*'vanilla'"):
        zoo.build("transformer-tiny", cross_attention="sliding-window")
    with pytest.raises(zoo.CapabilityError,
                       match=r"positional 'alibi' acts inside attention \(bias\).*'performer'"
                             r".*Attentions that can: .*'vanilla'"):
        zoo.build("transformer-tiny", attention="performer", positional="alibi")


def test_xformers_kernel_where_it_cannot_run_says_why_and_what_would():
    installed = importlib.util.find_spec("xformers") is not None
    with pytest.raises(zoo.CapabilityError) as err:
        zoo.build("transformer-tiny", kernel="xformers")
    message = str(err.value)
    assert "kernel 'xformers'" in message and "CUDA device" in message
    assert ("not installed" in message) != installed
    assert "'sdpa'" in message and "'auto'" in message
    # called directly on CPU tensors
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(zoo.CapabilityError, match="kernel 'sdpa'"):
        kernel("xformers")(q, q, q)


def test_auto_kernel_runs_sdpa_on_cpu():
    from zoo.plugins.kernels.auto import choose

    assert choose(torch.randn(1, 1, 2, 8)) == "sdpa"
    assert choose(torch.randn(1, 1, 2, 8, dtype=torch.bfloat16)) == "sdpa"
