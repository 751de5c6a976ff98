"""Decoding: the cache changes speed, never results; beam search finds the best
sequence (checked against exhaustive search); sampling filters as defined."""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from zoo.decoding import beam_search, filter_logits, greedy, length_penalty, sample

BOS, EOS = 1, 2


def tiny(vocab=8, **kw):
    torch.manual_seed(0)
    model = zoo.build("transformer-tiny", vocab_size=vocab, dropout=0.0, **kw).eval()
    with torch.no_grad():  # a sharper, less uniform distribution than at initialisation
        for p in model.parameters():
            p.mul_(1.5)
    return model


@pytest.mark.parametrize("attention,static", [("vanilla", True), ("vanilla", False),
                                              ("linear", True), ("sliding-window", True)])
def test_cache_changes_nothing(attention, static):
    # vanilla decodes through the static decoder unless told not to (the general
    # cache then); the others always through the general cache
    model = tiny(16, attention={"name": attention, "settings": {"window": 3}
                                if attention == "sliding-window" else {}})
    model.static_decoding = static
    src = torch.randint(3, 16, (3, 7))
    src[1, 5:] = 0  # padding
    a = greedy(model, src, max_new_tokens=10, bos_id=BOS, eos_id=EOS)
    b = greedy(model, src, max_new_tokens=10, bos_id=BOS, eos_id=EOS, use_cache=False)
    assert torch.equal(a, b)
    a = beam_search(model, src, beam_size=3, max_new_tokens=8, bos_id=BOS, eos_id=EOS)
    b = beam_search(model, src, beam_size=3, max_new_tokens=8, bos_id=BOS, eos_id=EOS,
                    use_cache=False)
    assert torch.equal(a, b)


def test_greedy_is_the_argmax_of_each_step():
    model = tiny()
    src = torch.randint(3, 8, (2, 5))
    out = greedy(model, src, max_new_tokens=6, bos_id=BOS, eos_id=EOS)
    for b in range(2):
        prefix = [BOS]
        for t in range(out.shape[1]):
            logits = model(src[b:b + 1], torch.tensor([prefix]))[0, -1]
            want = int(logits.argmax())
            assert out[b, t].item() == want
            if want == EOS:
                assert (out[b, t + 1:] == model.pad_id).all()
                break
            prefix.append(want)


def _exhaustive_best(model, src, vocab, max_len, alpha):
    """Score every sequence of up to max_len tokens (ending in EOS, or cut at max_len)."""
    best = (float("-inf"), None)
    tokens = list(range(vocab))
    for length in range(1, max_len + 1):
        for seq in itertools.product(tokens, repeat=length):
            if EOS in seq[:-1] or (length < max_len and seq[-1] != EOS):
                continue
            tgt_in = torch.tensor([[BOS, *seq[:-1]]])
            logp = torch.log_softmax(model(src, tgt_in)[0].float(), -1)
            score = sum(logp[i, s].item() for i, s in enumerate(seq))
            norm = score / length_penalty(length, alpha)
            if norm > best[0]:
                best = (norm, list(seq))
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_as_wide_as_the_vocabulary_finds_the_exact_best(alpha):
    vocab, max_len = 5, 3
    model = tiny(vocab)
    for seed in range(3):
        src = torch.randint(3, vocab, (1, 4), generator=torch.Generator().manual_seed(seed))
        expected_score, expected = _exhaustive_best(model, src, vocab, max_len, alpha)
        out, scores = beam_search(model, src, beam_size=vocab * vocab, max_new_tokens=max_len,
                                  bos_id=BOS, eos_id=EOS, alpha=alpha, return_scores=True)
        got = [t for t in out[0].tolist()]
        got = got[: got.index(EOS) + 1] if EOS in got else got[:max_len]
        assert got == expected
        assert scores[0].item() == pytest.approx(expected_score, rel=1e-3, abs=1e-4)


def test_beam_of_one_is_greedy():
    model = tiny(16)
    src = torch.randint(3, 16, (4, 6))
    assert torch.equal(
        beam_search(model, src, beam_size=1, max_new_tokens=9, bos_id=BOS, eos_id=EOS, alpha=0),
        greedy(model, src, max_new_tokens=9, bos_id=BOS, eos_id=EOS)[:, :9])


def test_batched_beam_equals_one_at_a_time():
    model = tiny(16)
    src = torch.randint(3, 16, (3, 6))
    together = beam_search(model, src, beam_size=3, max_new_tokens=7, bos_id=BOS, eos_id=EOS)
    for b in range(3):
        alone = beam_search(model, src[b:b + 1], beam_size=3, max_new_tokens=7, bos_id=BOS,
                            eos_id=EOS)
        width = alone.shape[1]
        assert together[b, :width].tolist() == alone[0].tolist()
        assert (together[b, width:] == model.pad_id).all()


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.10]]))
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[True, True, False, False]]
    kept = filter_logits(logits, top_p=0.7).isfinite()  # 0.5 < 0.7, 0.75 reaches it
    assert kept.tolist() == [[True, True, False, False]]
    kept = filter_logits(logits, top_p=0.5).isfinite()
    assert kept.tolist() == [[True, False, False, False]]


def test_sampling_is_seeded_and_low_temperature_is_greedy():
    model = tiny(16)
    src = torch.randint(3, 16, (2, 6))
    a = sample(model, src, max_new_tokens=8, bos_id=BOS, eos_id=EOS,
               generator=torch.Generator().manual_seed(1))
    b = sample(model, src, max_new_tokens=8, bos_id=BOS, eos_id=EOS,
               generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    cold = sample(model, src, max_new_tokens=8, bos_id=BOS, eos_id=EOS, temperature=1e-4)
    assert torch.equal(cold, greedy(model, src, max_new_tokens=8, bos_id=BOS, eos_id=EOS))


def test_model_generate_front_door():
    model = tiny(16)
    src = torch.randint(3, 16, (2, 6))
    assert torch.equal(model.generate(src, max_new_tokens=5, bos_id=BOS, eos_id=EOS),
                       greedy(model, src, max_new_tokens=5, bos_id=BOS, eos_id=EOS))
    with pytest.raises(ValueError, match="unknown decoding strategy 'beem'"):
        model.generate(src, strategy="beem")


@pytest.mark.parametrize("groups_queries", [True, False])
def test_beams_sharing_one_cross_attention_cache_equal_beams_with_their_own(groups_queries):
    # the step after DecoderCache.spread (one cross-attention row per source, its beams
    # attended together as one query sequence) against every beam with its own copy;
    # an attention that does not group its queries gets the rows repeated instead
    model = tiny(16)
    for layer in model.decoder.layers:
        for m in layer.modules():
            if isinstance(m, zoo.plugin.MultiHeadAttention):
                m.groups_queries = groups_queries
    src = torch.randint(3, 16, (3, 7))
    src[1, 4:] = 0
    mask = model.padding_mask(src)
    memory = model.encode(src, mask)
    beams, first = 4, torch.full((3, 1), BOS)
    shared, own = model.init_cache(), model.init_cache()
    with torch.no_grad():
        model.decode(first, memory, mask, cache=shared)
        shared.spread(beams)
        model.decode(first.repeat_interleave(beams, 0), memory.repeat_interleave(beams, 0),
                     mask.repeat_interleave(beams, 0), cache=own)
        step = torch.randint(3, 16, (3 * beams, 1))
        a = model.decode(step, None, mask.repeat_interleave(beams, 0), cache=shared)
        b = model.decode(step, None, mask.repeat_interleave(beams, 0), cache=own)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert shared[0]["cross"].groups == (beams if groups_queries else 1)
