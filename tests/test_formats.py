"""Models from the Hub's own formats: transformers folders of Marian, T5, BART, mBART and
ViT, built by transformers' classes, load into zoo's components and give transformers'
logits (fp32, 1e-5, padded batches) and transformers' ``generate`` tokens; options zoo
cannot express are refused by name before any weight is read; pickles never run."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

pytest.importorskip("transformers")

import zoo
from zoo.export import export

from .conftest import run_python, run_zoo
from .formats import build_vit, marian_with_tokenizer, padded_batch, save_family
from .test_hub import hub  # noqa: F401  (the Hub-API server fixture)

SEQ2SEQ = ["opus-mt", "tc-big", "t5", "flan-t5", "bart", "mbart", "m2m100"]
EOS = {"opus-mt": 0, "tc-big": 0, "t5": 1, "flan-t5": 1, "bart": 2, "mbart": 2, "m2m100": 2}


def _decoder_inputs(pad: int, start: int, vocab: int = 48):
    g = torch.Generator().manual_seed(2)
    tgt = torch.randint(3, vocab - 1, (4, 7), generator=g)
    tgt[:, 0] = start
    for row, length in enumerate((7, 4, 2, 5)):
        tgt[row, length:] = pad
    return tgt, (tgt != pad).long()


@pytest.mark.parametrize("variant", SEQ2SEQ)
def test_logits_equal_transformers_on_padded_batches(variant, tmp_path):
    hf, pad = save_family(variant, tmp_path / variant)
    model = zoo.build(f"local-dir:{tmp_path / variant}").eval()
    src, src_mask = padded_batch(pad)
    start = hf.generation_config.decoder_start_token_id
    tgt, tgt_mask = _decoder_inputs(pad, start)
    tgt_mask[:, 0] = 1  # the start token is real even where it is the pad token
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt,
                 decoder_attention_mask=tgt_mask).logits
        out = model(src, tgt)
    keep = tgt_mask.bool()
    assert ref[keep].std() > 0.1  # logits that differ from token to token
    # 1e-5 on logits of size 1; Flan-T5's reach 40 here (no 1/sqrt(d_k)), where fp32 and
    # two spellings of the tanh GELU differ in the seventh digit
    scale = max(1.0, ref[keep].abs().max().item())
    torch.testing.assert_close(out[keep], ref[keep], rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("variant", ["bart", "mbart", "m2m100"])
def test_bart_positions_hold_for_left_padding_too(variant, tmp_path):
    # transformers' BART numbers every place (padding included), as zoo's learned
    # positions with offset 2 do; M2M100 counts only the real tokens, as zoo's fairseq
    # sinusoids with count: real do: sources padded on the left give its logits too
    hf, pad = save_family(variant, tmp_path / variant)
    model = zoo.build(f"local-dir:{tmp_path / variant}").eval()
    right, _ = padded_batch(pad)
    left = torch.stack([torch.cat([row[row == pad], row[row != pad]]) for row in right])
    assert (left[:, 0] == pad).any() and not (left[:, -1] == pad).any()
    tgt, tgt_mask = _decoder_inputs(pad, hf.generation_config.decoder_start_token_id)
    tgt_mask[:, 0] = 1
    with torch.no_grad():
        ref = hf(input_ids=left, attention_mask=left.ne(pad).long(), decoder_input_ids=tgt,
                 decoder_attention_mask=tgt_mask).logits
        out = model(left, tgt)
    keep = tgt_mask.bool()
    torch.testing.assert_close(out[keep], ref[keep], rtol=0, atol=1e-5)


def _cut(seq: list[int], eos: int) -> list[int]:
    return seq[: seq.index(eos) + 1] if eos in seq else seq


@pytest.mark.parametrize("variant", SEQ2SEQ)
@pytest.mark.parametrize("beams", [1, 4])
def test_generate_gives_transformers_tokens_with_the_models_settings(variant, beams, tmp_path):
    hf, pad = save_family(variant, tmp_path / variant, generate=True)
    model = zoo.build(f"local-dir:{tmp_path / variant}").eval()
    assert model.generation == model.imported.generation  # the model's own settings
    assert model.generation.start_id == hf.generation_config.decoder_start_token_id
    src, mask = padded_batch(pad)
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, num_beams=beams)
    out = model.generate(src, num_beams=beams)
    eos = EOS[variant]
    expected = [_cut(row, eos) for row in ref[:, 1:].tolist()]
    assert [_cut(row, eos) for row in out.tolist()] == expected
    assert len({t for row in expected for t in row}) > 1  # not one token over and over


@pytest.mark.parametrize("variant", ["opus-mt", "bart"])
def test_sampling_draws_transformers_tokens_from_the_same_seed(variant, tmp_path):
    # both draw with torch.multinomial from torch's global generator: from one seed,
    # the same filtered distributions give the same tokens
    hf, pad = save_family(variant, tmp_path / variant, generate=True)
    model = zoo.build(f"local-dir:{tmp_path / variant}").eval()
    src, mask = padded_batch(pad)
    sampling = dict(do_sample=True, temperature=0.7, top_k=12, top_p=0.9,
                    repetition_penalty=1.3, num_beams=1)
    for seed in range(3):
        torch.manual_seed(seed)
        with torch.no_grad():
            ref = hf.generate(input_ids=src, attention_mask=mask, **sampling)
        torch.manual_seed(seed)
        out = zoo.generate(model, src, **sampling)
        eos = EOS[variant]
        assert [_cut(r, eos) for r in out.tolist()] == [_cut(r, eos) for r in ref[:, 1:].tolist()]


def test_the_generation_settings_are_the_models_own(tmp_path):
    save_family("bart", tmp_path / "bart")
    settings = zoo.build(f"local-dir:{tmp_path / 'bart'}").imported.generation
    assert (settings.start_id, settings.eos_ids, settings.pad_id) == (2, (2,), 1)
    assert (settings.num_beams, settings.no_repeat_ngram_size, settings.forced_bos_id,
            settings.forced_eos_id, settings.early_stopping, settings.max_length) == (
        4, 3, 0, 2, True, 16)
    save_family("opus-mt", tmp_path / "marian")
    marian = zoo.build(f"local-dir:{tmp_path / 'marian'}").imported.generation
    assert marian.forbidden_ids == (59,) and marian.start_id == marian.pad_id == 59


def test_vit_logits_equal_transformers(tmp_path):
    hf = build_vit(tmp_path / "vit")
    model = zoo.build(f"local-dir:{tmp_path / 'vit'}").eval()
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        ref = hf(pixel_values=images).logits
        torch.testing.assert_close(model(images), ref, rtol=0, atol=1e-5)
    assert model.recipe.components["norm"].settings == {"eps": 1e-12}


def test_the_mapped_recipe_uses_zoos_components(tmp_path):
    save_family("opus-mt", tmp_path / "m")
    recipe = zoo.get_recipe(f"local-dir:{tmp_path / 'm'}")
    parts = {slot: ref.name for slot, ref in recipe.components.items()}
    assert parts["ffn"] == "silu" and parts["positional"] == "sinusoidal"
    assert recipe.components["positional"].settings == {"layout": "concatenated"}
    assert recipe.architecture.settings["output_bias"] is True
    save_family("flan-t5", tmp_path / "t")
    t5 = zoo.get_recipe(f"local-dir:{tmp_path / 't'}")
    assert t5.components["ffn"].name == "geglu" and t5.components["positional"].name == "t5-bias"
    assert t5.architecture.settings["head_dim"] == 16  # 4 heads of 16 in a width of 32
    assert t5.architecture.settings["tie_output"] is False


@pytest.mark.parametrize("key, value, named", [
    ("activation_function", "quick_gelu", "activation_function='quick_gelu'"),
    ("decoder_attention_heads", 2, "decoder_attention_heads=2"),
    ("some_new_option", True, "some_new_option"),
])
def test_an_option_zoo_cannot_express_is_refused_by_name_before_the_weights(
        key, value, named, tmp_path):
    save_family("opus-mt", tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config[key] = value
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    (tmp_path / "m" / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(zoo.FormatError, match=named.replace("(", r"\(")) as info:
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    assert "safetensors" not in str(info.value)


def test_a_generation_setting_zoo_cannot_follow_is_refused_by_name(tmp_path):
    save_family("opus-mt", tmp_path / "m")
    path = tmp_path / "m" / "generation_config.json"
    kept = json.loads(path.read_text())
    path.write_text(json.dumps({**kept, "num_beam_groups": 2, "diversity_penalty": 0.5}))
    with pytest.raises(zoo.FormatError, match="num_beam_groups"):
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    # sampling and the repetition penalty are followed now, and read as they are
    path.write_text(json.dumps({**kept, "repetition_penalty": 1.3, "do_sample": True,
                                "num_beams": 1, "top_p": 0.8}))
    g = zoo.build(f"local-dir:{tmp_path / 'm'}").generation
    assert (g.repetition_penalty, g.do_sample, g.top_p, g.top_k) == (1.3, True, 0.8, 50)
    # typical and truncation sampling are followed too, and read whatever do_sample says
    path.write_text(json.dumps({**kept, "do_sample": False, "typical_p": 0.7,
                                "epsilon_cutoff": 3e-4, "eta_cutoff": 2e-3}))
    g = zoo.build(f"local-dir:{tmp_path / 'm'}").generation
    assert (g.typical_p, g.epsilon_cutoff, g.eta_cutoff) == (0.7, 3e-4, 2e-3)
    # a setting zoo does not follow is refused even where the folder does not sample: a
    # user who samples later would get draws without it
    for unfollowed in ({"exponential_decay_length_penalty": [5, 1.1]},
                       {"suppress_tokens": [3]}, {"guidance_scale": 1.5}):
        path.write_text(json.dumps({**kept, "do_sample": False, **unfollowed}))
        with pytest.raises(zoo.FormatError, match=next(iter(unfollowed))):
            zoo.build(f"local-dir:{tmp_path / 'm'}")


def test_transformers_bookkeeping_keys_are_inert(tmp_path):
    # facebook/mbart-large-50-many-to-many-mmt and others of its age keep _num_labels
    save_family("mbart", tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "_num_labels": 3}))
    assert zoo.build(f"local-dir:{tmp_path / 'm'}").imported.format == "mbart"


# a value other than transformers' default for each key zoo holds inert
INERT_VALUES = {
    "architectures": ["Other"], "transformers_version": "4.0.0", "torch_dtype": "float16",
    "dtype": "float16", "_name_or_path": "x/y", "_commit_hash": "abc", "use_cache": False,
    "return_dict": False, "use_return_dict": False, "output_attentions": True,
    "output_hidden_states": True, "torchscript": True, "pruned_heads": {"0": [1]},
    "chunk_size_feed_forward": 7, "tie_encoder_decoder": True, "finetuning_task": "x",
    "problem_type": "regression", "tokenizer_class": "X", "prefix": "p ",
    "task_specific_params": {"a": {}}, "id2label": {"0": "a", "1": "b", "2": "c"},
    "label2id": {"a": 0, "b": 1, "c": 2}, "num_labels": 3, "gradient_checkpointing": True,
    "init_std": 0.5, "initializer_range": 0.5, "initializer_factor": 3.0,
    "cross_attention_hidden_size": 16, "bos_token_id": 5, "eos_token_id": 6,
    "sep_token_id": 7, "cls_token_id": 8, "unk_token_id": 9, "mask_token_id": 10,
    "decoder_start_token_id": 11, "_attn_implementation_autoset": True,
    "output_scores": True, "return_dict_in_generate": True, "classifier_dropout": 0.5,
    "classif_dropout": 0.5, "is_encoder_decoder": True, "tf_legacy_loss": True,
    "use_bfloat16": True, "_from_model_config": True, "_num_labels": 3, "model_type": "x",
}


def _outputs(model, ids):
    import transformers

    model.eval()
    with torch.no_grad():
        if isinstance(model, transformers.BartForConditionalGeneration):
            out = model(input_ids=ids, decoder_input_ids=ids, return_dict=True)
        else:
            out = model(input_ids=ids, return_dict=True)
    return out[0]


@pytest.mark.parametrize("family", ["gpt2", "bert", "bart"])
def test_every_bookkeeping_key_changes_nothing_transformers_computes(family):
    """Each key of BOOKKEEPING, set to another value, leaves transformers' own model of
    the family computing the same outputs from the same weights; is_decoder does not
    (a BERT turns causal), so zoo reads it where it matters (DECODER_FLAGS)."""
    import transformers

    from zoo.format_base import BOOKKEEPING

    assert set(BOOKKEEPING) <= set(INERT_VALUES)
    config_class, model_class, sizes = {
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel,
                 dict(n_embd=32, n_layer=2, n_head=4, vocab_size=64, n_positions=32)),
        "bert": (transformers.BertConfig, transformers.BertModel,
                 dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, vocab_size=64)),
        "bart": (transformers.BartConfig, transformers.BartForConditionalGeneration,
                 dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64,
                      decoder_ffn_dim=64, encoder_attention_heads=4,
                      decoder_attention_heads=4, vocab_size=64)),
    }[family]
    ids = torch.randint(12, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    reference = model_class(config_class(**sizes))
    expected, state = _outputs(reference, ids), reference.state_dict()

    def changed(key, value):
        model = model_class(config_class.from_dict({**sizes, key: value}))
        model.load_state_dict(state, strict=False)
        return _outputs(model, ids)

    # model_type names the class itself; return_dict and use_return_dict only shape what a
    # call returns (transformers 5's own classes fail on them set false in a config)
    for key in sorted(BOOKKEEPING - {"model_type", "return_dict", "use_return_dict"}):
        torch.testing.assert_close(changed(key, INERT_VALUES[key]), expected, rtol=0,
                                   atol=1e-5, msg=lambda m: f"{family} {key}: {m}")
    if family == "bert":
        assert not torch.allclose(changed("is_decoder", True), expected, atol=1e-3)


def test_keys_that_change_a_model_are_read_or_refused(tmp_path):
    # num_hidden_layers is transformers' alias of the first stack's layers, and wins
    save_family("opus-mt", tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "num_hidden_layers": config["encoder_layers"] + 1}))
    with pytest.raises(zoo.ZooError, match="encoder"):
        zoo.build(f"local-dir:{tmp_path / 'm'}")  # its weights hold one layer fewer
    assert zoo.get_recipe(f"local-dir:{tmp_path / 'm'}").architecture.settings[
        "encoder_layers"] == config["encoder_layers"] + 1
    # mixed attention kinds are a Llama-family reader's to read; a BERT turned causal is
    # refused by name
    import transformers

    folder = tmp_path / "bert"
    transformers.BertModel(transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=64)).save_pretrained(folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "is_decoder": True}))
    with pytest.raises(zoo.FormatError, match="is_decoder=True"):
        zoo.build(f"local-dir:{folder}")


def test_a_folder_without_tokenizer_files_says_which_files_it_needs(tmp_path):
    save_family("opus-mt", tmp_path / "m")
    model = zoo.build(f"local-dir:{tmp_path / 'm'}")
    with pytest.raises(zoo.FormatError, match="no tokenizer files .*tokenizer.json.*"
                                              "AutoTokenizer"):
        model.tokenizer("Guten Morgen")
    result = run_zoo("translate", f"local-dir:{tmp_path / 'm'}", "Guten Morgen")
    assert result.returncode != 0 and "no tokenizer files" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_imported_vit_is_not_written_as_a_transformers_seq2seq(tmp_path):
    build_vit(tmp_path / "vit")
    model = zoo.build(f"local-dir:{tmp_path / 'vit'}")
    with pytest.raises(zoo.ZooError, match="no generation settings.*--format onnx"):
        export(model, tmp_path / "out", "transformers")


def test_an_unknown_model_type_names_the_formats_zoo_reads(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({"model_type": "pegasus"}))
    with pytest.raises(zoo.FormatError, match=r"pegasus.*'bart', 'bert', 'clip', 'deberta-v2', 'distilbert', 'gemma', "
                       r"'gemma2', "
                       r"'gemma3_text', 'gpt2', 'llama', 'm2m_100', 'marian', 'mbart', "
                       r"'mistral', 'modernbert', 'mpnet', 'phi3', 'qwen2', 'qwen3', 'roberta', 't5', 'vit', "
                       r"'xlm-roberta'"):
        zoo.build(f"local-dir:{tmp_path / 'm'}")


class _Payload:
    """Unpickling this writes a file: the crafted pickle a hostile repository holds."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_pickle_is_refused_unopened_with_the_converting_command(tmp_path):
    save_family("opus-mt", tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    ran = tmp_path / "it-ran"
    (tmp_path / "m" / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(str(ran))))
    with pytest.raises(zoo.FormatError, match="pytorch_model.bin.*save_pretrained") as info:
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    assert "never unpickles" in str(info.value)
    assert not ran.exists()
    pickle.loads((tmp_path / "m" / "pytorch_model.bin").read_bytes()).close()
    assert ran.exists()  # the payload is real: unpickling it runs it


def test_the_converting_command_gives_a_folder_zoo_loads_with_its_head(tmp_path):
    import shlex

    hf, tokenizer = marian_with_tokenizer(tmp_path / "m", _lines()[:400], vocab_size=90)
    (tmp_path / "m" / "model.safetensors").unlink()  # the weights as an older save kept them
    torch.save(hf.state_dict(), tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(zoo.FormatError) as info:
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    command = str(info.value).split("with: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-c"]
    done = run_python(argv[2], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    model = zoo.build(f"local-dir:{tmp_path / 'm'}-safetensors").eval()
    src = tokenizer(["Guten Morgen", "Wie geht es dir?"], return_tensors="pt", padding=True)
    tgt = torch.tensor([[hf.config.decoder_start_token_id, 5, 7]] * 2)
    with torch.no_grad():
        ref = hf(**src, decoder_input_ids=tgt).logits  # the head's logits, not hidden states
        torch.testing.assert_close(model(src["input_ids"], tgt), ref, rtol=0, atol=1e-5)
    assert model.tokenizer("Guten Morgen")["input_ids"] == \
        tokenizer("Guten Morgen")["input_ids"]


def _serve(hub, folder, repo: str) -> str:
    """Every file of ``folder`` committed to ``repo`` on the test Hub; the hf-hub: name."""
    for path in folder.iterdir():
        if path.is_file():
            hub.state.add_file(repo, path.name, path.read_bytes())
    return f"hf-hub:{repo}"


def test_a_pickle_only_repository_on_the_hub_is_refused_unopened(hub, tmp_path):
    save_family("opus-mt", tmp_path / "m")
    ran = tmp_path / "it-ran"
    hub.state.add_file("someone/opus-pickle", "config.json",
                       (tmp_path / "m" / "config.json").read_bytes())
    hub.state.add_file("someone/opus-pickle", "pytorch_model.bin",
                       pickle.dumps(_Payload(str(ran))))
    with pytest.raises(zoo.ArtifactError, match="pytorch_model.bin.*safetensors"):
        zoo.build("hf-hub:someone/opus-pickle")
    assert not ran.exists()
    assert zoo.build("hf-hub:someone/opus-pickle", pretrained=False).imported.format == "marian"


def test_pulled_from_the_hub_end_to_end(hub, tmp_path):
    hf, pad = save_family("opus-mt", tmp_path / "m")
    model = zoo.build(_serve(hub, tmp_path / "m", "Helsinki-NLP/opus-mt-tiny")).eval()
    assert model.imported.source == "hf-hub:Helsinki-NLP/opus-mt-tiny"
    src, mask = padded_batch(pad)
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask)
    out = model.generate(src)
    assert [_cut(r, 0) for r in out.tolist()] == [_cut(r, 0) for r in ref[:, 1:].tolist()]


def _lines() -> list[str]:
    from zoo.plugins.tasks.translate import DATA  # the task's own text (trans-de-en)

    if not DATA.is_file():
        pytest.skip("the trans-de-en package is not installed")
    with open(DATA, encoding="utf-8", errors="ignore") as fh:
        lines = [line.strip() for _, line in zip(range(6000), fh)
                 if " :: " in line and not line.startswith("#")]
    return [line.replace(" :: ", "\t") for line in lines]


def test_zoo_translate_uses_the_models_own_tokenizer(hub, tmp_path):
    hf, tokenizer = marian_with_tokenizer(tmp_path / "m", _lines())
    name = _serve(hub, tmp_path / "m", "Helsinki-NLP/opus-mt-tiny-de-en")
    text = "Guten Morgen"
    batch = tokenizer([text], return_tensors="pt")
    expected = tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)[0]
    result = run_zoo("translate", name, text)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == expected


def test_int8_runs_on_an_imported_marian(hub, tmp_path):
    save_family("opus-mt", tmp_path / "m")
    name = _serve(hub, tmp_path / "m", "Helsinki-NLP/opus-mt-tiny")
    fp32 = zoo.build(name).eval()
    int8 = zoo.build(name, quantize="int8")
    src, _ = padded_batch(59)
    tgt, _ = _decoder_inputs(59, 59)
    with torch.no_grad():
        a, b = fp32(src, tgt), int8(src, tgt)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9


def test_ctranslate2_export_of_an_imported_marian_decodes_as_ct2s_own_converter(hub, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    hf, tokenizer = marian_with_tokenizer(tmp_path / "m", _lines())
    name = _serve(hub, tmp_path / "m", "Helsinki-NLP/opus-mt-tiny-de-en")
    ours = tmp_path / "zoo-ct2"
    result = run_zoo("export", name, "--format", "ctranslate2", "--out", str(ours))
    assert result.returncode == 0, result.stderr
    theirs = TransformersConverter(str(tmp_path / "m")).convert(str(tmp_path / "ct2-own"))
    sources = [tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
               for text in ("Guten Morgen", "Das Haus ist klein", "Wo ist der Bahnhof?")]
    outputs = []
    for folder in (ours, theirs):
        translator = ctranslate2.Translator(str(folder), device="cpu")
        outputs.append([r.hypotheses[0] for r in translator.translate_batch(
            sources, beam_size=4, max_decoding_length=20)])
    assert outputs[0] == outputs[1]
    assert any(outputs[0])


def test_an_imported_marian_goes_back_out_with_the_same_logits(tmp_path):
    from transformers import MarianMTModel

    hf, pad = save_family("opus-mt", tmp_path / "m")
    result = run_zoo("export", f"local-dir:{tmp_path / 'm'}", "--format", "transformers",
                     "--out", str(tmp_path / "back"))
    assert result.returncode == 0, result.stderr
    again = MarianMTModel.from_pretrained(tmp_path / "back").eval()
    src, mask = padded_batch(pad)
    tgt, tgt_mask = _decoder_inputs(pad, pad)
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        out = again(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    assert again.generation_config.bad_words_ids == [[pad]]


def test_the_papers_base_transformer_is_written_as_marian(tmp_path):
    """zoo's interleaved sinusoids become Marian's [sin | cos] by permuting the model's
    features in every weight: transformers' Marian then gives zoo's logits."""
    from transformers import MarianMTModel

    model = zoo.build("transformer-tiny", **{"norm.eps": 1e-5, "dropout": 0.0}).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.normal_(std=0.5)  # nothing zoo starts at zero or one stays there
    export(model, tmp_path / "marian", "transformers")
    marian = MarianMTModel.from_pretrained(tmp_path / "marian").eval()
    src, mask = padded_batch(0, vocab=1000, low=4)
    tgt, _ = _decoder_inputs(0, 1, vocab=1000)
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = marian(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-5)


@pytest.mark.parametrize("source, named", [
    ("transformer-tiny", "norm layernorm {'eps': 1e-06}"),
    ("t5", "norm_placement 'pre'"),
])
def test_what_marian_cannot_express_is_refused_by_name(source, named, tmp_path):
    if source == "t5":
        save_family("t5", tmp_path / "t5")
        source = f"local-dir:{tmp_path / 't5'}"
    model = zoo.build(source)
    with pytest.raises(zoo.ZooError, match=named.replace("{", r"\{").replace("}", r"\}")):
        export(model, tmp_path / "out", "transformers")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_fine_tuning_starts_from_the_imported_model_and_its_tokenizer(hub, tmp_path):
    """zoo train translate-de-en --set model=hf-hub:...: the run starts from the
    imported weights (its first teacher-forced loss is the imported model's on the same
    batch), encodes with the model's own tokenizer and ids, learns, and decodes from its
    run folder afterwards."""
    _, tokenizer = marian_with_tokenizer(tmp_path / "m", _lines())
    name = _serve(hub, tmp_path / "m", "Helsinki-NLP/opus-mt-tiny-de-en")
    imported = zoo.build(name).eval()
    result = zoo.train("translate-de-en", run_dir=tmp_path / "run", progress=False, overrides={
        "model": name, "model.dropout": 0.0, "model.attention_dropout": 0.0,
        "task.max_train": 400, "task.valid_size": 20, "task.test_size": 20,
        "task.beam_size": 1, "train.steps": 60, "schedule.warmup_steps": 10,
        "optimizer.lr": 3e-3, "train.log_every": 10, "train.eval_every": 60,
        "train.eval_limit": 20, "train.batch_by_length": False, "train.time_limit_minutes": None,
        "schedule.over": "steps"})
    task = result.task
    assert (task.pad_id, task.bos_id, task.eos_id) == (len(tokenizer) - 1, len(tokenizer) - 1, 0)
    de, en = task.references("train")[0]
    src, tgt = task.dataset("train")[0]
    assert src == tokenizer(de)["input_ids"]  # the model's own tokenizer, its end token
    assert tgt + [0] == tokenizer(text_target=en)["input_ids"]
    batch = task.collate([task.dataset("train")[i] for i in range(8)])
    fresh = task.collate([task.dataset("train")[i] for i in range(8)])
    criterion = torch.nn.functional.cross_entropy
    with torch.no_grad():
        before = task.loss(imported, fresh, criterion)[0]
        after = task.loss(result.model.eval(), batch, criterion)[0]
    assert after < 0.8 * before  # it learned from where the imported model stood
    first = json.loads((result.run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] <= 10
    assert (result.run_dir / "tokenizer" / "zoo-ids.json").is_file()
    out = run_zoo("translate", str(result.run_dir), "Das Haus ist klein.", "--beam", "1")
    assert out.returncode == 0, out.stderr  # the run decodes with the saved tokenizer
    assert out.stdout.splitlines() == task.translate(result.model.eval(),
                                                     ["Das Haus ist klein."], beam_size=1)


def test_zoo_bench_decodes_an_imported_model_beside_its_peers(tmp_path):
    # --impls marian names the transformers peer: for a folder, the folder itself
    save_family("opus-mt", tmp_path / "m")
    out = tmp_path / "bench.json"
    result = run_zoo("bench", "decode", "--model", f"local-dir:{tmp_path / 'm'}", "--batch", "2",
                     "--length", "6", "--new-tokens", "3", "--impls", "zoo,marian",
                     "--dtypes", "fp32,int8", "--repeats", "1", "--wait", "0", "--json", str(out))
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())
    assert {(r["impl"], r["dtype"]) for r in rows} == {
        ("zoo", "fp32"), ("transformers", "fp32"), ("zoo", "int8")}
    assert all(r["throughput"] > 0 for r in rows)


def test_onnx_export_of_an_imported_marian_gives_transformers_logits(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    hf, pad = save_family("opus-mt", tmp_path / "m")
    export(zoo.build(f"local-dir:{tmp_path / 'm'}"), tmp_path / "onnx", "onnx")
    encoder = ort.InferenceSession(str(tmp_path / "onnx" / "encoder.onnx"))
    decoder = ort.InferenceSession(str(tmp_path / "onnx" / "decoder.onnx"))
    src, mask = padded_batch(pad)
    tgt, _ = _decoder_inputs(pad, pad)
    (memory,) = encoder.run(None, {"src": src.numpy()})
    (logits,) = decoder.run(None, {"tgt": tgt.numpy(), "memory": memory, "src": src.numpy()})
    with torch.no_grad():
        ref = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(torch.from_numpy(logits), ref, atol=1e-4, rtol=1e-4)


class _Brittle:
    """A third party's format that trips over a folder it does not expect."""

    files = ()

    def __init__(self, settings=None) -> None:
        pass

    def recipe(self, config):
        return {"name": "x", "architecture": config["no_such_key"]}  # KeyError


def _format_plugin(name: str, capabilities: dict):
    import types

    def hook(register):
        register(name, _Brittle, capabilities=capabilities)

    return types.SimpleNamespace(register_formats=zoo.hookimpl(hook))


class _AsItIs(zoo.plugin_api.Format):
    """A third party's exporter that writes zoo's own names as they are."""

    family = "as-it-is"

    def export(self, recipe, state, generation):
        return {"model_type": "as-it-is"}, {}, dict(state)


def test_an_export_hands_a_format_each_tied_matrix_once(tmp_path, fresh_registry):
    # transformer-tiny shares one matrix among its embeddings and output layer: handed
    # three times, safetensors refused the writer's file with a traceback
    import types

    from safetensors.torch import load_file

    def hook(register):
        register("as-it-is", _AsItIs, capabilities={"exports": True})

    # written against the former capability, which still works and says so
    with pytest.warns(DeprecationWarning, match="exports=True is now writes='transformers'.*"
                                                "removed in zoo 0.3.0"):
        zoo.register_plugin(types.SimpleNamespace(register_formats=zoo.hookimpl(hook)),
                            name="third")
    model = zoo.build("transformer-tiny", vocab_size=32)
    tied = [n for n, p in model.named_parameters(remove_duplicate=False)
            if p is model.tgt_embed.weight]
    assert len(tied) > 1
    export(model, tmp_path / "out", "transformers")
    saved = load_file(tmp_path / "out" / "model.safetensors")
    assert len([n for n in tied if n in saved]) == 1
    assert set(saved) == set(zoo.artifact.weights_to_save(model))


def test_two_installed_formats_claiming_one_model_type_are_refused_unless_one_overrides(
        tmp_path, fresh_registry):
    save_family("opus-mt", tmp_path / "m")
    # one installed plugin's format over zoo's own: the plugin's reads the folder
    zoo.register_plugin(_format_plugin("my-marian", {"model_types": ["marian"]}), name="mine")
    with pytest.raises(zoo.FormatError, match="format 'my-marian' \\(plugin 'mine'\\)"):
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    # two installed plugins' formats: the user chooses, and is told how
    zoo.register_plugin(_format_plugin("their-marian", {"model_types": ["marian"]}),
                        name="theirs")
    with pytest.raises(zoo.FormatError, match="'marian' is claimed by the formats of 2 "
                                              "installed plugins, 'mine:my-marian', "
                                              "'theirs:their-marian', and none says it "
                                              "overrides.*ZOO_FORMAT_FOR="):
        zoo.build(f"local-dir:{tmp_path / 'm'}")


def test_a_formats_own_exception_names_the_format_and_its_plugin(tmp_path, fresh_registry):
    save_family("opus-mt", tmp_path / "m")
    zoo.register_plugin(_format_plugin("brittle", {"model_types": ["marian"],
                                                   "overrides": ["marian"]}), name="thirdparty")
    with pytest.raises(zoo.FormatError, match="format 'brittle' \\(plugin 'thirdparty'\\) "
                                              "failed in recipe\\(\\): KeyError") as info:
        zoo.build(f"local-dir:{tmp_path / 'm'}")
    assert isinstance(info.value.__cause__, KeyError)


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("marian") / "m"
    save_family("opus-mt", folder)
    return folder


@pytest.mark.parametrize("change, says", [
    ({"decoder_start_token_id": 10**9}, r"token ids \[1000000000\], past the model's "
                                        "vocabulary"),
    ({"length_penalty": 1e308}, "length_penalty: Input should be less than or equal to 10"),
    ({"bad_words_ids": [[-3]]}, "forbidden_ids.0: Input should be greater than or equal to 0"),
    ({"forced_eos_token_id": -7}, "forced_eos_id: Input should be greater than or equal to 0"),
    ({"temperature": float("inf"), "do_sample": True}, "temperature"),
])
def test_generation_files_zoo_cannot_decode_by_are_refused_by_name(change, says, marian_folder,
                                                                    tmp_path):
    """Ids past the vocabulary or negative, and numbers out of bounds, in a
    generation_config.json are one FormatError naming the setting (they were an
    IndexError or OverflowError at decoding, or a token V-3 banned silently)."""
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(marian_folder, folder)
    path = folder / "generation_config.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**data, **change}))
    with pytest.raises(zoo.ArtifactError, match=says):
        zoo.build(f"local-dir:{folder}")


def test_decoding_with_an_id_past_the_vocabulary_is_refused_by_name(marian_folder):
    model = zoo.build(f"local-dir:{marian_folder}").eval()
    with pytest.raises(zoo.RecipeError, match=r"token ids \[99999\], past the model's "
                                              "vocabulary"):
        zoo.generate(model, torch.tensor([[5, 6, 7]]), eos_ids=(99999,))


def test_the_plugin_api_reads_and_writes_a_language_models_generation_settings():
    """A decoder-only folder read as transformers reads it (no bos: starts with its end
    token; no length: 20 new tokens after the prompt), and written with bos_token_id,
    the key transformers' own GPT-2 and Llama folders carry, read back the same."""
    from transformers import GenerationConfig

    from zoo.plugin_api import generation_json, generation_settings

    read = generation_settings({"eos_token_id": 7}, {}, "gpt-neox", decoder_only=True)
    assert (read["start_id"], read["eos_ids"], read["max_new_tokens"]) == (7, [7], 20)
    seq2seq = generation_settings({"eos_token_id": 7, "decoder_start_token_id": 0}, {}, "bart")
    assert seq2seq["max_length"] == 21 and seq2seq["max_new_tokens"] is None
    written = generation_json(read, decoder_only=True)
    assert written["bos_token_id"] == 7 and "decoder_start_token_id" not in written
    assert "max_length" not in written  # max_new_tokens says the length; both: a warning
    assert GenerationConfig(**written).bos_token_id == 7  # transformers reads it so
    again = generation_settings({}, written, "gpt-neox", decoder_only=True)
    assert {k: again[k] for k in ("start_id", "eos_ids", "pad_id", "max_new_tokens")} == {
        k: read[k] for k in ("start_id", "eos_ids", "pad_id", "max_new_tokens")}


def test_a_tensor_an_export_gives_twice_is_written_twice():
    """safetensors refuses tensors that share memory; a format's export that gives one
    matrix under two names (a tied pair) has it written twice, not a raw RuntimeError."""
    from safetensors.torch import save_file

    from zoo.tied import apart

    w = torch.randn(3, 4)
    with pytest.raises(RuntimeError):  # what a plain save does
        save_file({"a": w, "b": w}, "/dev/null")
    out = apart({"a": w, "b": w, "c": w.t(), "d": w[1:]})  # d: a view at another offset
    assert torch.equal(out["a"], out["b"]) and out["a"].data_ptr() != out["b"].data_ptr()
    assert out["c"].is_contiguous() and torch.equal(out["c"], w.t())
    assert torch.equal(out["d"], w[1:])
    save_file(out, "/dev/null")  # none shares memory with another


def test_a_model_named_by_something_else_is_one_recipe_error():
    with pytest.raises(zoo.RecipeError, match="got a dict.*Recipe.model_validate"):
        zoo.build({"name": "transformer-tiny"})
