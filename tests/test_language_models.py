"""Decoder-only language models: transformers' GPT-2, Llama, Qwen2, Qwen3, Mistral, Phi-3
and Gemma 1 to 3 folders (the published configs at small widths) load into zoo's
``decoder`` architecture with transformers' logits on left-padded prompts and its
``generate`` tokens (greedy, beams, sampling under one seed); the recipes count the
reference models' parameters; options zoo cannot express are refused by name; training
on text, fine-tuning an imported model, the bench and the native step. The exports are
test_language_model_exports.py's."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

import zoo
from zoo.builder import footprint, get_recipe
from zoo.resolver import resolve

from .conftest import run_zoo
from .language_models import END, PUBLISHED, left_padded, positions_of, save_language_model

VARIANTS = list(PUBLISHED)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_equal_transformers_on_left_padded_prompts(variant, lm_folders):
    hf, folder = lm_folders[variant]
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, mask = left_padded()
    with torch.no_grad():
        ref = hf(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
        out = model(prompts, padding_mask=mask == 0)
        whole = model(prompts[:1])  # no padding at all
    real = mask.bool()
    assert ref[real].std() > 0.5  # logits that differ from token to token
    scale = max(1.0, ref[real].abs().max().item())
    torch.testing.assert_close(out[real], ref[real], rtol=0, atol=1e-5 * scale)
    torch.testing.assert_close(whole[0], ref[0], rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("variant", ["qwen3", "phi3", "gemma", "gemma2", "gemma3"])
def test_a_folder_transformers_5_saved_gives_its_logits(variant, lm_folders, tmp_path):
    """The same models saved by transformers 5 itself, whose config.json is its own:
    rope_parameters (Gemma 3's by kind of layer), the layer_types it made,
    _sliding_window_pattern."""
    hf, _ = lm_folders[variant]
    hf.save_pretrained(tmp_path / variant)
    model = zoo.build(f"local-dir:{tmp_path / variant}").eval()
    prompts, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = hf(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
        out = model(prompts, padding_mask=mask == 0)
    scale = max(1.0, ref[real].abs().max().item())
    torch.testing.assert_close(out[real], ref[real], rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("variant", VARIANTS)
def test_generate_gives_transformers_tokens(variant, beams, lm_folders):
    hf, folder = lm_folders[variant]
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, mask = left_padded()
    with torch.no_grad():
        ref = hf.generate(prompts, attention_mask=mask, max_new_tokens=12, num_beams=beams,
                          do_sample=False, pad_token_id=END[variant])[:, prompts.shape[1]:]
    out = model.generate(prompts, padding_mask=mask == 0, max_new_tokens=12, num_beams=beams)
    assert len(set(map(tuple, ref.tolist()))) == 3  # three different continuations
    assert out.tolist() == ref.tolist()


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "gpt2"])
def test_a_rotary_model_refuses_what_passes_its_context_by_name(variant, lm_folders):
    """Rotary models hold no table a long prompt runs out of, and were decoded past their
    context without a word: the context is the config's max_position_embeddings (times a
    linear RoPE scaling's factor, as transformers' linear scaling stretches positions),
    and a prompt or max_new_tokens past it is one RecipeError; at it, none."""
    from zoo.errors import RecipeError

    _, folder = lm_folders[variant]
    config = json.loads((folder / "config.json").read_text())
    scaling = config.get("rope_scaling") or {}
    context = config["max_position_embeddings"] * (
        scaling["factor"] if scaling.get("rope_type") == "linear" else 1)
    model = zoo.build(f"local-dir:{folder}").eval()
    long = torch.ones(1, int(context) + 1, dtype=torch.long)
    with pytest.raises(RecipeError, match=f"prompt holds {context + 1:.0f} tokens, past the "
                                          f"{context:.0f} positions this model reads"):
        model.generate(long, max_new_tokens=1)
    prompt = torch.ones(1, 4, dtype=torch.long)
    with pytest.raises(RecipeError, match=f"ask for max_new_tokens={context - 3:.0f} at most"):
        model.generate(prompt, max_new_tokens=int(context) - 2)
    from zoo.decoding import check_prompts, settings_for

    check_prompts(model, prompt, settings_for(model, None, max_new_tokens=int(context) - 3))


def test_a_folder_whose_weights_hold_nan_is_refused_by_name(lm_folders, tmp_path):
    """A Gemma 2 whose embedding holds NaN loaded with a warning and gave NaN logits."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "gemma2"
    shutil.copytree(lm_folders["gemma2"][1], folder)
    state = load_file(folder / "model.safetensors")
    state["model.embed_tokens.weight"][3, 1] = float("nan")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(zoo.ArtifactError, match="NaN or infinite values: .*embed"):
        zoo.build(f"local-dir:{folder}")


def test_a_pretrained_model_is_built_in_eval_mode_and_decodes_as_transformers(lm_folders):
    """GPT-2's dropout is 0.1: a folder's model built in training mode drew other tokens at
    each call of zoo.generate (as transformers' model would after model.train()). Built
    with weights, it is in eval mode, as from_pretrained's; a recipe's new model is not."""
    hf, folder = lm_folders["gpt2"]
    assert hf.config.resid_pdrop > 0 and not hf.training
    model = zoo.build(f"local-dir:{folder}")
    assert not model.training
    prompts, mask = left_padded()
    with torch.no_grad():
        ref = hf.generate(prompts, attention_mask=mask, max_new_tokens=8, do_sample=False,
                          pad_token_id=END["gpt2"])[:, prompts.shape[1]:]
    assert zoo.generate(model, prompts, padding_mask=mask == 0,
                        max_new_tokens=8).tolist() == ref.tolist()
    assert zoo.build("llama-tiny").training and zoo.load(folder).training is False


@pytest.mark.parametrize("variant", ["gpt2", "llama-3.2"])
def test_sampling_draws_transformers_tokens_under_one_seed(variant, lm_folders):
    hf, folder = lm_folders[variant]
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, mask = left_padded()
    sampling = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9,
                    repetition_penalty=1.3, max_new_tokens=10)
    torch.manual_seed(7)
    with torch.no_grad():
        ref = hf.generate(prompts, attention_mask=mask, pad_token_id=END[variant],
                          **sampling)[:, prompts.shape[1]:]
    torch.manual_seed(7)
    out = zoo.generate(model, prompts, padding_mask=mask == 0, **sampling)
    assert out.tolist() == ref.tolist()
    # zoo's own seed repeats a run exactly, whatever the global generator did between
    first = zoo.generate(model, prompts, padding_mask=mask == 0, seed=3, **sampling)
    torch.manual_seed(11)
    assert torch.equal(zoo.generate(model, prompts, padding_mask=mask == 0, seed=3,
                                    **sampling), first)
    streamed = list(zoo.decoding.stream(model, prompts, padding_mask=mask == 0, seed=3,
                                        **sampling))
    assert torch.equal(torch.stack(streamed, 1), first)


@pytest.mark.parametrize("cutoffs", [dict(typical_p=0.6), dict(epsilon_cutoff=0.02),
                                     dict(eta_cutoff=0.05)], ids=lambda c: next(iter(c)))
def test_typical_and_truncation_sampling_draw_transformers_tokens(cutoffs, lm_folders):
    # the folder's own generation settings may name them too: read, never dropped
    hf, folder = lm_folders["gpt2"]
    model = zoo.build(f"local-dir:{folder}").eval()
    prompts, mask = left_padded()
    sampling = dict(do_sample=True, temperature=1.2, max_new_tokens=10, **cutoffs)
    runs = []
    for seed in range(3):
        torch.manual_seed(seed)
        with torch.no_grad():
            ref = hf.generate(prompts, attention_mask=mask, pad_token_id=END["gpt2"],
                              **sampling)[:, prompts.shape[1]:]
        torch.manual_seed(seed)
        out = zoo.generate(model, prompts, padding_mask=mask == 0, **sampling)
        assert out.tolist() == ref.tolist()
        runs.append(out.tolist())
    torch.manual_seed(0)
    plain = zoo.generate(model, prompts, padding_mask=mask == 0, do_sample=True,
                         temperature=1.2, max_new_tokens=10)
    assert plain.tolist() != runs[0]  # the cutoff changed the draws


def test_with_no_length_named_both_make_twenty_new_tokens(lm_folders, tmp_path):
    # transformers 5 makes 20 new tokens when the files name no length (zoo made 20 -
    # the prompt's); a max_length the files name, or a call gives, counts the prompt
    import shutil

    hf, folder = lm_folders["gpt2"]
    mine = tmp_path / "m"
    shutil.copytree(folder, mine)
    (mine / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": END["gpt2"], "eos_token_id": END["gpt2"]}))
    model = zoo.build(f"local-dir:{mine}").eval()
    prompt = left_padded()[0][:1]
    with torch.no_grad():
        ref = hf.generate(prompt, pad_token_id=END["gpt2"], min_new_tokens=20,
                          do_sample=False)[:, prompt.shape[1]:]
    out = zoo.generate(model, prompt, min_new_tokens=20)
    assert ref.shape[1] == 20 and out.tolist() == ref.tolist()
    assert zoo.generate(model, prompt, max_length=12, min_length=12).shape[1] == 4
    with pytest.raises(zoo.RecipeError, match="the prompts hold 8 tokens, and max_length=8"):
        zoo.generate(model, prompt, max_length=8)


def test_smollm2s_nanotron_keys_are_read_as_transformers_reads_them(lm_folders, tmp_path):
    # SmolLM2-135M's published config.json carries two keys no transformers class reads
    import shutil

    _, folder = lm_folders["llama-3.2"]
    mine = tmp_path / "smol"
    shutil.copytree(folder, mine)
    config = json.loads((mine / "config.json").read_text())
    (mine / "config.json").write_text(json.dumps({**config, "is_llama_config": True,
                                                  "rope_interleaved": False}))
    prompt = left_padded()[0][:1]
    assert torch.equal(zoo.generate(zoo.build(f"local-dir:{mine}"), prompt, max_new_tokens=4),
                       zoo.generate(zoo.build(f"local-dir:{folder}"), prompt,
                                    max_new_tokens=4))


def test_the_window_and_the_rope_scaling_are_what_gives_transformers_logits(lm_folders):
    # without Mistral's window, or Llama 3's frequency scaling, the logits differ: the
    # equality above holds because zoo reproduces them, not because they change nothing
    prompts = torch.randint(3, 90, (1, 12), generator=torch.Generator().manual_seed(0))
    for variant, change in [("mistral", {"attention.window": None}),
                            ("llama-3.2", {"positional.scaling": "none"})]:
        hf, folder = lm_folders[variant]
        with torch.no_grad():
            ref = hf(prompts).logits
            same = zoo.build(f"local-dir:{folder}").eval()(prompts)
            other = zoo.build(f"local-dir:{folder}", **change).eval()(prompts)
        torch.testing.assert_close(same, ref, rtol=0, atol=1e-4)
        assert (other - ref).abs().max() > 1e-2, variant


def test_llama3_scaling_without_its_original_context_takes_the_configs_as_transformers(
        lm_folders, tmp_path):
    """transformers 5 fills a llama3 scaling's missing original_max_position_embeddings
    from the config's max_position_embeddings (256 here, against the published 16): zoo
    reads it so (it took 8192, and logits 3.58 from transformers')."""
    import transformers as tf

    _, folder = lm_folders["llama-3.2"]
    mine = tmp_path / "no-original"
    for f in folder.iterdir():
        (mine / f.name).parent.mkdir(exist_ok=True)
        (mine / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    scaling = dict(config["rope_scaling"])
    del scaling["original_max_position_embeddings"]
    (mine / "config.json").unlink()
    (mine / "config.json").write_text(json.dumps({**config, "rope_scaling": scaling}))
    prompts = torch.randint(3, 90, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = tf.AutoModelForCausalLM.from_pretrained(mine).eval()(prompts).logits
        ours = zoo.build(f"local-dir:{mine}").eval()(prompts)
        published = zoo.build(f"local-dir:{folder}").eval()(prompts)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-4)
    assert (published - ref).abs().max() > 1e-2  # the original context matters here


@pytest.mark.parametrize("first", [1, 0])
def test_qwens_sliding_layers_give_transformers_logits(first, tmp_path):
    """use_sliding_window from layer max_window_layers on: the upper layer alone slides
    (zoo's kinds of layer), or every layer (vanilla attention's window)."""
    import transformers as tf

    published = dict(PUBLISHED["qwen2.5"][2], use_sliding_window=True, sliding_window=3,
                     max_window_layers=first)
    torch.manual_seed(0)
    hf = tf.Qwen2ForCausalLM(tf.Qwen2Config(**published)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(std=0.3)
    hf.save_pretrained(tmp_path / "q")
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    config.pop("layer_types", None)  # as published: transformers makes them from the rest
    (tmp_path / "q" / "config.json").write_text(json.dumps(config))
    model = zoo.build(f"local-dir:{tmp_path / 'q'}").eval()
    windows = [layer.attn.window for layer in model.layers]
    assert windows == ([None, 3] if first else [3, 3])
    prompts, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = hf(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
        ours = model(prompts, padding_mask=mask == 0)
        every = zoo.build(f"local-dir:{tmp_path / 'q'}", layer_types=None,
                          layer_variants={})(prompts, padding_mask=mask == 0) if first \
            else None
    torch.testing.assert_close(ours[real], ref[real], rtol=0, atol=1e-4)
    if every is not None:  # the window is what makes them equal
        assert (every[real] - ref[real]).abs().max() > 1e-3


def test_grouped_query_attention_caches_only_its_key_value_heads(lm_folders):
    model = zoo.build(f"local-dir:{lm_folders['tinyllama'][1]}").eval()
    attn = model.layers[0].attn
    assert (attn.n_heads, attn.n_kv_heads) == (8, 2)
    assert attn.kv_proj.weight.shape == (2 * 2 * 8, 64)
    cache = model.init_cache()
    with torch.no_grad():
        model(torch.tensor([[5, 6, 7]]), cache=cache)
    assert cache[0].k.shape == (1, 2, 3, 8)


@pytest.mark.parametrize("name, reference", [
    ("gpt2-small", ("GPT2LMHeadModel", "GPT2Config", {})),
    ("llama-7b-shape", ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32))),
    ("llama-110m-shape", ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
        num_attention_heads=12, num_key_value_heads=12, tie_word_embeddings=True))),
    ("phi3-mini-shape", ("Phi3ForCausalLM", "Phi3Config", dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, pad_token_id=32000))),
    ("gemma-2b-shape", ("GemmaForCausalLM", "GemmaConfig", dict(
        vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
        num_attention_heads=8, num_key_value_heads=1, head_dim=256))),
    ("gemma3-1b-shape", ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(
        vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
        num_attention_heads=4, num_key_value_heads=1, head_dim=256))),
    ("qwen3-0.6b-shape", ("Qwen3ForCausalLM", "Qwen3Config", dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        tie_word_embeddings=True))),
    ("llama-tiny", ("LlamaForCausalLM", "LlamaConfig", dict(
        vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))),
])
def test_the_recipes_count_the_reference_models_parameters(name, reference):
    import transformers as tf

    model_class, config_class, options = reference
    with torch.device("meta"):
        ref = getattr(tf, model_class)(getattr(tf, config_class)(**options))
    expected = sum(p.numel() for p in ref.parameters())  # tied matrices once
    assert footprint(resolve(get_recipe(name))).parameters == expected


@pytest.mark.parametrize("variant, key, value, says", [
    ("gpt2", "scale_attn_by_inverse_layer_idx", True, "scale_attn_by_inverse_layer_idx"),
    ("gpt2", "activation_function", "gelu_fast", "activation_function"),
    ("tinyllama", "rope_scaling", {"rope_type": "yarn", "factor": 4.0}, "rope_scaling"),
    ("qwen2.5", "layer_types", ["full_attention", "chunked_attention"], "layer_types"),
    ("mistral", "layer_types", ["full_attention", "sliding_attention"], "layer_types"),
    ("qwen3", "layer_types", ["full_attention"], r"layer_types.*kinds \(one a layer\)"),
    ("tinyllama", "logits_soft_cap", 30.0, "logits_soft_cap"),
    ("mistral", "sliding_window", 0, "sliding_window=0 is not one zoo can express"),
    ("gpt2", "n_inner", 0, "n_inner=0 is not one zoo can express"),
    ("phi3", "rope_scaling", {"type": "longrope", "long_factor": [1.0] * 4,
                              "short_factor": [1.0] * 4}, "rope_type.: .longrope"),
    ("phi3", "partial_rotary_factor", 1.5, "partial_rotary_factor=1.5"),
    ("phi3", "attention_bias", True, "Phi-3's projections have no biases"),
    ("tinyllama", "partial_rotary_factor", 0.5, "partial_rotary_factor"),
    ("gemma2", "layer_types", ["sliding_attention", "chunked_attention"], "layer_types"),
    ("gemma2", "attn_logit_softcapping", -1.0, "attn_logit_softcapping=-1.0"),
    ("gemma2", "use_bidirectional_attention", True, "use_bidirectional_attention"),
    ("gemma2", "query_pre_attn_scalar", 0, "query_pre_attn_scalar=0"),
    ("gemma2", "rope_local_base_freq", 10000, "rope_local_base_freq"),
    ("gemma3", "sliding_window_pattern", 0, "sliding_window_pattern=0"),
    # rope_scaling read key by key: what transformers requires is required by name
    ("llama-3.2", "rope_scaling", {"rope_type": "llama3", "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0}, "'llama3' scaling. lacks factor"),
    ("llama-3.2", "rope_scaling", {"rope_type": "llama3", "factor": 32.0},
     "lacks low_freq_factor, high_freq_factor, which transformers requires"),
    ("tinyllama", "rope_scaling", {"rope_type": "linear"}, "'linear' scaling. lacks factor"),
    ("tinyllama", "rope_scaling", "linear", "an object of RoPE's keys"),
    ("llama-3.2", "rope_scaling", {**PUBLISHED["llama-3.2"][2]["rope_scaling"], "beta_fast": 32},
     "rope_scaling.beta_fast=32 is not one zoo can express"),
])
def test_options_zoo_cannot_express_are_refused_by_name(variant, key, value, says, lm_folders,
                                                        tmp_path):
    folder = lm_folders[variant][1]
    changed = tmp_path / variant
    changed.mkdir()
    for f in folder.iterdir():
        (changed / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    (changed / "config.json").unlink()
    (changed / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(zoo.FormatError, match=says):
        zoo.build(f"local-dir:{changed}")


needs_trans = pytest.mark.skipif(not Path("/usr/share/trans/de-en").exists(),
                                 reason="Debian's trans-de-en is not installed")


def _unigram_perplexity(task) -> float:
    """The held-out perplexity of the training split's token frequencies (add-one): what
    a model that ignores every token before the next one reaches at best, near enough."""
    counts = Counter(t for ids in task.dataset("train") for t in ids[1:])
    total, vocab = sum(counts.values()), task.tokenizer.get_vocab_size()
    test = [t for ids in task.dataset("test") for t in ids[1:]]
    nll = -sum(math.log((counts[t] + 1) / (total + vocab)) for t in test) / len(test)
    return math.exp(nll)


@needs_trans
def test_the_language_model_task_reads_sentences_and_its_loss_is_the_next_token_loss(tmp_path):
    from zoo.plugins.tasks.language_model import EnglishLanguageModel, LanguageModelSettings

    task = EnglishLanguageModel(LanguageModelSettings(vocab_size=500, max_train=400),
                                workdir=tmp_path)
    task.prepare()
    tokenizer = task.text_tokenizer()
    sentence = "The weather is nice today, isn't it? Zoë's café."
    assert tokenizer.decode(tokenizer(sentence)["input_ids"]) == sentence  # byte-level: exact
    model = zoo.build("gpt2-tiny", **task.model_overrides(), dropout=0.0).eval()
    sentences = task.dataset("valid")[:5]
    batch = task.collate(sentences)
    loss, count = task.loss(model, batch, torch.nn.functional.cross_entropy)
    with torch.no_grad():  # each sentence alone, unpadded: every next token once
        logits = torch.cat([model(torch.tensor([ids[:-1]]))[0] for ids in sentences])
        expected = torch.nn.functional.cross_entropy(
            logits, torch.tensor([i for ids in sentences for i in ids[1:]]))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    assert count == sum(len(ids) - 1 for ids in sentences)
    metrics = task.evaluate(model, "valid", limit=5)
    assert metrics["perplexity"] == pytest.approx(math.exp(expected.item()), rel=1e-4)
    # each sentence is in one split only (byte-level BPE: two texts never share their ids)
    held_out = {tuple(ids) for split in ("valid", "test") for ids in task.dataset(split)}
    assert held_out.isdisjoint(tuple(ids) for ids in task.dataset("train"))


@needs_trans
@pytest.mark.slow(seconds=90)
def test_lm_english_learns_in_a_minute_and_the_run_generates_text(tmp_path):
    result = zoo.train("lm-english", run_dir=tmp_path / "lm", progress=False,
                       overrides={"train.time_limit_minutes": 1})
    task_perplexity = result.metrics["perplexity"]
    from zoo.training.runs import load_run

    run = load_run(tmp_path / "lm")
    run.task.prepare()
    unigram = _unigram_perplexity(run.task)
    # word frequencies alone give 601 here; a minute of training reached about 150 on
    # an idle machine (step 416 already gave 168), so half of 601 holds at a quarter of
    # the steps a slow, shared hour may leave
    assert task_perplexity < 0.5 * unigram, (task_perplexity, unigram)
    done = run_zoo("generate", str(tmp_path / "lm"), "The weather", "--max-new-tokens", "12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The weather") and len(done.stdout) > len("The weather\n")


@needs_trans
@pytest.mark.slow(seconds=50)
def test_fine_tuning_an_imported_language_model_keeps_its_tokenizer(with_tokenizer, tmp_path):
    """zoo train lm-english --set model=local-dir:GPT2: the run starts from the imported
    weights, reads the sentences with the model's own tokenizer and end token, learns,
    and writes text from its run folder with that tokenizer."""
    _, tokenizer, folder = with_tokenizer
    name = f"local-dir:{folder}"
    imported = zoo.build(name).eval()
    result = zoo.train("lm-english", run_dir=tmp_path / "run", progress=False, overrides={
        "model": name, "model.dropout": 0.0, "task.max_train": 400, "task.valid_size": 40,
        "task.test_size": 40, "train.steps": 60, "schedule.warmup_steps": 10,
        "optimizer.lr": 3e-3, "train.log_every": 10, "train.eval_every": 60,
        "train.eval_limit": 40, "train.time_limit_minutes": None, "schedule.over": "steps"})
    task, end = result.task, tokenizer.eos_token_id
    assert (task.bos_id, task.eos_id) == (end, end)
    assert task.encode("Zoë bought a café.") == [end, *tokenizer("Zoë bought a café.")["input_ids"],
                                                 end]
    before = task.evaluate(imported, "test")["perplexity"]
    assert result.metrics["perplexity"] < 0.5 * before  # it learned from where GPT-2 stood
    assert (result.run_dir / "tokenizer" / "zoo-ids.json").is_file()
    from zoo.training.runs import load_run

    again = load_run(result.run_dir).task  # the run, read back: the same ids and context
    assert (again.bos_id, again.eos_id, again.context) == (end, end, imported.settings.max_len)
    done = run_zoo("generate", str(result.run_dir), "The cat", "--max-new-tokens", "8")
    assert done.returncode == 0, done.stderr
    expected = zoo.complete(result.model.eval(), ["The cat"], tokenizer=tokenizer,
                            max_new_tokens=8)
    assert done.stdout.rstrip("\n") == "The cat" + expected[0]
    for fmt in ("transformers", "ctranslate2"):  # the exports keep the tokenizer
        done = run_zoo("export", str(result.run_dir), "--format", fmt, "--out",
                       str(tmp_path / fmt))
        assert done.returncode == 0, done.stderr
    import transformers as tf

    back = tf.AutoTokenizer.from_pretrained(tmp_path / "transformers")
    assert back("Zoë bought a café.")["input_ids"] == tokenizer("Zoë bought a café.")["input_ids"]
    names = (tmp_path / "ctranslate2" / "vocabulary.json").read_text()
    assert json.loads(names)[:len(tokenizer)] == tokenizer.convert_ids_to_tokens(
        list(range(len(tokenizer))))


@pytest.mark.parametrize("source", ["tinyllama", "llama-tiny"])
def test_zoo_bench_decodes_a_language_model_beside_transformers_and_ctranslate2(
        source, lm_folders, tmp_path):
    """An imported folder, and a recipe (whose transformers export's generation settings
    name max_new_tokens: every peer is still told exactly how many tokens to make)."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "bench.json"
    model = f"local-dir:{lm_folders[source][1]}" if source in lm_folders else source
    done = run_zoo("bench", "decode", "--model", model,
                   "--batch", "2", "--length", "6", "--new-tokens", "4", "--latency", "3,3",
                   "--dtypes", "fp32,int8", "--repeats", "1", "--wait", "0", "--json", str(out))
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    found = {(r["bench"], r["impl"], r["dtype"], r["mode"]) for r in rows}
    expected = {(bench, impl, dtype, mode) for bench in ("decode", "latency")
                for mode in ("greedy", "sample")
                for impl, dtype in (("zoo", "fp32"), ("transformers", "fp32"), ("ct2", "fp32"),
                                    ("zoo", "int8"), ("ct2", "int8"))}
    assert found == expected
    assert all(r["throughput"] > 0 for r in rows)


@pytest.mark.parametrize("beams", [1, 3])
def test_imported_language_models_decode_through_the_native_step(beams, lm_folders,
                                                                 monkeypatch):
    """GPT-2, TinyLlama, Llama 3.2 (its scaled RoPE as the step's rotation) and Qwen2.5
    (q/k/v biases) decode their steps after the prompts in zoo's native step with
    transformers' tokens, Gemma too (its norms' offset), Qwen3 (each head's queries and
    keys RMS-normed in the step), Mistral and Phi-3 (their sliding windows of 5 keys, which
    the 12 steps pass), Gemma 2 (sandwich norms, soft-capped scores, local and global
    layers) and Gemma 3 (normed queries and keys, local and global RoPE bases)."""
    from zoo.ops import Linear
    from zoo.plugins.architectures.static_lm import StaticLM

    from .test_native import CAN_BUILD
    from .test_static_decoder import native_runs

    if not CAN_BUILD:
        pytest.skip("needs Linux on an AVX2 CPU and a C++ compiler")
    monkeypatch.setattr(Linear, "native_rows", 64)
    ran = native_runs(StaticLM, monkeypatch)
    prompts, mask = left_padded()
    for variant in VARIANTS:
        hf, folder = lm_folders[variant]
        model = zoo.build(f"local-dir:{folder}").eval()
        ran.clear()
        with torch.no_grad():
            ref = hf.generate(prompts, attention_mask=mask, max_new_tokens=12, num_beams=beams,
                              do_sample=False, pad_token_id=END[variant])[:, prompts.shape[1]:]
        out = model.generate(prompts, padding_mask=mask == 0, max_new_tokens=12,
                             num_beams=beams)
        assert ran == [True], variant
        assert out.tolist() == ref.tolist(), variant
