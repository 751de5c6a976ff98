"""The deberta-v2 format and disentangled attention: deberta-v3-base's published config at
small widths (every other key kept; 4 buckets, so that distances past them share rows
and the logarithmic buckets are reached) gives transformers' hidden states, masked-LM
and class logits on a padded batch, and so do the variants transformers reads
(projections of the positions' own, one term, no table norm, clipped distances);
the disentangled terms are what makes them equal; what zoo cannot express is refused by
name."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.errors import FormatError

from .formats import onnx_encoder

tf = pytest.importorskip("transformers")

PUBLISHED = {"model_type": "deberta-v2", "attention_probs_dropout_prob": 0.1,
             "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
             "initializer_range": 0.02, "intermediate_size": 3072,
             "max_position_embeddings": 512, "relative_attention": True,
             "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
             "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7, "max_relative_positions": -1,
             "position_biased_input": False, "num_attention_heads": 12,
             "num_hidden_layers": 12, "type_vocab_size": 0, "vocab_size": 128100}
"""microsoft/deberta-v3-base's config.json."""
SMALL = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, num_hidden_layers=2,
             position_buckets=4, max_position_embeddings=64, vocab_size=99)


def _folder(cls: str, folder, **changes):
    torch.manual_seed(0)
    config = {**PUBLISHED, **SMALL, **changes, "architectures": [cls], "num_labels": 3}
    model = getattr(tf, cls)(tf.DebertaV2Config(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(folder)
    return model


def _batch(side: str = "right"):
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(1, 99, (3, 20), generator=g)
    mask = torch.ones_like(tokens)
    if side == "right":
        mask[1, 12:], mask[2, 5:] = 0, 0
    else:  # positions are places in the row, padding included, in both
        mask[1, :8], mask[2, :15] = 0, 0
    return tokens.masked_fill(mask == 0, 0), mask


def _compare(reference, ours, cls, side: str = "right"):
    tokens, mask = _batch(side)
    with torch.no_grad():
        out = reference(input_ids=tokens, attention_mask=mask)
        got = ours(tokens, padding_mask=mask == 0)
    expected = out.last_hidden_state if cls == "DebertaV2Model" else out.logits
    real = mask.bool() if expected.dim() == 3 else slice(None)
    return (got[real] - expected[real]).abs().max().item()


@pytest.mark.parametrize("cls,changes", [
    ("DebertaV2Model", {}),
    ("DebertaV2ForMaskedLM", {}),  # the legacy head's names (cls.predictions)
    ("DebertaV2ForMaskedLM", {"legacy": False}),  # lm_predictions.lm_head
    ("DebertaV2ForSequenceClassification", {}),
    ("DebertaV2Model", {"share_att_key": False}),
    ("DebertaV2Model", {"pos_att_type": "c2p", "norm_rel_ebd": "none"}),
    ("DebertaV2Model", {"pos_att_type": ["p2c"]}),
    ("DebertaV2Model", {"position_buckets": -1, "max_relative_positions": 6}),
], ids=["model", "mlm-legacy", "mlm", "classification", "own-projections", "c2p-no-norm",
        "p2c", "clipped"])
def test_a_deberta_folder_gives_transformers_outputs(cls, changes, tmp_path):
    reference = _folder(cls, tmp_path, **changes)
    ours = zoo.build(f"local-dir:{tmp_path}")
    assert ours.recipe.components["attention"].name == "disentangled"
    assert _compare(reference, ours, cls) < 1e-5
    if cls != "DebertaV2ForSequenceClassification":  # its first token is padding there
        assert _compare(reference, ours, cls, "left") < 1e-5
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in reference.parameters())


def test_the_disentangled_terms_are_what_makes_them_equal(tmp_path):
    """Without the position terms (vanilla attention, the table unread) the outputs move
    far from transformers'; with the terms but no buckets, too."""
    reference = _folder("DebertaV2Model", tmp_path)
    without = zoo.build(f"local-dir:{tmp_path}", **{"attention.terms": []})
    assert _compare(reference, without, "DebertaV2Model") > 1e-2
    unbucketed = zoo.build(f"local-dir:{tmp_path}", **{"positional.log": False})
    assert _compare(reference, unbucketed, "DebertaV2Model") > 1e-3


@pytest.mark.parametrize("cls,changes", [
    ("DebertaV2Model", {}), ("DebertaV2ForMaskedLM", {"legacy": False}),
    ("DebertaV2ForSequenceClassification", {}),
    ("DebertaV2Model", {"share_att_key": False, "position_buckets": -1,
                        "max_relative_positions": 6, "norm_rel_ebd": "none"})],
    ids=["model", "mlm", "classification", "own-projections-clipped"])
def test_zoo_export_writes_a_deberta_folder_transformers_reads_with_zoos_outputs(
        cls, changes, tmp_path):
    from zoo.export import export

    _folder(cls, tmp_path / "in", **changes)
    ours = zoo.build(f"local-dir:{tmp_path / 'in'}")
    export(ours, tmp_path / "out", "transformers")
    back, info = getattr(tf, cls).from_pretrained(tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert _compare(back.eval(), ours, cls) < 1e-5


@pytest.mark.parametrize("key,value,says", [
    ("position_biased_input", True, "position_biased_input=True"),
    ("relative_attention", False, "relative_attention=False"),
    ("conv_kernel_size", 3, "conv_kernel_size=3"),
    ("pos_att_type", "p2p|c2p", "pos_att_type='p2p|c2p'"),
    ("norm_rel_ebd", "batch_norm", "norm_rel_ebd='batch_norm'"),
    ("embedding_size", 16, "embedding_size=16"),
    ("some_new_key", 1, r"zoo does not know: \['some_new_key'\]"),
])
def test_what_zoo_cannot_express_is_refused_by_name(key, value, says, tmp_path):
    _folder("DebertaV2Model", tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(FormatError, match=f"deberta-v2 config option.*{says}"):
        zoo.build(f"local-dir:{tmp_path}")


def test_the_onnx_export_gives_transformers_hidden_states(tmp_path):
    """The disentangled terms and the log-bucketed distances traced into the graph: ONNX
    Runtime's hidden states equal transformers' at another length than the export's."""
    pytest.importorskip("onnxruntime")
    reference = _folder("DebertaV2Model", tmp_path / "in")
    tokens, mask = _batch()
    run = onnx_encoder(zoo.build(f"local-dir:{tmp_path / 'in'}"), tmp_path / "onnx")
    got = run(tokens, mask)
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (got[real] - expected[real]).abs().max() < 1e-5
