"""A plugin of the corpus of earlier releases, zoo-plugin-nllb (written against the docs
of 2026-12-01, "Writing a format plugin" of docs/from-the-hub.md, when zoo had no
M2M100 format and no fairseq sinusoids): its plain-class format ``nllb`` and its
positional ``fairseq-sinusoidal`` keep reading transformers' M2M100 / NLLB-200 folders.

Held to transformers itself: a tiny random ``M2M100ForConditionalGeneration`` saved with
``save_pretrained`` gives, through zoo with the corpus installed, transformers' logits
(fp32, 1e-5) and transformers' greedy tokens; the plugin's table is transformers'
``M2M100SinusoidalPositionalEmbedding`` table; options the plugin cannot express are
refused by name."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import zoo  # noqa: E402

from .conftest import plugins_from  # noqa: E402

VOCAB, PAD, BOS, EOS, START = 40, 1, 0, 2, 2


@pytest.fixture
def nllb(earlier_site, monkeypatch):
    """The corpus of earlier releases installed, zoo-plugin-nllb among it."""
    with plugins_from(earlier_site, monkeypatch):
        yield


def _m2m100(folder):
    """A tiny random M2M100 (NLLB-200's layout at width 16), saved as safetensors, with
    weights large enough that greedy tokens differ from one another (at transformers'
    initialisation, or with larger embeddings, the model repeats its last token) and
    that no source of ``_batch`` decodes the pad token (which transformers would give
    the zero position row, as fairseq does)."""
    torch.manual_seed(0)
    config = transformers.M2M100Config(
        vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
        decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=PAD,
        decoder_start_token_id=START, eos_token_id=EOS, bos_token_id=BOS,
        activation_function="relu", scale_embedding=True)
    model = transformers.M2M100ForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "shared" in name or "embed_tokens" in name or "lm_head" in name:
                p.normal_(std=0.1)  # scaled by sqrt(16) on the way in, with no norm after
            elif "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
            elif p.dim() == 1:
                p.normal_(std=0.1)
            else:
                p.mul_(20.0)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    assert (folder / "model.safetensors").is_file()
    return model


def _batch(rows=3, src_len=7, tgt_len=6):
    """Unpadded sources and targets (no pad id anywhere, the start token first)."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, VOCAB, (rows, src_len), generator=g)
    tgt = torch.randint(3, VOCAB, (rows, tgt_len), generator=g)
    tgt[:, 0] = START
    return src, tgt


def test_the_plugin_registers_its_format_and_its_positions(nllb):
    plugins = {p.name: p for p in zoo.list_plugins()}
    assert "nllb" in plugins and plugins["nllb"].error is None, plugins.get("nllb")
    fmt = zoo.get_component("format", "nllb")
    assert fmt.plugin == "nllb"
    assert fmt.capabilities.model_types == ("m2m_100",)
    positional = zoo.get_component("positional", "fairseq-sinusoidal")
    assert positional.plugin == "nllb" and positional.capabilities.kind == "absolute"


def test_its_positions_are_transformers_m2m100_table(nllb):
    from transformers.models.m2m_100.modeling_m2m_100 import (
        M2M100SinusoidalPositionalEmbedding as Reference,
    )

    cls = zoo.get_component("positional", "fairseq-sinusoidal").load()
    for d_model, pad in ((16, 1), (17, 0), (32, 3)):
        module = cls(cls.Settings(padding_idx=pad), d_model=d_model, max_len=8)
        x = torch.zeros(2, 20, d_model)  # past max_len: the table grows
        table = Reference.get_embedding(pad + 1 + 40, d_model, pad)
        torch.testing.assert_close(module(x)[0], table[pad + 1: pad + 21], rtol=0, atol=0)
        # a cache's offset continues the positions
        torch.testing.assert_close(module(x[:, 5:], offset=5), module(x)[:, 5:], rtol=0, atol=0)
        # transformers' own lookup for ids with no padding
        ids = torch.full((2, 20), pad + 1)
        ref = Reference(8, d_model, pad)(ids)
        torch.testing.assert_close(module(x), ref, rtol=0, atol=0)


def test_an_m2m100_folder_gives_transformers_logits_and_greedy_tokens(nllb, tmp_path):
    folder = tmp_path / "m2m100"
    hf = _m2m100(folder)
    model = zoo.build(f"local-dir:{folder}", pretrained=True).eval()
    assert model.imported.format == "nllb"  # the plugin's format read it
    src, tgt = _batch()
    with torch.no_grad():
        ref = hf(input_ids=src, decoder_input_ids=tgt).logits
        out = model(src, tgt)
    assert out.dtype == torch.float32
    assert ref.std() > 0.1  # logits that differ from token to token
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)

    with torch.no_grad():
        expected = hf.generate(input_ids=src, attention_mask=torch.ones_like(src),
                               do_sample=False, num_beams=1, max_new_tokens=5)
    got = zoo.generate(model, src, max_new_tokens=5)
    assert expected[:, 0].eq(START).all()
    expected = expected[:, 1:]  # transformers keeps the start token, zoo leaves it out

    def cut(row):
        return row[: row.index(EOS) + 1] if EOS in row else row

    assert [cut(r) for r in got.tolist()] == [cut(r) for r in expected.tolist()]
    assert len({t for r in expected.tolist() for t in r}) > 1  # not one token over and over


@pytest.mark.parametrize("key, value", [("activation_function", "gelu"),
                                        ("decoder_attention_heads", 4),
                                        ("tie_word_embeddings", False),
                                        ("some_new_option", 3)])
def test_options_it_cannot_express_are_refused_by_name(nllb, tmp_path, key, value):
    folder = tmp_path / "m2m100"
    _m2m100(folder)
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(zoo.FormatError, match=key):
        zoo.build(f"local-dir:{folder}", pretrained=True)


def test_inert_bookkeeping_keys_are_accepted(nllb, tmp_path):
    folder = tmp_path / "m2m100"
    _m2m100(folder)
    config = json.loads((folder / "config.json").read_text())
    # keys the Hub's NLLB-200 and m2m100 configs carry, which change nothing computed
    config.update({"_name_or_path": "/home/nllb/", "tokenizer_class": "NllbTokenizer",
                   "torch_dtype": "float32", "num_hidden_layers": 2, "init_std": 0.02,
                   "gradient_checkpointing": False, "max_length": 200})
    (folder / "config.json").write_text(json.dumps(config))
    model = zoo.build(f"local-dir:{folder}", pretrained=True)
    assert model.imported.format == "nllb"
