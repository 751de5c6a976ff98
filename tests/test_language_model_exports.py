"""Decoder-only language models written out: to transformers (each family that
expresses a model: GPT-2, Llama, Qwen2, Qwen3, Mistral, Phi-3, Gemma 1 to 3), to
CTranslate2's Generator and to ONNX, each giving zoo's logits or greedy tokens on
left-padded prompts; what a target cannot express refused by name."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

import zoo

from .language_models import END, PUBLISHED, left_padded, positions_of


@pytest.mark.parametrize("source", ["gpt2", "llama-3.2", "qwen2.5", "qwen3", "mistral",
                                    "phi3", "gemma", "gemma2", "gemma3", "gpt2-tiny",
                                    "llama-tiny"])
def test_export_to_transformers_gives_a_folder_it_loads_with_zoos_logits(source, lm_folders,
                                                                         tmp_path):
    import transformers as tf

    from zoo.export import export

    if source in lm_folders:
        model = zoo.build(f"local-dir:{lm_folders[source][1]}").eval()
    else:
        model = zoo.build(source, dropout=0.0, attention_dropout=0.0).eval()
    export(model, tmp_path / "out", format="transformers")
    back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    prompts, mask = left_padded()
    with torch.no_grad():
        ours = model(prompts, padding_mask=mask == 0)
        theirs = back(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
    real = mask.bool()
    scale = max(1.0, theirs[real].abs().max().item())
    torch.testing.assert_close(ours[real], theirs[real], rtol=0, atol=1e-5 * scale)
    again = zoo.build(f"local-dir:{tmp_path / 'out'}").eval()  # and zoo reads it back
    with torch.no_grad():
        torch.testing.assert_close(again(prompts, padding_mask=mask == 0)[real], ours[real])


def test_phi3_rotating_a_share_of_each_head_gives_transformers_logits_and_exports(tmp_path):
    """partial_rotary_factor (Phi-4-mini's 0.75; here 0.5 of heads of 8): transformers'
    logits and tokens; the transformers export is a Phi-3 folder again, the CTranslate2
    export is refused by name (its Phi-3 rotates every feature), the ONNX one computes it."""
    import transformers as tf

    from zoo.export import ExportError, export

    published = dict(PUBLISHED["phi3"][2], partial_rotary_factor=0.5)
    torch.manual_seed(0)
    hf = tf.Phi3ForCausalLM(tf.Phi3Config(**published)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if p.dim() == 2:
                p.normal_(std=0.5 if "embed" in name or "lm_head" in name else 0.25)
    hf.save_pretrained(tmp_path / "phi")
    model = zoo.build(f"local-dir:{tmp_path / 'phi'}").eval()
    assert model.recipe.components["positional"].settings["fraction"] == 0.5
    prompts, mask = left_padded()
    real = mask.bool()
    with torch.no_grad():
        ref = hf(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
        torch.testing.assert_close(model(prompts, padding_mask=mask == 0)[real], ref[real],
                                   rtol=0, atol=1e-5 * max(1.0, ref[real].abs().max().item()))
        tokens = hf.generate(prompts, attention_mask=mask, max_new_tokens=8, do_sample=False,
                             pad_token_id=END["phi3"])[:, prompts.shape[1]:]
    assert model.generate(prompts, padding_mask=mask == 0, max_new_tokens=8).tolist() == \
        tokens.tolist()
    full = zoo.build(f"local-dir:{tmp_path / 'phi'}", **{"positional.fraction": 1.0}).eval()
    with torch.no_grad():  # the unrotated half matters
        assert not torch.allclose(full(prompts[:1]), model(prompts[:1]), atol=1e-3)
    export(model, tmp_path / "out", format="transformers")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["model_type"], config["partial_rotary_factor"]) == ("phi3", 0.5)
    back = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    assert "self_attn.qkv_proj.weight" in " ".join(back.state_dict())
    with torch.no_grad():
        again = back(prompts, attention_mask=mask, position_ids=positions_of(mask)).logits
    torch.testing.assert_close(again[real], ref[real], rtol=0, atol=1e-4)
    with pytest.raises(ExportError, match="rope fraction 0.5: CTranslate2's converter"):
        export(model, tmp_path / "ct2", format="ctranslate2")
    ort = pytest.importorskip("onnxruntime")
    export(model, tmp_path / "onnx", format="onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    theirs = session.run(None, {"tokens": prompts.numpy(), "padding_mask": (mask == 0).numpy()})
    torch.testing.assert_close(torch.from_numpy(theirs[0])[real], ref[real], rtol=0, atol=1e-4)
    with pytest.raises(ExportError, match="Phi-3 alone rotates a share"):
        export(zoo.build("llama-tiny", **{"positional.fraction": 0.5,
                                          "attention.qk_norm": True}),
               tmp_path / "x", format="transformers")
    with pytest.raises(ExportError, match="Phi-3's projections have no biases"):
        export(zoo.build("llama-tiny", **{"positional.fraction": 0.5, "attention.bias": True}),
               tmp_path / "x", format="transformers")


def test_an_export_transformers_cannot_express_is_refused_by_name(tmp_path):
    from zoo.export import ExportError, export

    model = zoo.build("gpt2-tiny", norm_placement="post")
    with pytest.raises(ExportError, match="norm_placement 'post'"):
        export(model, tmp_path / "out", format="transformers")
    assert not (tmp_path / "out").exists()
    # queries and keys normed (Qwen3's): only Qwen3 writes them, nothing drops them
    normed = {"attention.qk_norm": True}
    with pytest.raises(ExportError, match="(?s)gpt2: .*norms no query or key"):
        export(zoo.build("gpt2-tiny", **normed), tmp_path / "out", format="transformers")
    with pytest.raises(ExportError, match="(?s)marian: .*its queries and keys not normed"):
        export(zoo.build("transformer-tiny", **normed), tmp_path / "out", format="transformers")
    with pytest.raises(ExportError, match="attention qk_norm: zoo writes CTranslate2's"):
        export(zoo.build("transformer-tiny", **normed), tmp_path / "out", format="ctranslate2")
    with pytest.raises(ExportError, match="qk_norm_eps 0.001: Qwen3's query and key norms"):
        export(zoo.build("llama-tiny", **normed, **{"attention.qk_norm_eps": 1e-3}),
               tmp_path / "out", format="transformers")
    assert not (tmp_path / "out").exists()


def _model_of(source, lm_folders):
    if source in lm_folders:
        return zoo.build(f"local-dir:{lm_folders[source][1]}").eval()
    return zoo.build(source, dropout=0.0, attention_dropout=0.0).eval()


@pytest.mark.parametrize("source", ["gpt2", "tinyllama", "qwen2.5", "qwen3", "mistral",
                                    "phi3", "gemma", "gemma2", "gemma3", "llama-tiny"])
def test_ctranslate2_generator_export_decodes_zoos_greedy_tokens(source, lm_folders, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from zoo.export import default_vocabulary, export

    model = _model_of(source, lm_folders)
    export(model, tmp_path / "ct2", format="ctranslate2")
    names = default_vocabulary(model.settings.vocab_size)
    prompts, mask = left_padded(model.settings.vocab_size)
    rows = [[names[int(t)] for t in row[keep.bool()]] for row, keep in zip(prompts, mask)]
    found = ctranslate2.Generator(str(tmp_path / "ct2")).generate_batch(
        rows, max_length=10, sampling_topk=1, include_prompt_in_result=False, end_token=[])
    theirs = [[names.index(t) for t in r.sequences[0]] for r in found]
    with torch.no_grad():
        ours = model.generate(prompts, padding_mask=mask == 0, max_new_tokens=10,
                              min_new_tokens=10, do_sample=False, num_beams=1)
    assert theirs == ours.tolist()


def test_ctranslate2_export_names_the_ids_by_the_models_tokenizer(with_tokenizer, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from zoo.export import export

    _, tokenizer, folder = with_tokenizer
    model = zoo.build(f"local-dir:{folder}").eval()
    export(model, tmp_path / "ct2", format="ctranslate2")
    info = json.loads((tmp_path / "ct2" / "zoo-export.json").read_text())
    assert info["tokens"]["eos"] == "<|endoftext|>"
    prompt = tokenizer("Zoë bought a")["input_ids"]
    found = ctranslate2.Generator(str(tmp_path / "ct2")).generate_batch(
        [tokenizer.convert_ids_to_tokens(prompt)], max_length=8, sampling_topk=1,
        include_prompt_in_result=False)
    theirs = tokenizer.convert_tokens_to_ids(found[0].sequences[0])
    ours = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)[0].tolist()
    end = tokenizer.eos_token_id  # CTranslate2 leaves the end token out of its result
    assert theirs == (ours[: ours.index(end)] if end in ours else ours)


def test_ctranslate2_export_refuses_llama3_scaled_rope_by_name(lm_folders, tmp_path):
    pytest.importorskip("ctranslate2")
    from zoo.export import ExportError, export

    model = _model_of("llama-3.2", lm_folders)
    with pytest.raises(ExportError, match="rope scaling 'llama3'"):
        export(model, tmp_path / "ct2", format="ctranslate2")
    assert not (tmp_path / "ct2").exists()


@pytest.mark.parametrize("source", ["gpt2", "llama-3.2", "qwen3", "mistral", "gemma2"])
def test_onnx_export_gives_zoos_logits_on_left_padded_prompts(source, lm_folders, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from zoo.export import export

    model = _model_of(source, lm_folders)
    export(model, tmp_path / "onnx", format="onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    prompts, mask = left_padded()
    theirs = session.run(None, {"tokens": prompts.numpy(),
                                "padding_mask": (mask == 0).numpy()})[0]
    with torch.no_grad():
        ours = model(prompts, padding_mask=mask == 0)
    real = mask.bool()
    scale = max(1.0, ours[real].abs().max().item())
    torch.testing.assert_close(torch.from_numpy(theirs)[real], ours[real], rtol=0,
                               atol=1e-5 * scale)
