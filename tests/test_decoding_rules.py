"""The rules on each step's scores and the sampling filters of zoo's decoding: each equal
to transformers' own logits processor or warper on the same logits, run in transformers'
order; a plugin's rule runs in zoo.generate, one that did not load is never left out
silently; the sampler draws from the distribution it says (a chi-square test)."""

from __future__ import annotations

import types

import pytest
import torch

import zoo
import zoo.plugin_api
import zoo.testing
from zoo.registry import registry
from zoo.decoding import GenerationSettings, filter_logits
from zoo.decoding.rules import Rules
from zoo.decoding.search import one_per_row

from .test_decoding import BOS, EOS, tiny


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


@pytest.mark.parametrize("top_k", [50, 4000])
def test_top_p_after_top_k_sorts_only_what_is_left_and_keeps_transformers_nucleus(top_k):
    """After top-k 50 of a 32,000-token vocabulary top-p sorts the 50 left; after 4,000, all
    (more than a quarter would be left in a vocabulary of 12,000): the same tokens as
    transformers' warpers, which sort the whole vocabulary."""
    vocab = 32000 if top_k == 50 else 12000
    tokens, scores = _histories(rows=8, vocab=vocab, seed=5)
    settings = dict(temperature=0.8, top_k=top_k, top_p=0.95)
    rules = Rules(GenerationSettings(start_id=BOS, eos_ids=(EOS,), pad_id=0, do_sample=True,
                                     **settings), 1)
    ours = rules.warp(scores * 4)  # sharper than randn: nuclei of a few to a few dozen
    ref = _transformers_processors(settings)(tokens, scores.clone() * 4)
    assert torch.equal(ours.isfinite(), ref.isfinite())
    kept = ours.isfinite().sum(-1)
    assert kept.min() >= 1 and kept.max() < top_k
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


def test_a_plugin_rule_extends_a_built_in_one_by_replacing_it(fresh_registry):
    # min-p with transformers' min_tokens_to_keep: the plugin's rule reads the built-in's
    # setting beside its own and stands in for it (replaces), so min-p runs once, its way
    from pydantic import BaseModel, ConfigDict, Field
    from transformers.generation.logits_process import MinPLogitsWarper

    class MinPKeeping(zoo.plugin_api.Rule):
        class Settings(BaseModel):
            model_config = ConfigDict(extra="forbid")
            min_p: float | None = Field(None, ge=0, le=1)
            min_tokens_to_keep: int = Field(1, ge=1)

        example = {"min_p": 0.3, "min_tokens_to_keep": 4}
        reference = staticmethod(lambda tokens, scores, s: MinPLogitsWarper(
            s.min_p, min_tokens_to_keep=s.min_tokens_to_keep)(tokens, scores))

        @classmethod
        def wanted(cls, settings, span):
            return bool(settings.min_p)

        def __call__(self, tokens, scores):
            probs = scores.softmax(-1)
            drop = probs < self.settings.min_p * probs.amax(-1, keepdim=True)
            kept = probs.topk(self.settings.min_tokens_to_keep, -1).indices
            drop.scatter_(-1, kept, False)
            return scores.masked_fill_(drop, float("-inf"))

    def rules(register):
        register("min-p-keeping", MinPKeeping, capabilities={"sampling": True, "order": 450,
                                                             "replaces": ("min-p",)})

    zoo.register_plugin(types.SimpleNamespace(register_rules=zoo.hookimpl(rules)),
                        name="keeping")
    assert zoo.testing.check_component("rule", "min-p-keeping") == {
        "rule_off_by_default": "passed", "rule_scores": "passed",
        "rule_refuses_bad_values": "passed", "rule_place": "passed"}
    tokens, scores = _histories()
    settings = GenerationSettings(start_id=BOS, eos_ids=(EOS,), pad_id=0, do_sample=True, top_k=None,
                                  min_p=0.5, rule_settings={"min_tokens_to_keep": 5})
    built = Rules(settings, start=tokens.shape[1])
    assert [type(r).__name__ for r in built.filters] == ["MinPKeeping"]  # min-p not twice
    expected = MinPLogitsWarper(0.5, min_tokens_to_keep=5)(tokens, scores.clone())
    torch.testing.assert_close(built.warp(scores.clone(), tokens), expected)
    # the built-in runs again once the plugin is gone
    registry.unregister("rule", "min-p-keeping", "keeping")
    plain = settings.model_copy(update={"rule_settings": {}})
    assert [type(r).__name__ for r in Rules(plain, start=5).filters] == ["MinP"]
