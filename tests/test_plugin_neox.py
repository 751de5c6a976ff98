"""zoo-plugin-neox (tests/fixtures/zoo-plugin-neox), a third party's plugin written from
zoo's docs alone: GPT-NeoX's parallel block, its format read and written, min-p with
transformers' min_tokens_to_keep, and the neox-tiny recipe. Each test holds it to an
independent reference: transformers' own GPTNeoXForCausalLM and MinPLogitsWarper."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

import zoo
import zoo.testing
from zoo.plugin_api import FormatError, Refusal, Span

from .conftest import plugins_from

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def neox(neox_site):
    """The plugin importable and the registry reloaded with it, once for this module (a
    reload takes seconds once transformers is imported, so the tests share one)."""
    with pytest.MonkeyPatch.context() as monkeypatch, plugins_from(neox_site, monkeypatch):
        yield neox_site


@pytest.fixture(scope="module")
def neox_folder(neox, tmp_path_factory):
    """A tiny GPTNeoXForCausalLM (parallel residual, untied output), its folder and it."""
    folder = tmp_path_factory.mktemp("neox") / "neox"
    return folder, _neox(folder)


def _neox(folder, seed: int = 0, **changes):
    """A tiny random GPTNeoXForCausalLM saved by transformers (safetensors), its weights
    scaled up so that greedy tokens vary; returns the model."""
    settings = dict(hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                    intermediate_size=64, rotary_pct=0.25, vocab_size=64,
                    max_position_embeddings=128, use_parallel_residual=True,
                    tie_word_embeddings=False, bos_token_id=0, eos_token_id=2)
    settings.update(changes)
    torch.manual_seed(seed)
    model = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**settings)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layernorm" in name or "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.4)
    model.save_pretrained(folder, safe_serialization=True)
    return model


def _prompts():
    """Two prompts, the first padded on the left (with the end token), and the padding."""
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 64, (2, 6), generator=generator)
    padding = torch.zeros_like(prompts, dtype=torch.bool)
    padding[0, :2] = True
    return prompts.masked_fill(padding, 2), padding


@pytest.mark.parametrize("parallel", [True, False])
def test_a_neox_folder_gives_transformers_logits(neox, tmp_path, parallel):
    reference = _neox(tmp_path / "neox", use_parallel_residual=parallel)
    model = zoo.build(f"local-dir:{tmp_path / 'neox'}").eval()
    assert model.imported.format == "gpt-neox"
    assert model.recipe.components["block"].name == ("parallel" if parallel else "causal")
    assert (type(model.layers[0]).__name__ == "ParallelBlock") == parallel
    tokens = torch.randint(0, 64, (3, 9))
    with torch.no_grad():
        ours, theirs = model(tokens), reference(tokens).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    # left-padded prompts: every real position as transformers computes it
    prompts, padding = _prompts()
    with torch.no_grad():
        ours = model(prompts, padding_mask=padding)
        theirs = reference(prompts, attention_mask=(~padding).long()).logits
    torch.testing.assert_close(ours[~padding], theirs[~padding], rtol=1e-5, atol=1e-5)


def test_greedy_tokens_are_transformers_generate_tokens(neox_folder):
    folder, reference = neox_folder
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, padding = _prompts()
    ours = zoo.generate(model, prompts, padding_mask=padding, max_new_tokens=8)
    theirs = reference.generate(prompts, attention_mask=(~padding).long(), do_sample=False,
                                max_new_tokens=8, pad_token_id=2)[:, prompts.shape[1]:]
    assert ours.tolist() == theirs.tolist()
    assert len(set(ours.flatten().tolist())) > 3      # the tokens vary
    # one prompt alone (one row: the native step's product takes it where it is built)
    alone = zoo.generate(model, prompts[1:], max_new_tokens=8)
    assert alone.tolist() == reference.generate(prompts[1:], do_sample=False,
                                                max_new_tokens=8,
                                                pad_token_id=2)[:, 6:].tolist()
    # with the folder's own lengths (it names none: transformers 5 makes 20 new tokens)
    ours_default = zoo.generate(model, prompts, padding_mask=padding)
    theirs_default = reference.generate(prompts, attention_mask=(~padding).long(),
                                        do_sample=False, max_new_tokens=20,
                                        pad_token_id=2)
    assert ours_default.tolist() == theirs_default[:, prompts.shape[1]:].tolist()
    # the general path (no native step) makes the same tokens
    model.static_decoding = False
    general = zoo.generate(model, prompts, padding_mask=padding, max_new_tokens=8)
    assert general.tolist() == ours.tolist()


def test_the_model_decodes_in_zoos_native_step(neox_folder):
    folder, _ = neox_folder
    for model in (zoo.build(f"local-dir:{folder}").eval(), zoo.build("neox-tiny").eval()):
        plan = model.native_plan()
        assert not isinstance(plan, Refusal), f"native step refused: {plan.reason}"


@pytest.mark.parametrize("family,name", [("block", "parallel"), ("rule", "min-p-keep"),
                                         ("format", "gpt-neox")])
def test_the_block_the_rule_and_the_format_conform(neox, family, name):
    outcome = zoo.testing.check_component(family, name)
    assert "passed" in outcome.values(), outcome
    assert all(v == "passed" or "skip" in v.lower() for v in outcome.values()), outcome


def test_the_rule_is_transformers_min_p_warper(neox):
    from transformers.generation.logits_process import MinPLogitsWarper

    rule_class = zoo.get_component("rule", "min-p-keep").load()
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, 64, (4, 3), generator=generator)
    scores = torch.randn(4, 64, generator=generator) * 3.0
    for min_p, keep in [(0.1, 1), (0.3, 4), (0.9, 10), (1.0, 64), (0.5, 100)]:
        settings = rule_class.Settings(min_p=min_p, min_tokens_to_keep=keep)
        rule = rule_class(settings, span=Span(start=3, max_length=20, min_length=0))
        ours = rule(tokens, scores.clone())
        theirs = MinPLogitsWarper(min_p, min_tokens_to_keep=keep)(tokens, scores.clone())
        assert torch.equal(ours, theirs), (min_p, keep)
        assert int(torch.isfinite(ours).sum(-1).min()) >= min(keep, 64)


def test_sampling_with_min_tokens_to_keep_applies_min_p_once(neox_folder):
    folder, _ = neox_folder
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, padding = _prompts()
    args = dict(padding_mask=padding, max_new_tokens=8, do_sample=True, seed=0)
    a = zoo.generate(model, prompts, min_p=0.1, min_tokens_to_keep=3, **args)
    b = zoo.generate(model, prompts, min_p=0.1, min_tokens_to_keep=3, **args)
    assert a.shape == (2, 8) and torch.equal(a, b)
    # min_p 1 keeps the most likely token alone, unless min_tokens_to_keep keeps more:
    # were zoo's own min-p rule applied too, sampling would stay greedy
    greedy = zoo.generate(model, prompts, padding_mask=padding, max_new_tokens=8)
    assert torch.equal(zoo.generate(model, prompts, min_p=1.0, **args), greedy)
    kept = zoo.generate(model, prompts, min_p=1.0, min_tokens_to_keep=64, **args)
    assert not torch.equal(kept, greedy)


@pytest.mark.parametrize("tied", [False, True])
def test_an_export_loads_in_transformers_with_the_same_logits(neox, tmp_path, tied):
    from zoo.export import export

    _neox(tmp_path / "neox", tie_word_embeddings=tied)
    for source in (f"local-dir:{tmp_path / 'neox'}", "neox-tiny"):
        model = zoo.build(source, **({"tie_output": True} if tied and source == "neox-tiny"
                                     else {})).eval()
        out = tmp_path / ("out-" + source.rsplit("/", 1)[-1])
        export(model, out, "transformers")
        config = json.loads((out / "config.json").read_text())
        assert config["model_type"] == "gpt_neox" and config["tie_word_embeddings"] == tied
        back = transformers.GPTNeoXForCausalLM.from_pretrained(out).eval()
        tokens = torch.randint(0, 64, (2, 7))
        with torch.no_grad():
            torch.testing.assert_close(back(tokens).logits, model(tokens), rtol=1e-5,
                                       atol=1e-5)
            again = zoo.build(f"local-dir:{out}").eval()
            torch.testing.assert_close(again(tokens), model(tokens), rtol=1e-5, atol=1e-5)


def test_the_neox_tiny_recipe_builds_and_generates(neox):
    assert "neox-tiny" in zoo.list_recipes()
    model = zoo.build("neox-tiny").eval()
    assert all(type(layer).__name__ == "ParallelBlock" for layer in model.layers)
    assert zoo.generate(model, torch.randint(3, 1000, (2, 5)), max_new_tokens=4).shape == (2, 4)
    # the parallel block is pre-norm only: a post-norm recipe is refused by name
    with pytest.raises(zoo.RecipeError, match="parallel"):
        zoo.build("neox-tiny", norm_placement="post")


def test_what_the_format_cannot_express_is_refused_by_name(neox, tmp_path):
    _neox(tmp_path / "neox")
    config_file = tmp_path / "neox" / "config.json"
    config = json.loads(config_file.read_text())
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0,
               "partial_rotary_factor": 0.25}
    for change, named in (({"rope_parameters": dynamic}, "rope_parameters"),
                          ({"hidden_act": "gelu_10"}, "hidden_act"),
                          ({"logits_soft_cap": 30.0}, "logits_soft_cap")):
        config_file.write_text(json.dumps({**config, **change}))
        with pytest.raises(FormatError, match=named):
            zoo.build(f"local-dir:{tmp_path / 'neox'}")
    # and what transformers' class cannot express is refused on the way out
    from zoo.export import export

    with pytest.raises(zoo.ZooError, match="rmsnorm"):
        export(zoo.build("neox-tiny", norm="rmsnorm"), tmp_path / "out", "transformers")


def test_importing_the_hook_module_imports_no_torch(neox_site):
    script = ("import sys, zoo_plugin_neox; "
              "assert 'torch' not in sys.modules, 'the hook module imported torch'")
    subprocess.run([sys.executable, "-c", script], check=True,
                   env={"PYTHONPATH": str(neox_site), "PATH": "/usr/bin:/bin"})
