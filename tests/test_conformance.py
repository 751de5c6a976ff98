"""The conformance kit (zoo.testing): every built-in component passes it through the same
function a plugin author calls; the example plugin passes it with its own tests; a
component that breaks a clause it claims is caught, with the clause and the difference."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import zoo
import zoo.testing
from zoo.plugin_api import MultiHeadAttention, boolean_mask

from .conftest import FIXTURES, plugins_from

SMALL = dict(vocab_size=32, d_model=16, n_heads=2, d_ff=32)
KIT_SETTINGS = {  # the built-in architectures at the kit's sizes
    ("architecture", "seq2seq"): dict(SMALL, encoder_layers=1, decoder_layers=1),
    ("architecture", "decoder"): dict(SMALL, layers=2),
    ("architecture", "encoder"): dict(SMALL, layers=2),
    ("architecture", "vit"): dict(image_size=8, patch_size=4, num_classes=3, d_model=16,
                                  n_heads=2, d_ff=32, depth=1),
    ("architecture", "clip"): dict(
        text=dict(SMALL, layers=1, causal=True, pooler=False, norm_placement="pre", pad_id=None),
        vision=dict(image_size=8, patch_size=4, num_classes=0, d_model=16, n_heads=2, d_ff=32,
                    depth=1, patch_bias=False, pre_norm=True),
        projection_dim=8),
}
EVERY_CASE = [pytest.param(case, id=str(case))
              for family in zoo.testing.CHECKS
              for component in zoo.list_components(family)
              for case in zoo.testing.cases(family, component.name,
                                            settings=KIT_SETTINGS.get((family, component.name)))]


@pytest.mark.parametrize("case", EVERY_CASE)
def test_every_built_in_component_passes_the_kit(case):
    outcome = case()
    if outcome.startswith("skipped"):
        assert ("does not claim" in outcome or "CUDA" in outcome or "package" in outcome
                or "takes no n_kv_heads" in outcome or "generates no text" in outcome
                or "no encoder" in outcome or "not transformers" in outcome
                or "no example config" in outcome or "name one, as in" in outcome
                or "describes no data flow" in outcome), outcome
        pytest.skip(outcome)


def test_every_family_with_members_has_checks():
    assert set(zoo.testing.CHECKS) == {"attention", "kernel", "positional", "norm", "ffn",
                                        "block", "loss", "architecture", "task", "format",
                                        "rule"}
    # every format that writes transformers folders gives the kit an example
    writers = [c for c in zoo.list_components("format") if c.capabilities.target ==
               "transformers"]
    assert writers and all(c.load().example for c in writers)
    for family, checks in zoo.testing.CHECKS.items():
        assert all(c.doc for c in checks), family


def test_the_example_plugin_passes_the_kit_in_its_own_tests(plugin_site):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(FIXTURES / "zoo-plugin-example"), str(FIXTURES / "zoo-plugin-example" /
                                                   "kit_checks.py")],
        capture_output=True, text=True, env={**__import__("os").environ,
                                             "PYTHONPATH": str(plugin_site)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
    assert "skipped" in done.stdout  # multi-query claims no KV cache: that check is skipped


def test_the_kit_catches_a_kv_cache_claimed_and_not_honoured(nonconforming_site, monkeypatch):
    with plugins_from(nonconforming_site, monkeypatch):
        with pytest.raises(zoo.testing.ConformanceError) as err:
            zoo.testing.check_component("attention", "forgetful")
        message = str(err.value)
        assert "attention 'forgetful' from plugin 'nonconforming' fails check 'kv_cache' (it " \
               "claims kv_cache)" in message
        assert "decoded with a KVCache: differs by up to" in message
        outcomes = {c.check.name: c for c in zoo.testing.cases("attention", "forgetful")}
        assert outcomes["causal"]() == "passed" and outcomes["padding_mask"]() == "passed"


# -- each clause can fail: components that break one on purpose ---------------------------------
class SeesTheFuture(MultiHeadAttention):
    """Claims causal, attends to every position."""

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=False,
                            key_padding_mask=key_padding_mask, attn_mask=None, device=q.device)
        return self._dense(q, k, v, mask, offset=offset)


class IgnoresPadding(MultiHeadAttention):
    """Claims padding_mask, attends to padded keys."""

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=self.causal, key_padding_mask=None,
                            attn_mask=attn_mask, device=q.device)
        return self._dense(q, k, v, mask, offset=offset)


class SequenceNorm(nn.Module):
    """Normalises over the sequence too: positions see each other."""

    def __init__(self, settings=None, *, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x - x.mean(dim=(-2, -1), keepdim=True))


class QueriesTalk(MultiHeadAttention):
    """Claims groups_queries, yet each output row depends on the other queries."""

    groups_queries = True

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=self.causal,
                            key_padding_mask=key_padding_mask, attn_mask=None, device=q.device)
        return self._dense(q + q.mean(-2, keepdim=True), k, v, mask, offset=offset)


class MisgroupsHeads(MultiHeadAttention):
    """Takes n_kv_heads, yet gives the query heads their shared key/value heads in the
    wrong order, the keys halved."""

    def _shared_heads(self, k, v):
        groups = self.n_heads // self.n_kv_heads
        if groups == 1:
            return k, v
        order = torch.arange(self.n_heads).flip(0) % self.n_kv_heads
        return k[:, order] * 0.5, v[:, order]

    def _attend(self, q, k, v, *, offset, key_padding_mask, attn_mask):
        mask = boolean_mask(q.shape[-2], k.shape[-2], causal=self.causal,
                            key_padding_mask=key_padding_mask, attn_mask=attn_mask,
                            device=q.device)
        return self._dense(q, k, v, mask, offset=offset)


def unscaled_kernel(q, k, v, *, attn_mask=None, is_causal=False, dropout_p=0.0, scale=None):
    """Ignores ``scale``."""
    return zoo.testing.reference_kernel(q, k, v, attn_mask=attn_mask, is_causal=is_causal)


@pytest.mark.parametrize("family,target,caps,check,says", [
    ("attention", SeesTheFuture, {"causal": True}, "causal", "outputs before a changed position"),
    ("attention", IgnoresPadding, {"padding_mask": True}, "padding_mask",
     "outputs of real tokens when padded keys change"),
    ("norm", SequenceNorm, {}, "norm", "at other positions when one position changes"),
    ("attention", QueriesTalk, {"cross_attention": True, "kv_cache": True, "causal": True,
                                "padding_mask": True},
     "grouped_beams", "over a grouped cache"),
    ("kernel", unscaled_kernel, {}, "formula", "scale=0.1: differs by up to"),
    ("attention", MisgroupsHeads, {"causal": True, "kv_cache": True}, "grouped_queries",
     "multi-query attention against its heads repeated"),
])
def test_a_broken_clause_is_named_with_the_difference(fresh_registry, family, target, caps,
                                                      check, says):
    zoo.register_component(family, "broken-on-purpose", target, capabilities=caps)
    case = next(c for c in zoo.testing.cases(family, "broken-on-purpose") if c.check.name == check)
    with pytest.raises(zoo.testing.ConformanceError, match=f"fails check {check!r}.*{says}"):
        case()


class ForgetfulLM(nn.Module):
    """A language model whose cached step forgets everything before the last token."""

    def __init__(self, settings, parts):
        super().__init__()
        self.settings = settings
        self.embed = nn.Embedding(settings.vocab_size, 8)
        self.out = nn.Linear(8, settings.vocab_size)
        self.generation = zoo.decoding.GenerationSettings(start_id=1, eos_ids=(2,), pad_id=0)

    class Settings(zoo.plugin_api.AttentionSettings.__base__):
        vocab_size: int = 32

    def padding_mask(self, tokens):
        return None

    def init_cache(self):
        return zoo.plugin_api.LanguageModelCache(1)

    def forward(self, tokens, padding_mask=None, cache=None):
        x = self.embed(tokens)
        if cache is not None:  # keeps the keys, and never reads them
            cache[0].append(x[:, None], x[:, None])
            return self.out(x)
        return self.out(x.cumsum(1) / torch.arange(1, tokens.shape[1] + 1)[:, None])


class CorruptingGPT2:
    """A GPT-2 writer that swaps two layers' names on the way out."""

    @staticmethod
    def make():
        base = zoo.get_component("format", "gpt2").load()

        class Corrupting(base):
            def export(self, recipe, state, generation):
                config, settings, weights = super().export(recipe, state, generation)
                a, b = "transformer.h.0.mlp.c_fc.weight", "transformer.h.1.mlp.c_fc.weight"
                weights[a], weights[b] = weights[b], weights[a]
                return config, settings, weights

        return Corrupting


def test_the_kit_catches_a_broken_architecture_format_and_task(fresh_registry):
    zoo.register_component("architecture", "forgetful-lm", ForgetfulLM,
                           capabilities={"inputs": "tokens", "outputs": "tokens",
                                         "kind": "language-model"})
    with pytest.raises(zoo.testing.ConformanceError, match="fails check 'architecture_decodes'"
                                                           ".*with a cache"):
        zoo.testing.check_component("architecture", "forgetful-lm")
    zoo.register_component("format", "corrupting", CorruptingGPT2.make(),
                           capabilities={"writes": "transformers"})
    with pytest.raises(zoo.testing.ConformanceError,
                       match="fails check 'format_round_trip'.*read back by zoo"):
        zoo.testing.check_component("format", "corrupting")

    class NoLoss:  # a task of the first contract: no loss, no evaluate
        unit, metric = "tokens", "accuracy"

        def __init__(self, settings, *, seed, workdir):
            pass

    zoo.register_component("task", "no-loss", NoLoss)
    with pytest.raises(zoo.testing.ConformanceError, match="fails check 'task_members'.*loss"):
        zoo.testing.check_component("task", "no-loss")


def test_a_misspelt_kit_setting_is_a_settings_error_before_any_check(fresh_registry):
    with pytest.raises(zoo.RecipeError, match="settings= given for attention 'vanilla'.*"
                                              "unknown key 'scal'.*Did you mean 'scale'"):
        zoo.testing.check_component("attention", "vanilla", settings={"scal": 0.5})
    with pytest.raises(zoo.RecipeError, match="settings= given for attention 'vanilla'"):
        zoo.testing.parametrize("attention", "vanilla", settings={"scale": -1})
    assert zoo.testing.check_component("attention", "vanilla",
                                       settings={"scale": 0.5})["shapes"] == "passed"


# -- rules and blocks: what a plugin declares, the kit holds it to ---------------------------
def _rule(call, *, wanted_at_defaults=False):
    from pydantic import BaseModel, ConfigDict

    class Made(zoo.plugin_api.Rule):
        class Settings(BaseModel):
            model_config = ConfigDict(extra="forbid")
            strength: float = 0.0

        example = {"strength": 2.0}

        @classmethod
        def wanted(cls, settings, span):
            return wanted_at_defaults or settings.strength != 0.0

        def __call__(self, tokens, scores):
            return call(self.settings, scores)

    return Made


@pytest.mark.parametrize("call,caps,wanted,check,says", [
    (lambda s, x: x.log(), {}, False, "rule_scores", "NaN or \\+inf"),
    (lambda s, x: x[:, :-1], {}, False, "rule_scores", "returned Tensor \\(3, 39\\)"),
    (lambda s, x: x, {}, True, "rule_off_by_default", "wanted\\(\\) is True at the defaults"),
    (lambda s, x: x, {"replaces": ("min-q",)}, False, "rule_place",
     "replaces 'min-q', which no installed plugin registers"),
])
def test_the_kit_catches_a_broken_rule(fresh_registry, call, caps, wanted, check, says):
    zoo.register_component("rule", "broken-on-purpose", _rule(call, wanted_at_defaults=wanted),
                           capabilities=caps)
    case = next(c for c in zoo.testing.cases("rule", "broken-on-purpose")
                if c.check.name == check)
    with pytest.raises(zoo.testing.ConformanceError, match=f"fails check {check!r}.*{says}"):
        case()


def test_the_kit_holds_a_rule_to_the_reference_it_names(fresh_registry):
    made = _rule(lambda s, x: x * s.strength)
    made.reference = staticmethod(lambda tokens, scores, s: scores * s.strength)
    zoo.register_component("rule", "scaled", made)
    assert zoo.testing.check_component("rule", "scaled")["rule_scores"] == "passed"
    made.reference = staticmethod(lambda tokens, scores, s: scores * (s.strength + 0.1))
    with pytest.raises(zoo.testing.ConformanceError, match="scores against its reference"):
        zoo.testing.check_component("rule", "scaled")


def test_a_block_whose_data_flow_is_not_its_forward_fails_the_kit(fresh_registry):
    # a parallel block that says it is sequential: the native step would run the
    # description, and decode other tokens than its forward, in silence
    from zoo.plugins.blocks.causal import CausalBlock

    class Parallel(CausalBlock):
        """x + attn(norm1(x)) + ffn(norm2(x)), described as the sequential block it extends."""

        def forward(self, x, key_padding_mask=None, cache=None):
            h = self.attn(self.norm1(x), key_padding_mask=key_padding_mask, cache=cache)
            return x + h + self.ffn(self.norm2(x))

        data_flow = CausalBlock.data_flow

    zoo.register_component("block", "misdescribed", Parallel,
                           capabilities={"role": "causal", "norm_placements": ("pre",)})
    with pytest.raises(zoo.testing.ConformanceError, match="forward against its data_flow"):
        zoo.testing.check_component("block", "misdescribed")


def test_a_block_of_one_norm_placement_is_checked_and_built_in_that_one_only(fresh_registry):
    # a pre-norm-only block (as GPT-NeoX's parallel block): the kit checks the placement it
    # declares, and a recipe asking for the other is refused by name before building
    from zoo.plugins.blocks.causal import CausalBlock

    class PreOnly(CausalBlock):
        """A causal block that exists pre-norm only."""

        def __init__(self, settings, *, norm_first, **kw):
            assert norm_first, "built post-norm"
            super().__init__(settings, norm_first=norm_first, **kw)

    zoo.register_component("block", "pre-only", PreOnly,
                           capabilities={"role": "causal", "norm_placements": ("pre",)})
    assert zoo.testing.check_component("block", "pre-only") == {"block_contract": "passed",
                                                                "described_flow": "passed"}
    model = zoo.build("llama-tiny", block="pre-only")
    assert type(model.layers[0]) is PreOnly
    with pytest.raises(zoo.CapabilityError, match="block 'pre-only'.*norm_placement "
                       "'pre' only.*asks for 'post'"):
        zoo.build("llama-tiny", block="pre-only", norm_placement="post")


def test_a_rule_replacing_another_is_held_to_its_stage_and_one_replacement(fresh_registry):
    """A replacement acts where the replaced rule acted (a sampling filter standing in for
    a processor would switch it off in greedy and beam decoding), and two rules replacing
    one are refused, by the kit and at decoding, never applied twice."""
    from pydantic import BaseModel

    from zoo.plugin_api import Rule

    class Windowed(Rule):
        """repetition_penalty over the last tokens only (the kit's own stand-in)."""

        class Settings(BaseModel):
            repetition_penalty: float = 1.0

        example = {"repetition_penalty": 1.3}
        reference = staticmethod(lambda tokens, scores, s: scores)

        def __call__(self, tokens, scores):
            return scores

    zoo.register_component("rule", "sampling-penalty", Windowed,
                           capabilities={"sampling": True, "order": 100,
                                         "replaces": ("repetition-penalty",)})
    with pytest.raises(zoo.testing.ConformanceError, match="acts in every decoding.*"
                       "declare sampling=False"):
        zoo.testing.check_component("rule", "sampling-penalty")
    zoo.register_component("rule", "processor-penalty", Windowed,
                           capabilities={"order": 100, "replaces": ("repetition-penalty",)})
    with pytest.raises(zoo.testing.ConformanceError, match="sampling-penalty replaces too"):
        zoo.testing.check_component("rule", "processor-penalty")
    model = zoo.build("gpt2-tiny").eval()
    with pytest.raises(zoo.PluginError, match="'repetition-penalty' is replaced by "
                       "'(processor|sampling)-penalty'.* and '(processor|sampling)-penalty'"):
        zoo.generate(model, torch.tensor([[5, 6, 7]]), max_new_tokens=2, repetition_penalty=1.3)


def test_an_export_keeps_a_plugin_rules_settings():
    """generation_json writes a plugin rule's own settings (rule_settings) beside
    transformers' keys, so that a folder exported and read back decodes alike."""
    from zoo.plugin_api import generation_json

    data = {"start_id": 1, "eos_ids": [2], "pad_id": 0, "rule_settings": {"top_a": 0.2}}
    assert generation_json(data, decoder_only=True)["top_a"] == 0.2
