"""Decoding, zoo's one engine (zoo.generate): the cache changes speed, never results;
beam search finds the best sequence (checked against exhaustive search); the rules and
the sampling filters equal transformers' logits processors on the same logits; the
sampler draws from the distribution it says (a chi-square test); the old functions
still work, with a deprecation warning."""

from __future__ import annotations

import itertools

import pytest
import torch

import zoo
from zoo.decoding import GenerationSettings, filter_logits, length_penalty
from zoo.decoding.rules import Rules
from zoo.decoding.search import one_per_row

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


# -- the rules and filters against transformers' own processors ---------------------------
def _histories(rows=6, length=5, vocab=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, length), generator=g)
    tokens[:, 0] = BOS
    if length == 5:
        tokens[0, 1:] = torch.tensor([7, 8, 7, 8])  # a repeated bigram for no_repeat_ngram
    return tokens, torch.randn(rows, vocab, generator=g) * 3


RULES = [
    dict(repetition_penalty=1.7),
    dict(repetition_penalty=0.6),
    dict(no_repeat_ngram_size=2),
    dict(no_repeat_ngram_size=3),
    dict(forbidden_ids=(5, 9)),
    dict(min_length=8),
    dict(min_new_tokens=6),
    dict(forced_bos_id=4),
    dict(forced_eos_id=EOS, max_length=6),
    dict(repetition_penalty=1.2, forbidden_ids=(3,), min_length=9, renormalize=True),
]


PROCESSORS = {  # each setting's transformers processor
    "repetition_penalty": lambda p, s: p.RepetitionPenaltyLogitsProcessor(s["repetition_penalty"]),
    "no_repeat_ngram_size": lambda p, s: p.NoRepeatNGramLogitsProcessor(
        s["no_repeat_ngram_size"]),
    "forbidden_ids": lambda p, s: p.NoBadWordsLogitsProcessor(
        [[i] for i in s["forbidden_ids"]], eos_token_id=EOS),
    "min_length": lambda p, s: p.MinLengthLogitsProcessor(s["min_length"], EOS),
    "min_new_tokens": lambda p, s: p.MinNewTokensLengthLogitsProcessor(1, s["min_new_tokens"],
                                                                        EOS),
    "forced_bos_id": lambda p, s: p.ForcedBOSTokenLogitsProcessor(s["forced_bos_id"]),
    "forced_eos_id": lambda p, s: p.ForcedEOSTokenLogitsProcessor(s["max_length"], EOS),
    "temperature": lambda p, s: p.TemperatureLogitsWarper(s["temperature"]),
    "top_k": lambda p, s: p.TopKLogitsWarper(s["top_k"]),
    "top_p": lambda p, s: p.TopPLogitsWarper(s["top_p"]),
    "min_p": lambda p, s: p.MinPLogitsWarper(s["min_p"]),
    "typical_p": lambda p, s: p.TypicalLogitsWarper(s["typical_p"]),
    "epsilon_cutoff": lambda p, s: p.EpsilonLogitsWarper(s["epsilon_cutoff"]),
    "eta_cutoff": lambda p, s: p.EtaLogitsWarper(s["eta_cutoff"]),
    "renormalize": lambda p, s: p.LogitNormalization(),
}


def _transformers_processors(settings: dict):
    """transformers' processors for ``settings``, in the order transformers applies them
    (PROCESSORS is written in that order)."""
    p = pytest.importorskip("transformers").generation.logits_process
    return p.LogitsProcessorList([make(p, settings) for key, make in PROCESSORS.items()
                                  if key in settings])


@pytest.mark.parametrize("settings", RULES, ids=lambda s: ",".join(s))
def test_the_rules_equal_transformers_logits_processors(settings):
    for length in (1, 5):  # right after the start token (forced BOS), and later
        tokens, scores = _histories(length=length)
        if "forced_eos_id" in settings:
            settings = {**settings, "max_length": length + 1}  # its last step
        rules = Rules(GenerationSettings(start_id=BOS, eos_ids=(EOS,), pad_id=0, **settings), 1)
        ours = rules.process(tokens, scores)
        ref = _transformers_processors(settings)(tokens, scores.clone())
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)


FILTERS = [dict(temperature=0.5), dict(temperature=1.8), dict(top_k=1), dict(top_k=5),
           dict(top_p=0.3), dict(top_p=0.92), dict(min_p=0.05), dict(min_p=0.5),
           dict(typical_p=0.2), dict(typical_p=0.9), dict(epsilon_cutoff=0.02),
           dict(epsilon_cutoff=0.3), dict(eta_cutoff=0.01), dict(eta_cutoff=0.2),
           dict(temperature=0.7, top_k=8, top_p=0.9, min_p=0.02),
           dict(temperature=1.3, top_k=30, typical_p=0.8, epsilon_cutoff=0.01, eta_cutoff=0.05)]


@pytest.mark.parametrize("settings", FILTERS,
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_the_sampling_filters_equal_transformers_warpers(settings):
    tokens, scores = _histories(rows=32, vocab=50, seed=3)
    rules = Rules(GenerationSettings(start_id=BOS, eos_ids=(EOS,), pad_id=0, do_sample=True,
                                     **settings), 1)
    ours = rules.warp(scores)
    ref = _transformers_processors(settings)(tokens, scores.clone())
    assert torch.equal(ours.isfinite(), ref.isfinite())
    torch.testing.assert_close(ours[ours.isfinite()], ref[ref.isfinite()], rtol=0, atol=1e-6)


def test_every_built_in_rule_is_held_to_a_transformers_processor():
    # a built-in rule added without a transformers reference above fails here
    from zoo.registry import registry

    settings_read = {key for c in registry.list("rule") if c.plugin == "rules"
                     for key in c.settings_model.model_fields}
    checked = set(PROCESSORS) | {"eos_ids"}  # min-length's end tokens, with min_length
    assert settings_read - checked == set()
    tested = {k for case in RULES + FILTERS for k in case}
    assert set(PROCESSORS) - tested == set()


def test_the_rules_run_in_transformers_order():
    from zoo.registry import registry

    def order(sampling):
        rules = [c for c in registry.list("rule") if c.capabilities.sampling == sampling]
        return [c.name for c in sorted(rules, key=lambda c: c.capabilities.order)]

    assert order(False) == ["repetition-penalty", "no-repeat-ngram", "forbidden-tokens",
                            "min-length", "forced-bos", "forced-eos", "renormalize"]
    assert order(True) == ["temperature", "top-k", "top-p", "min-p", "typical", "epsilon",
                           "eta"]


class BanAfter:
    """A plugin's decoding rule, as a third party writes it from the docs: once a row
    holds ``ban_after`` tokens, the token ``ban_token`` never comes again."""

    @staticmethod
    def rule_class():
        from pydantic import BaseModel, ConfigDict, Field

        from zoo.plugin_api import Rule

        class BanToken(Rule):
            class Settings(BaseModel):
                model_config = ConfigDict(extra="forbid")
                ban_token: int | None = Field(None, ge=0)
                ban_after: int = Field(1, ge=1)

            def __call__(self, tokens, scores):
                if tokens.shape[1] >= self.settings.ban_after:
                    scores[:, self.settings.ban_token] = float("-inf")
                return scores

        return BanToken

    @zoo.hookimpl
    def register_rules(self, register):
        register("ban-token", self.rule_class(), description="a test's rule",
                 capabilities={"order": 350})


@pytest.fixture
def ban_rule(fresh_registry):
    return zoo.register_plugin(BanAfter(), name="ban-after")


def test_a_plugin_adds_a_decoding_rule_that_zoo_generate_runs(ban_rule, tmp_path):
    model = tiny(16)
    src = torch.randint(3, 16, (4, 6), generator=torch.Generator().manual_seed(1))
    plain = zoo.generate(model, src, max_new_tokens=8)
    common = int(plain[plain != model.pad_id].mode().values)
    banned = zoo.generate(model, src, max_new_tokens=8, ban_token=common)
    assert common in plain.flatten().tolist() and common not in banned.flatten().tolist()
    # the rule's own setting is validated by its model, and named when wrong
    with pytest.raises(zoo.RecipeError, match="ban_after"):
        zoo.generate(model, src, ban_token=common, ban_after=0)
    # sampling and beams go through it too, and the setting travels with a saved model
    sampled = zoo.generate(model, src, do_sample=True, seed=0, max_new_tokens=8,
                           ban_token=common)
    assert common not in sampled.flatten().tolist()
    assert common not in zoo.generate(model, src, num_beams=3, max_new_tokens=8,
                                      ban_token=common).flatten().tolist()
    model.generation = zoo.decoding.settings_for(model, ban_token=common)
    zoo.save_pretrained(model, tmp_path / "m")
    loaded = zoo.build(f"local-dir:{tmp_path / 'm'}")
    assert loaded.generation.rule_settings == {"ban_token": common}
    assert torch.equal(zoo.generate(loaded, src, max_new_tokens=8), banned)


def test_a_rule_that_did_not_load_is_never_left_out_silently(fresh_registry):
    # a wheel without zoo's rules plugin (or a plugin that failed) must not decode
    # without repetition penalty or top-p as if they had been followed
    from zoo.registry import registry

    model = tiny(16)
    src = torch.randint(3, 16, (1, 6))
    zoo.generate(model, src, do_sample=True, top_p=0.5, max_new_tokens=3)
    registry.unregister("rule", "top-p")
    with pytest.raises(zoo.RecipeError, match=r"no installed decoding rule follows the "
                                              r"generation settings \['top_p'\]"):
        zoo.generate(model, src, do_sample=True, top_p=0.5, max_new_tokens=3)
    zoo.generate(model, src, max_new_tokens=3)  # greedy asks nothing of it


def test_a_setting_no_rule_reads_is_refused_by_name():
    model = tiny(16)
    src = torch.randint(3, 16, (1, 6))
    with pytest.raises(zoo.RecipeError, match="'ban_token' is not a generation setting"):
        zoo.generate(model, src, ban_token=3)
    with pytest.raises(zoo.RecipeError, match="no installed decoding rule reads"):
        zoo.generate(model, src, rule_settings={"ban_token": 3})
    # typical sampling is a setting of its own, not a misspelt top_p
    settings = zoo.decoding.settings_for(model, do_sample=True, typical_p=0.5)
    assert settings.typical_p == 0.5


def test_filter_logits_keeps_what_it_says():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.10]]))
    assert filter_logits(logits, top_k=2).isfinite().tolist() == [[True, True, False, False]]
    # top-p 0.7: the two most likely hold 0.75 and are the smallest such set
    assert filter_logits(logits, top_p=0.7).isfinite().tolist() == [[True, True, False, False]]
    # min-p 0.4: at least 0.2, i.e. 0.4 times the most likely's 0.5
    assert filter_logits(logits, min_p=0.4).isfinite().tolist() == [[True, True, False, False]]
    assert filter_logits(logits, top_p=0.01).isfinite().tolist() == [[True, False, False, False]]


class _FixedStep:
    """A step whose next-token logits are always the same (the sampler's test)."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(tokens.shape[0], -1)


# the chi-square distribution's 0.999 quantiles, for the degrees of freedom used below
CHI2_999 = {3: 16.27, 5: 20.52, 7: 24.32}


@pytest.mark.parametrize("settings,df", [(dict(), 7), (dict(temperature=0.6, top_k=6), 5),
                                          (dict(top_p=0.8), 3)])
def test_the_sampler_draws_from_the_filtered_distribution(settings, df):
    logits = torch.tensor([2.0, 1.5, 1.0, 0.6, 0.3, 0.0, -0.4, -1.0])
    s = GenerationSettings(start_id=0, eos_ids=(7,), pad_id=0, do_sample=True,
                           max_new_tokens=1, **settings)
    rules = Rules(s, 1)
    probs = rules.warp(logits[None]).softmax(-1)[0]
    kept = probs > 0
    assert int(kept.sum()) - 1 == df
    draws = 40_000
    first = torch.zeros(draws, 1, dtype=torch.long)
    (tokens,) = list(one_per_row(_FixedStep(logits), first, Rules(s, 1),
                                 torch.Generator().manual_seed(7)))
    counts = torch.bincount(tokens, minlength=len(logits)).double()
    assert counts[~kept].sum() == 0  # nothing filtered is ever drawn
    expected = probs[kept].double() * draws
    chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_999[df], (chi2, counts.tolist(), expected.tolist())


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
