"""An encoder's pass in zoo's native code (plugins/architectures/native_encoder.py): inside a
block that fixes the weights, BERT's layers give transformers' hidden states at the real
tokens of a padded batch (zeros at padding, which the pass leaves out), an int8 model zoo's
own int8 layers' outputs; the plan is built once a block and follows what changes; whatever
it cannot run stays in Python, with the same outputs."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.derived import fixed_weights, held
from zoo.plugins.architectures import native_encoder
from zoo.plugins.architectures.encoder import Encoder

from .test_encoders import TINY, _batch, _saved
from .test_native import needs_kernel

tf = pytest.importorskip("transformers")
pytestmark = needs_kernel


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A tiny BERT folder made by transformers, its model, and zoo's build of it."""
    torch.manual_seed(0)
    model = tf.BertModel(tf.BertConfig(**TINY, architectures=["BertModel"])).eval()
    return model, _saved(model, tmp_path_factory.mktemp("bert"))


def _python(model, *args, **kwargs):
    """``model``'s output with every pass in Python."""
    model.native_pass = False
    try:
        return model(*args, **kwargs)
    finally:
        del model.native_pass


def _same_at_real_tokens(got, expected, keep, tolerance=1e-5):
    """``got`` (B, L, d) of the native pass is ``expected`` at the real tokens (``keep``,
    (B, L) True at them) and zeros at padding."""
    torch.testing.assert_close(got[keep], expected[keep], rtol=tolerance, atol=tolerance)
    assert torch.equal(got[~keep], torch.zeros_like(got[~keep]))


def _plans(monkeypatch) -> list:
    """A list that gains each plan the native encoder builds from now on."""
    built = []
    real = native_encoder.encoder_plan
    monkeypatch.setattr(native_encoder, "encoder_plan", lambda m: built.append(real(m))
                        or built[-1])
    return built


def test_berts_layers_in_native_code_give_transformers_hidden_states(bert, monkeypatch):
    reference, ours = bert
    tokens, mask, types = _batch()
    built = _plans(monkeypatch)
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask,
                             token_type_ids=types).last_hidden_state
        with fixed_weights(ours):
            got = ours(tokens, padding_mask=mask == 0, token_types=types)
            again = ours(tokens[:1], token_types=types[:1])  # no padding at all
            assert held(ours, native_encoder.PLAN) is built[0]
    assert len(built) == 1 and built[0] is not None  # once for the block
    _same_at_real_tokens(got, expected, mask.bool())
    assert (mask == 0).any() and got[mask == 0].abs().sum() == 0
    torch.testing.assert_close(again, reference(input_ids=tokens[:1], token_type_ids=types[:1])
                               .last_hidden_state.detach(), rtol=1e-5, atol=1e-5)


def test_outside_a_block_in_training_or_with_too_many_rows_the_pass_stays_in_python(
        bert, monkeypatch):
    _, ours = bert
    tokens, mask, types = _batch()
    built = _plans(monkeypatch)
    ran = []
    real = native_encoder.encode
    monkeypatch.setattr(native_encoder, "encode", lambda *a: ran.append(real(*a) is not None)
                        or None)
    monkeypatch.setattr("zoo.plugins.architectures.encoder.encode", native_encoder.encode)

    def run():
        return ours(tokens, padding_mask=mask == 0, token_types=types)

    with torch.no_grad():
        expected = _python(ours, tokens, padding_mask=mask == 0, token_types=types)
        run()
        assert ran == [False] and built == []  # outside a block: no plan
        with fixed_weights(ours):
            run()
            tokens_real = int(mask.sum())  # the rows the pass multiplies: padding is left out
            for layer in ours.layers:
                layer.ffn.fc2.native_rows = tokens_real - 1  # one row short
            try:
                torch.testing.assert_close(run(), expected, rtol=1e-6, atol=1e-6)
            finally:
                for layer in ours.layers:
                    del layer.ffn.fc2.native_rows
            most = native_encoder.MAX_ROWS
            monkeypatch.setattr(native_encoder, "MAX_ROWS", tokens_real - 1)
            torch.testing.assert_close(run(), expected, rtol=1e-6, atol=1e-6)
            monkeypatch.setattr(native_encoder, "MAX_ROWS", most)
            ours.train()
            try:
                torch.testing.assert_close(run(), expected, rtol=1e-6, atol=1e-6)  # no dropout
            finally:
                ours.eval()
    assert ran == [False, True, False, False, False]


def test_the_plan_follows_a_write_and_a_swapped_module(bert, monkeypatch):
    _, ours = bert
    tokens, mask, types = _batch()
    built = _plans(monkeypatch)
    weight = ours.layers[1].ffn.fc1.weight
    act = ours.layers[0].ffn.act
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            with fixed_weights(ours):
                ours(tokens, padding_mask=mask == 0, token_types=types)
                before = len(built)  # 0 where an earlier test's plan still holds
                weight.mul_(1.5)  # torch counts it: seen inside the block
                changed = ours(tokens, padding_mask=mask == 0, token_types=types)
            assert len(built) == before + 1
            _same_at_real_tokens(changed, _python(ours, tokens, padding_mask=mask == 0,
                                                  token_types=types), mask.bool())
            weight.data.mul_(2)  # torch does not count it: seen at the next block
            ours.layers[0].ffn.act = torch.nn.ReLU()  # a module swapped: no tensor differs
            with fixed_weights(ours):
                got = ours(tokens, padding_mask=mask == 0, token_types=types)
            assert len(built) == before + 2
            _same_at_real_tokens(got, _python(ours, tokens, padding_mask=mask == 0,
                                              token_types=types), mask.bool())
    finally:
        ours.layers[0].ffn.act = act
        with torch.no_grad():
            weight.copy_(saved)


def test_an_int8_encoder_in_native_code_gives_its_python_layers_outputs(bert, monkeypatch):
    """The same int8 products (one scale a row of activations, summed in int32): equal but
    where an activation's rounding falls the other way after fp32 sums in another order."""
    _, ours = bert
    int8 = zoo.quantize(zoo.build(f"local-dir:{ours.imported.folder}").eval())
    tokens, mask, types = _batch()
    built = _plans(monkeypatch)
    with torch.no_grad(), fixed_weights(int8):
        got = int8(tokens, padding_mask=mask == 0, token_types=types)
        expected = _python(int8, tokens, padding_mask=mask == 0, token_types=types)
    assert built[0] is not None
    real = mask.bool()
    cosine = torch.nn.functional.cosine_similarity(got[real], expected[real], dim=-1)
    assert cosine.min() > 0.9999, cosine.min()


@pytest.mark.parametrize("overrides,why", [
    ({"causal": True}, "causal"),
    ({"positional": "rope"}, "positions inside"),
    ({"attention": "performer"}, "not softmax attention"),
])
def test_what_the_native_pass_cannot_run_stays_in_python_and_says_why(overrides, why, caplog):
    torch.manual_seed(0)
    model = zoo.build("minilm-l6-h384", vocab_size=50, d_model=32, n_heads=4, d_ff=40,
                      layers=2, max_len=16, **overrides).eval()
    tokens = torch.randint(1, 50, (2, 7))
    with torch.no_grad():
        expected = _python(model, tokens)
        with fixed_weights(model), caplog.at_level("DEBUG", logger="zoo.native"):
            got = model(tokens)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # packed in the block
    assert held(model, native_encoder.PLAN) is None
    assert why in caplog.text, caplog.text


def test_a_pre_norm_relu_encoder_runs_natively_as_in_python():
    torch.manual_seed(0)
    model = zoo.build("minilm-l6-h384", vocab_size=50, d_model=32, n_heads=4, d_ff=40,
                      layers=2, max_len=16, norm_placement="pre", ffn="relu").eval()
    _natively_as_in_python(model, padded_from=(1, 5))
    assert isinstance(model, Encoder)


def _natively_as_in_python(model, padded_from: tuple[int, int]) -> None:
    """Two texts of 7 tokens, one padded from ``padded_from`` (text, position): ``model``'s
    native pass (its plan made in a fixed-weights block) gives its Python layers' outputs
    at the real tokens, zeros at padding."""
    tokens = torch.randint(1, 50, (2, 7))
    mask = torch.zeros(2, 7, dtype=torch.bool)
    mask[padded_from[0], padded_from[1]:] = True
    with torch.no_grad():
        expected = _python(model, tokens, padding_mask=mask)
        with fixed_weights(model):
            got = model(tokens, padding_mask=mask)
            assert held(model, native_encoder.PLAN) is not None
    _same_at_real_tokens(got, expected, ~mask)


def test_a_seq2seq_models_encoder_runs_natively_inside_a_decoding_call():
    from .test_static_decoder import source, tiny

    model = tiny()
    src = source()
    mask = model.padding_mask(src)
    with torch.no_grad():
        model.native_pass = False
        expected = model.encode(src, mask)
        del model.native_pass
        with fixed_weights(model):
            got = model.encode(src, mask)
            assert held(model.encoder, native_encoder.PLAN) is not None
    _same_at_real_tokens(got, expected, ~mask if mask is not None else
                         torch.ones(src.shape, dtype=torch.bool))


def test_grouped_query_attention_in_an_encoders_native_pass_is_pythons():
    """Each key head serves its group of query heads, as the Python layer's attention reads
    them (an attention made with fewer key and value heads than query heads)."""
    torch.manual_seed(0)
    model = zoo.build("minilm-l6-h384", vocab_size=50, d_model=32, n_heads=4, d_ff=40,
                      layers=2, max_len=16).eval()
    for block in model.layers:
        block.attn = type(block.attn)(None, d_model=32, n_heads=4, n_kv_heads=2,
                                      kernel=block.attn.kernel)
    _natively_as_in_python(model, padded_from=(0, 4))


def test_a_batch_of_more_tokens_than_the_products_limit_runs_natively_as_transformers(
        bert, monkeypatch):
    """Past ``LEVEL_ROWS`` real tokens each product still multiplies them all natively (its
    rate is level from there), attention each text's own: 12 texts of 1 to 60 tokens,
    more real tokens than the level, give transformers' hidden states."""
    reference, ours = bert
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([1, 60, 3, 17, 44, 9, 2, 31, 60, 5, 23, 12])
    tokens = torch.randint(1, 99, (12, 60), generator=g)
    mask = (torch.arange(60)[None] < lengths[:, None]).long()
    tokens[mask == 0] = 0
    types = torch.zeros_like(tokens)
    assert int(mask.sum()) > native_encoder.LEVEL_ROWS
    ran = []
    real = native_encoder.encode
    monkeypatch.setattr("zoo.plugins.architectures.encoder.encode",
                        lambda *a: ran.append(real(*a)) or ran[-1])
    with torch.no_grad():
        expected = reference(input_ids=tokens, attention_mask=mask,
                             token_type_ids=types).last_hidden_state
        with fixed_weights(ours):
            got = ours(tokens, padding_mask=mask == 0, token_types=types)
    assert ran and ran[0] is not None  # natively
    _same_at_real_tokens(got, expected, mask.bool())


def test_heads_of_a_width_that_is_no_multiple_of_eight_attend_natively_as_in_python():
    """Packed attention reads each head's odd width and texts of one token as Python does."""
    torch.manual_seed(0)
    model = zoo.build("minilm-l6-h384", vocab_size=50, d_model=36, n_heads=4, d_ff=40,
                      layers=2, max_len=16).eval()
    _natively_as_in_python(model, padded_from=(0, 1))
    _natively_as_in_python(model, padded_from=(1, 6))
