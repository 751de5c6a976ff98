"""A plugin of the corpus of earlier releases, zoo-plugin-suppress (written against the
docs of 2f93794, the commit that made decoding rules a plugin family): its two rules,
``suppress_tokens`` and ``begin_suppress_tokens``, keep working. Each is held to an
independent reference: transformers' SuppressTokensLogitsProcessor and
SuppressTokensAtBeginLogitsProcessor on the same logits, a greedy loop over the zoo
model's own logits through those processors, and transformers' ``generate`` on a
GPT-2 folder whose generation_config.json holds both settings."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import zoo  # noqa: E402
from zoo.decoding import GenerationSettings  # noqa: E402
from zoo.decoding.rules import Rules  # noqa: E402
from zoo.plugin_api import Span  # noqa: E402

from .conftest import plugins_from  # noqa: E402
from .language_models import END, left_padded, save_language_model  # noqa: E402

P = transformers.generation.logits_process
BOS, EOS = 1, 2


@pytest.fixture
def suppress(earlier_site, monkeypatch):
    """The corpus of earlier releases installed, zoo-plugin-suppress among it."""
    with plugins_from(earlier_site, monkeypatch):
        yield


def _histories(rows=6, length=5, vocab=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (rows, length), generator=g)
    tokens[:, 0] = BOS
    return tokens, torch.randn(rows, vocab, generator=g) * 3


def _settings(**rules):
    return GenerationSettings(start_id=BOS, eos_ids=(EOS,), pad_id=0, **rules)


def test_the_plugin_registers_both_rules_where_its_docs_put_them(suppress):
    plugins = {p.name: p for p in zoo.list_plugins()}
    assert "suppress" in plugins and plugins["suppress"].error is None, plugins.get("suppress")
    for name, order in (("suppress-tokens", 700), ("begin-suppress-tokens", 800)):
        component = zoo.get_component("rule", name)
        assert component.plugin == "suppress"
        assert component.capabilities.order == order
        assert component.capabilities.sampling is False


def test_each_rule_equals_transformers_processor_on_the_same_logits(suppress):
    ids = [3, 7, 11, 30]  # 30: past the vocabulary, which transformers leaves alone
    for length in (1, 2, 5):
        tokens, scores = _histories(length=length)
        # the component alone, built as the contract says
        rule = zoo.get_component("rule", "suppress-tokens").build(
            {"suppress_tokens": ids}, span=Span(1, 20, 0))
        ref = P.SuppressTokensLogitsProcessor(ids)(tokens, scores.clone())
        torch.testing.assert_close(rule(tokens, scores.clone()), ref, rtol=0, atol=0)
        begin = zoo.get_component("rule", "begin-suppress-tokens").build(
            {"begin_suppress_tokens": [EOS, 5]}, span=Span(1, 20, 0))
        ref = P.SuppressTokensAtBeginLogitsProcessor([EOS, 5], begin_index=1)(tokens,
                                                                               scores.clone())
        torch.testing.assert_close(begin(tokens, scores.clone()), ref, rtol=0, atol=0)


CASES = [  # zoo's settings, transformers' processors in generate's order, start
    (dict(rule_settings={"suppress_tokens": (3, 7, 11)}),
     lambda: [P.SuppressTokensLogitsProcessor([3, 7, 11])], 1),
    (dict(rule_settings={"begin_suppress_tokens": (EOS, 5)}),
     lambda: [P.SuppressTokensAtBeginLogitsProcessor([EOS, 5], 1)], 1),
    # a forced first token: transformers suppresses at the step after it
    (dict(forced_bos_id=4, rule_settings={"begin_suppress_tokens": (EOS, 5)}),
     lambda: [P.ForcedBOSTokenLogitsProcessor(4),
              P.SuppressTokensAtBeginLogitsProcessor([EOS, 5], 2)], 1),
    # a prompt of 5 tokens (a decoder-only model): the first new token is the 6th
    (dict(rule_settings={"begin_suppress_tokens": (EOS, 5)}),
     lambda: [P.SuppressTokensAtBeginLogitsProcessor([EOS, 5], 5)], 5),
    # with zoo's own rules, in transformers' order, renormalized last
    (dict(repetition_penalty=1.3, forbidden_ids=(9,), renormalize=True,
          rule_settings={"suppress_tokens": (3, 7), "begin_suppress_tokens": (EOS, 5)}),
     lambda: [P.RepetitionPenaltyLogitsProcessor(1.3),
              P.NoBadWordsLogitsProcessor([[9]], eos_token_id=EOS),
              P.SuppressTokensLogitsProcessor([3, 7]),
              P.SuppressTokensAtBeginLogitsProcessor([EOS, 5], 1),
              P.LogitNormalization()], 1),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_rules_in_a_decoding_equal_transformers_processors(suppress, case):
    settings, processors, start = CASES[case]
    for length in (start, start + 1, start + 4):
        tokens, scores = _histories(length=length)
        ours = Rules(_settings(**settings), start).process(tokens, scores.clone())
        ref = P.LogitsProcessorList(processors())(tokens, scores.clone())
        torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6)


def _reference_greedy(model, src, processors, steps):
    """Greedy decoding over the zoo model's own logits (the whole prefix each step),
    through transformers' processors: the tokens up to and with each row's end."""
    tokens = torch.full((src.shape[0], 1), BOS)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(src, tokens)[:, -1]
            scores = P.LogitsProcessorList(processors)(tokens, logits)
            tokens = torch.cat([tokens, scores.argmax(-1, keepdim=True)], dim=1)
    return [_until_end(row) for row in tokens[:, 1:].tolist()]


def _until_end(row):
    return row[:row.index(EOS) + 1] if EOS in row else row


def test_generate_never_emits_a_suppressed_token(suppress):
    torch.manual_seed(0)
    model = zoo.build("transformer-tiny", dropout=0.0).eval()
    src = torch.randint(3, 1000, (3, 7))
    plain = zoo.generate(model, src, max_new_tokens=12)
    often = [t for t in set(plain.flatten().tolist()) if t not in (0, EOS)]
    assert often
    out = zoo.generate(model, src, max_new_tokens=12, suppress_tokens=often)
    assert not set(out.flatten().tolist()) & set(often)
    assert [_until_end(r) for r in out.tolist()] == _reference_greedy(
        model, src, [P.SuppressTokensLogitsProcessor(often)], 12)
    for other in (dict(num_beams=3), dict(do_sample=True, seed=3)):
        out = zoo.generate(model, src, max_new_tokens=12, suppress_tokens=often, **other)
        assert not set(out.flatten().tolist()) & set(often), other
    # the first step only: no row begins with a suppressed first token, and the rest
    # is transformers' processor over the same logits
    first = sorted(set(plain[:, 0].tolist()))
    out = zoo.generate(model, src, max_new_tokens=12, begin_suppress_tokens=first)
    assert not set(out[:, 0].tolist()) & set(first)
    assert [_until_end(r) for r in out.tolist()] == _reference_greedy(
        model, src, [P.SuppressTokensAtBeginLogitsProcessor(first, 1)], 12)
    # a model carries the settings, and a call that sets them to None switches them off
    model.generation = model.generation.model_copy(
        update={"rule_settings": {"suppress_tokens": tuple(often)}})
    assert torch.equal(zoo.generate(model, src, max_new_tokens=12),
                       zoo.generate(model, src, max_new_tokens=12, suppress_tokens=often))
    assert torch.equal(zoo.generate(model, src, max_new_tokens=12, suppress_tokens=None), plain)


def test_a_misspelt_or_wrong_setting_is_refused_by_name(suppress):
    model = zoo.build("transformer-tiny", dropout=0.0).eval()
    src = torch.randint(3, 1000, (1, 5))
    with pytest.raises(zoo.RecipeError, match="suppress_token"):
        zoo.generate(model, src, max_new_tokens=3, suppress_token=[5])
    with pytest.raises(zoo.RecipeError, match="suppress_tokens"):
        zoo.generate(model, src, max_new_tokens=3, suppress_tokens=[-4])


def _generation_config(folder, generation):
    """A GPT-2 folder's generation_config.json, with ``generation`` added."""
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": END["gpt2"], "eos_token_id": END["gpt2"], **generation}))


def test_a_folder_with_suppress_tokens_is_refused_without_the_plugin(tmp_path):
    save_language_model("gpt2", tmp_path / "gpt2")
    _generation_config(tmp_path / "gpt2", {"suppress_tokens": [5, 7]})
    with pytest.raises(zoo.FormatError, match="suppress_tokens"):
        zoo.build(f"local-dir:{tmp_path / 'gpt2'}")


def test_a_folders_suppress_tokens_give_transformers_generate_tokens(suppress, tmp_path):
    folder = tmp_path / "gpt2"
    hf = save_language_model("gpt2", folder)
    _generation_config(folder, {})
    prompts, mask = left_padded()
    new = 10
    with torch.no_grad():
        plain = hf.generate(prompts, attention_mask=mask, pad_token_id=END["gpt2"],
                            max_new_tokens=new, do_sample=False)[:, prompts.shape[1]:]
    # suppress the tokens greedy decoding makes most, and the first token of each row
    counts = torch.bincount(plain.flatten(), minlength=96)
    counts[END["gpt2"]] = 0
    suppressed = counts.topk(3).indices.tolist()
    begin = sorted(set(plain[:, 0].tolist()) - set(suppressed) - {END["gpt2"]})
    generation = {"suppress_tokens": suppressed, "begin_suppress_tokens": begin}
    _generation_config(folder, generation)

    reference = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    assert reference.generation_config.suppress_tokens == suppressed
    with torch.no_grad():
        ref = reference.generate(prompts, attention_mask=mask, pad_token_id=END["gpt2"],
                                 max_new_tokens=new, do_sample=False)[:, prompts.shape[1]:]
    assert not torch.equal(ref, plain)  # the settings changed transformers' tokens

    model = zoo.build(f"local-dir:{folder}").eval()
    assert {k: list(v) for k, v in model.generation.rule_settings.items()} == generation
    out = zoo.generate(model, prompts, padding_mask=mask == 0, max_new_tokens=new)
    assert out.tolist() == ref.tolist()
    assert not set(out.flatten().tolist()) & set(suppressed)
    assert not set(out[:, 0].tolist()) & set(begin)
