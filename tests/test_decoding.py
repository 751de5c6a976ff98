"""Decoding, zoo's one engine (zoo.generate): the cache changes speed, never results;
beam search finds the best sequence (checked against exhaustive search); sampling is
seeded; settings are refused by name and typed as recipes are; a decoding past the
model's positions is refused before it starts; the old functions still work, with a
deprecation warning. The rules and filters: tests/test_decoding_rules.py."""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from zoo.decoding import GenerationSettings, length_penalty

BOS, EOS = 1, 2


def tiny(vocab=8, **kw):
    torch.manual_seed(0)
    model = zoo.build("transformer-tiny", vocab_size=vocab, dropout=0.0, **kw).eval()
    with torch.no_grad():  # a sharper, less uniform distribution than at initialisation
        for p in model.parameters():
            p.mul_(1.5)
    return model


def test_a_built_model_carries_how_it_decodes():
    model = tiny(16)
    g = model.generation
    assert (g.start_id, g.eos_ids, g.pad_id, g.num_beams) == (BOS, (EOS,), 0, 1)
    assert (g.length_penalty_form, g.length_penalty, g.early_stopping) == ("gnmt", 0.6, "never")
    src = torch.randint(3, 16, (2, 6))
    assert torch.equal(model.generate(src), zoo.generate(model, src))
    assert torch.equal(model.generate(src, num_beams=3, max_new_tokens=5),
                       zoo.generate(model, src, GenerationSettings(
                           **{**g.model_dump(), "num_beams": 3, "max_new_tokens": 5})))


def test_a_limit_by_the_sources_length_is_fairseqs_a_times_length_plus_b():
    # fairseq's --max-len-a/--max-len-b: a x the source's length + b new tokens, never
    # past max_length, and max_new_tokens in its place when given
    model = tiny(16)
    for width, max_length, new in ((3, 100, 2 * 3 + 5), (6, 100, 2 * 6 + 5), (20, 30, 29)):
        src = torch.randint(3, 16, (2, width))
        out = zoo.generate(model, src, source_length_limit=(2, 5), max_length=max_length,
                           forbidden_ids=(EOS,))  # no end: the limit alone stops it
        assert out.shape == (2, new)
        assert zoo.generate(model, src, source_length_limit=(2, 5), max_new_tokens=4,
                            forbidden_ids=(EOS,)).shape == (2, 4)
    assert GenerationSettings(start_id=1, eos_ids=(2,), pad_id=0, max_length=999,
                              source_length_limit=(1.5, 1)).length_limit(1, 7) == 1 + 10 + 1
    with pytest.raises(zoo.RecipeError, match="source_length_limit"):
        zoo.generate(model, torch.tensor([[3, 4]]), source_length_limit=(-1, 5))


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
    for beams in (1, 3):
        a = zoo.generate(model, src, num_beams=beams, max_new_tokens=10)
        b = zoo.generate(model, src, num_beams=beams, max_new_tokens=10, use_cache=False)
        assert torch.equal(a, b)


def test_greedy_is_the_argmax_of_each_step():
    model = tiny()
    src = torch.randint(3, 8, (2, 5))
    out = zoo.generate(model, src, max_new_tokens=6)
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


def _exhaustive_best(model, src, vocab, max_len, penalty):
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
            norm = score / penalty(length)
            if norm > best[0]:
                best = (norm, list(seq))
    return best


@pytest.mark.parametrize("form,alpha", [("gnmt", 0.0), ("gnmt", 0.6), ("transformers", 1.0)])
def test_beam_search_as_wide_as_the_vocabulary_finds_the_exact_best(form, alpha):
    vocab, max_len = 5, 3
    model = tiny(vocab)
    penalty = (lambda n: length_penalty(n, alpha)) if form == "gnmt" else (lambda n: n ** alpha)
    for seed in range(3):
        src = torch.randint(3, vocab, (1, 4), generator=torch.Generator().manual_seed(seed))
        expected_score, expected = _exhaustive_best(model, src, vocab, max_len, penalty)
        out, scores = zoo.generate(model, src, num_beams=vocab * vocab, max_new_tokens=max_len,
                                   length_penalty=alpha, length_penalty_form=form,
                                   early_stopping="never", return_scores=True)
        got = out[0].tolist()
        got = got[: got.index(EOS) + 1] if EOS in got else got[:max_len]
        assert got == expected
        assert scores[0].item() == pytest.approx(expected_score, rel=1e-3, abs=1e-4)


@pytest.mark.parametrize("form", ["gnmt", "transformers"])
@pytest.mark.parametrize("early", [True, False, "never"])
def test_batched_beam_equals_one_at_a_time(form, early):
    model = tiny(16)
    src = torch.randint(3, 16, (3, 6))
    settings = dict(num_beams=3, max_new_tokens=7, length_penalty_form=form,
                    early_stopping=early)
    together = zoo.generate(model, src, **settings)
    for b in range(3):
        alone = zoo.generate(model, src[b:b + 1], **settings)
        width = alone.shape[1]
        assert together[b, :width].tolist() == alone[0].tolist()
        assert (together[b, width:] == model.pad_id).all()


def test_sampling_is_seeded_and_low_temperature_is_greedy():
    model = tiny(16)
    src = torch.randint(3, 16, (2, 6))
    a = zoo.generate(model, src, do_sample=True, seed=1, max_new_tokens=8)
    b = zoo.generate(model, src, do_sample=True, seed=1, max_new_tokens=8)
    c = zoo.generate(model, src, do_sample=True, generator=torch.Generator().manual_seed(1),
                     max_new_tokens=8)
    assert torch.equal(a, b) and torch.equal(a, c)
    runs = {tuple(zoo.generate(model, src, do_sample=True, seed=s,
                               max_new_tokens=8).flatten().tolist()) for s in range(6)}
    assert len(runs) > 1  # the seed matters
    cold = zoo.generate(model, src, do_sample=True, temperature=1e-4, max_new_tokens=8)
    assert torch.equal(cold, zoo.generate(model, src, max_new_tokens=8))


def test_a_stream_gives_generates_tokens_step_by_step():
    model = tiny(16)
    src = torch.randint(3, 16, (3, 6))
    steps = list(zoo.stream(model, src, max_new_tokens=9))
    assert all(step.shape == (3,) for step in steps)
    assert torch.equal(torch.stack(steps, 1), zoo.generate(model, src, max_new_tokens=9))
    sampled = list(zoo.stream(model, src, do_sample=True, seed=4, max_new_tokens=9))
    assert torch.equal(torch.stack(sampled, 1),
                       zoo.generate(model, src, do_sample=True, seed=4, max_new_tokens=9))
    with pytest.raises(zoo.RecipeError, match="beam search .*chooses only at its end"):
        next(zoo.stream(model, src, num_beams=4))


@pytest.mark.parametrize("seed", [-1, 2**32, 2**32 + 7, 2**64])
def test_a_seed_the_generator_cannot_keep_is_refused_by_name(seed):
    # torch's CPU generator keeps 32 bits: 2**32 + 7 drew seed 7's tokens, 2**64 overflowed
    model = tiny(16)
    with pytest.raises(zoo.RecipeError, match="seed"):
        zoo.generate(model, torch.tensor([[3, 4]]), do_sample=True, seed=seed)
    assert torch.equal(zoo.generate(model, torch.tensor([[3, 4]]), do_sample=True,
                                    seed=2**32 - 1, max_new_tokens=4),
                       zoo.generate(model, torch.tensor([[3, 4]]), do_sample=True,
                                    seed=2**32 - 1, max_new_tokens=4))


def test_settings_that_are_wrong_are_refused_by_name():
    model = tiny(16)
    src = torch.randint(3, 16, (1, 6))
    with pytest.raises(zoo.RecipeError, match="'num_beam' is not a generation setting. "
                                              "Did you mean 'num_beams'"):
        zoo.generate(model, src, num_beam=3)
    with pytest.raises(zoo.RecipeError, match="temperature"):
        zoo.generate(model, src, do_sample=True, temperature=0)
    with pytest.raises(zoo.RecipeError, match="beam sampling"):
        zoo.generate(model, src, do_sample=True, num_beams=2)
    with pytest.raises(zoo.RecipeError, match=r"token ids \[40\], past the model's vocabulary"):
        zoo.generate(model, src, eos_ids=(40,))
    vit = zoo.build("vit-tiny-patch4-28")
    with pytest.raises(zoo.RecipeError, match="does not generate"):
        zoo.generate(vit, src)


def test_the_settings_travel_with_a_saved_model(tmp_path):
    model = tiny(16)
    model.generation = model.generation.model_copy(update={"num_beams": 3, "eos_ids": (5,)})
    zoo.save_pretrained(model, tmp_path / "m")
    loaded = zoo.build(f"local-dir:{tmp_path / 'm'}")
    assert loaded.generation == model.generation
    src = torch.randint(3, 16, (2, 6))
    assert torch.equal(loaded.generate(src), model.generate(src))


def test_the_first_functions_still_work_and_say_what_replaced_them():
    model = tiny(16)
    src = torch.randint(3, 16, (2, 6))
    with pytest.warns(DeprecationWarning, match="zoo.decoding.greedy is deprecated"):
        old = zoo.plugin_api.greedy(model, src, max_new_tokens=5, bos_id=BOS, eos_id=EOS)
    assert torch.equal(old, zoo.generate(model, src, max_new_tokens=5))
    with pytest.warns(DeprecationWarning, match="beam_search is deprecated"):
        old = zoo.plugin_api.beam_search(model, src, beam_size=3, max_new_tokens=5, bos_id=BOS,
                                     eos_id=EOS, alpha=0.2)
    assert torch.equal(old, zoo.generate(model, src, num_beams=3, max_new_tokens=5,
                                         length_penalty=0.2))
    with pytest.warns(DeprecationWarning, match="old names"):
        old = model.generate(src, strategy="beam", beam_size=3, max_new_tokens=5, bos_id=BOS,
                             eos_id=EOS)
    assert torch.equal(old, zoo.generate(model, src, num_beams=3, max_new_tokens=5))
    with pytest.warns(DeprecationWarning, match="sample is deprecated"):
        old = zoo.plugin_api.sample(model, src, max_new_tokens=5, bos_id=BOS, eos_id=EOS,
                                generator=torch.Generator().manual_seed(2), top_k=4)
    assert torch.equal(old, zoo.generate(model, src, do_sample=True, top_k=4, max_new_tokens=5,
                                         generator=torch.Generator().manual_seed(2)))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError,
                                                         match="unknown decoding strategy 'beem'"):
        model.generate(src, strategy="beem")


@pytest.mark.parametrize("groups_queries", [True, False])
def test_beams_sharing_one_cross_attention_cache_equal_beams_with_their_own(groups_queries):
    # the step after DecoderCache.spread (one cross-attention row per source, its beams
    # attended together as one query sequence) against every beam with its own copy;
    # an attention that does not group its queries gets the rows repeated instead
    model = tiny(16)
    for layer in model.decoder.layers:
        for m in layer.modules():
            if isinstance(m, zoo.plugin_api.MultiHeadAttention):
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


def test_a_decoding_past_the_models_positions_is_refused_before_it_starts():
    """Learned positions hold max_len rows: a prompt and max_new_tokens (or a source, or
    a translation's length) past them is one RecipeError naming the numbers, up to the
    last position accepted (the last new token is never read)."""
    lm = zoo.build("gpt2-tiny", max_len=16).eval()
    prompt = torch.randint(5, 50, (2, 5), generator=torch.Generator().manual_seed(0))
    assert zoo.generate(lm, prompt, max_new_tokens=12, min_new_tokens=12).shape == (2, 12)
    with pytest.raises(zoo.RecipeError, match=r"5 tokens and max_new_tokens=13 need 17 "
                                              r"positions .* past the 16 this model reads .* "
                                              r"max_new_tokens=12 at most"):
        zoo.generate(lm, prompt, max_new_tokens=13)
    with pytest.raises(zoo.RecipeError, match="the prompt holds 17 tokens, past the 16"):
        zoo.generate(lm, torch.randint(5, 50, (1, 17)), max_new_tokens=1)
    assert zoo.build("gpt2-tiny").max_positions == 256
    assert zoo.build("llama-tiny").max_positions is None  # RoPE: any position
    s2s = zoo.build("transformer-tiny", positional="learned", max_len=16).eval()
    source = torch.randint(5, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    assert zoo.generate(s2s, source, max_new_tokens=16, min_new_tokens=16).shape[1] == 16
    with pytest.raises(zoo.RecipeError, match="max_new_tokens=17 .* needs 17 positions, past "
                                              "the 16 this model's decoder reads"):
        zoo.generate(s2s, source, max_new_tokens=17)
    with pytest.raises(zoo.RecipeError, match="the sources hold 17 tokens, past the 16"):
        zoo.generate(s2s, torch.randint(5, 50, (1, 17)), max_new_tokens=2)


@pytest.mark.parametrize("setting,value,says", [
    ("temperature", True, "a bool is never a number"),
    ("temperature", "0.7", "a number in quotes is text"),
    ("do_sample", "yes", "do_sample: Input should be a valid boolean"),
    ("max_new_tokens", 5.0, "an integer is written without a decimal point"),
    ("top_k", True, "a bool is never a number"),
])
def test_a_generation_setting_of_another_type_is_refused(setting, value, says):
    """Generation settings are typed as recipes are: no bool or quoted number for a
    number, no word for a bool (temperature=True, '0.7' and do_sample='yes' were taken)."""
    lm = zoo.build("gpt2-tiny").eval()
    prompt = torch.randint(5, 50, (1, 4), generator=torch.Generator().manual_seed(0))
    with pytest.raises(zoo.RecipeError, match=says):
        zoo.generate(lm, prompt, **{setting: value, "do_sample": True} if setting != "do_sample"
                     else {setting: value})
    with pytest.raises(zoo.RecipeError, match=says):
        zoo.decoding.parse_settings({**lm.generation.model_dump(), setting: value}, "a file's")
