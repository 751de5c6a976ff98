"""Every recipe builds, runs forward and backward and keeps its contracts; the
paper's models equal torch.nn.Transformer, the ViTs equal timm."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import zoo

RECIPES = [n for n in zoo.list_recipes()
           if zoo.footprint(zoo.resolve(zoo.get_recipe(n))).parameters < 4 * 10**8]
"""The recipes this machine builds and trains a step of in seconds (the parameters of
llama-7b-shape's 6.7 billion, phi3-mini-shape's 3.8 billion, gemma-2b-shape's 2.5
billion, gemma3-1b-shape's 1.0 billion and qwen3-0.6b-shape's 596 million are only
counted, in test_language_models.py)."""


def batch_for(model, batch=2):
    s = model.settings
    if model.recipe.architecture.name == "vit":
        return (torch.randn(batch, s.in_chans, s.image_size, s.image_size),)
    if model.kind in ("language-model", "encoder"):
        return (torch.randint(1, s.vocab_size, (batch, 7)),)
    return (torch.randint(1, s.vocab_size, (batch, 9)), torch.randint(1, s.vocab_size, (batch, 7)))


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_builds_runs_and_learns(name):
    model = zoo.build(name, dropout=0.0)
    assert model.recipe.name == name
    inputs = batch_for(model)
    out = model(*inputs)
    if model.recipe.architecture.name == "vit":
        assert out.shape == (2, model.settings.num_classes)
    elif model.kind == "encoder":  # hidden states, and the pooler's output where it has one
        assert out.shape == (2, 7, model.settings.d_model)
        if model.pooler is not None:
            out = torch.cat([out.flatten(), model.pooled(out).flatten()])
    else:
        assert out.shape == (2, 7, model.settings.vocab_size)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    out.float().square().mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert not missing, f"no gradient reaches {missing[:5]}"


@pytest.mark.parametrize("name", [n for n in RECIPES if n.startswith("transformer")])
def test_decoder_causal_contract(name):
    model = zoo.build(name, dropout=0.0, encoder_layers=1, decoder_layers=2).eval()
    src, tgt = batch_for(model)
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] + 1) % model.settings.vocab_size + 1
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_bf16_forward_keeps_dtype():
    model = zoo.build("vit-tiny-patch4-28", dtype=torch.bfloat16)
    out = model(torch.randn(2, 1, 28, 28, dtype=torch.bfloat16))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_source_padding_changes_nothing():
    model = zoo.build("transformer-tiny", dropout=0.0).eval()
    src, tgt = torch.randint(1, 1000, (1, 6)), torch.randint(1, 1000, (1, 5))
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), model(padded, tgt), atol=1e-5, rtol=1e-5)


# -- transformer-base: the formula and torch.nn.Transformer ---------------------------------------
def paper_parameter_count(vocab, d, d_ff, n_enc, n_dec):
    attention = 4 * (d * d + d)
    ffn = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d + n_enc * encoder_layer + n_dec * decoder_layer  # one shared embedding


@pytest.mark.parametrize("name", ["transformer-base", "transformer-big", "transformer-tiny"])
def test_parameter_count_matches_formula(name):
    model = zoo.build(name, device="meta")
    s = model.settings
    expected = paper_parameter_count(s.vocab_size, s.d_model, s.d_ff, s.encoder_layers,
                                     s.decoder_layers)
    assert sum(p.numel() for p in model.parameters()) == expected
    if name == "transformer-base":
        assert expected == 63_082_496  # Table 3 reports ~65M with its own vocabulary


def copy_into_torch(model, ref: nn.Transformer) -> None:
    """Load zoo seq2seq weights into torch.nn.Transformer (q|kv -> in_proj)."""

    def attn(dst: nn.MultiheadAttention, src):
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.kv_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.kv_proj.bias]))
        dst.out_proj.weight.copy_(src.out_proj.weight)
        dst.out_proj.bias.copy_(src.out_proj.bias)

    def ffn(dst, src):
        dst.linear1.load_state_dict(src.ffn.fc1.state_dict())
        dst.linear2.load_state_dict(src.ffn.fc2.state_dict())

    with torch.no_grad():
        for dst, src in zip(ref.encoder.layers, model.encoder.layers, strict=True):
            attn(dst.self_attn, src.attn)
            ffn(dst, src)
            dst.norm1.load_state_dict(src.norm1.state_dict())
            dst.norm2.load_state_dict(src.norm2.state_dict())
        for dst, src in zip(ref.decoder.layers, model.decoder.layers, strict=True):
            attn(dst.self_attn, src.self_attn)
            attn(dst.multihead_attn, src.cross_attn)
            ffn(dst, src)
            for i in (1, 2, 3):
                getattr(dst, f"norm{i}").load_state_dict(getattr(src, f"norm{i}").state_dict())
        for stack in ("encoder", "decoder"):
            norm = getattr(model, stack).norm
            if norm is not None:
                getattr(ref, stack).norm.load_state_dict(norm.state_dict())


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_transformer_base_equals_torch_nn_transformer(placement):
    model = zoo.build("transformer-base", dropout=0.0, norm_placement=placement,
                      final_norm=True).eval()
    s = model.settings
    ref = nn.Transformer(
        d_model=s.d_model, nhead=s.n_heads, num_encoder_layers=s.encoder_layers,
        num_decoder_layers=s.decoder_layers, dim_feedforward=s.d_ff, dropout=0.0,
        activation="relu", batch_first=True, norm_first=placement == "pre", layer_norm_eps=1e-6,
    ).eval()
    copy_into_torch(model, ref)
    src = torch.randint(1, s.vocab_size, (2, 11))
    tgt = torch.randint(1, s.vocab_size, (2, 8))
    src[1, 8:] = 0  # padding
    with torch.no_grad():
        src_x = model.positional(model.src_embed(src) * model.embed_scale)
        tgt_x = model.positional(model.tgt_embed(tgt) * model.embed_scale)
        pad = src.eq(0)
        expected = ref(
            src_x, tgt_x, tgt_mask=nn.Transformer.generate_square_subsequent_mask(8),
            src_key_padding_mask=pad, memory_key_padding_mask=pad, tgt_is_causal=True,
        )
        expected = model.lm_head(expected)
        ours = model(src, tgt)
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)


def test_post_norm_has_no_final_norm_by_default_and_pre_norm_does():
    assert zoo.build("transformer-tiny").encoder.norm is None
    assert zoo.build("transformer-tiny", norm_placement="pre").encoder.norm is not None


def test_embeddings_are_shared_and_scaled():
    model = zoo.build("transformer-tiny")
    assert model.src_embed is model.tgt_embed
    assert model.lm_head.weight is model.tgt_embed.weight
    assert model.embed_scale == pytest.approx(64**0.5)
    separate = zoo.build("transformer-tiny", share_embeddings=False, src_vocab_size=500)
    assert separate.src_embed.weight.shape == (500, 64)
    assert separate.lm_head.weight is separate.tgt_embed.weight


@pytest.mark.parametrize("kern", ["eager", "sdpa"])
def test_incremental_decoding_with_cache_equals_full_decode(kern):
    model = zoo.build("transformer-tiny", kernel=kern, dropout=0.0).eval()
    src, tgt = torch.randint(1, 1000, (3, 9)), torch.randint(1, 1000, (3, 7))
    src[2, 6:] = 0
    with torch.no_grad():
        pad = model.padding_mask(src)
        memory = model.encode(src, pad)
        full = model.decode(tgt, memory, pad)
        cache = model.init_cache()
        steps = [model.decode(tgt[:, :2], memory, pad, cache=cache)]
        steps += [model.decode(tgt[:, t:t + 1], memory, pad, cache=cache) for t in range(2, 7)]
    assert cache.offset == 7
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", ["rope", "shaw", "xl", "t5-bias", "alibi"])
def test_positions_inside_attention_follow_a_head_width_of_their_own(positional):
    """head_dim 12 with 4 heads in a width of 64: positions inside attention work in the
    heads' width (48), not d_model / n_heads (16); rope, Shaw and XL used to fail on it.
    The reference: decoding a step at a time with the cache equals the full decode."""
    model = zoo.build("transformer-tiny", head_dim=12, positional=positional,
                      dropout=0.0).eval()
    attn = model.decoder.layers[0].self_attn
    assert (attn.n_heads, attn.head_dim, attn.inner_dim) == (4, 12, 48)
    src, tgt = torch.randint(1, 1000, (2, 9)), torch.randint(1, 1000, (2, 6))
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory)
        cache = model.init_cache()
        steps = [model.decode(tgt[:, t:t + 1], memory, cache=cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


# -- ViT: timm's counts and logits ----------------------------------------------------------------
TIMM_COUNTS = {
    "vit-tiny-patch16-224": 5_717_416,
    "vit-small-patch16-224": 22_050_664,
    "vit-base-patch16-224": 86_567_656,
}


@pytest.mark.parametrize("name", TIMM_COUNTS)
def test_vit_matches_timm(name):
    timm = pytest.importorskip("timm")
    ref = timm.create_model(name.replace("-", "_"), pretrained=False).eval()
    ours = zoo.build(name).eval()
    assert sum(p.numel() for p in ours.parameters()) == TIMM_COUNTS[name]
    assert sum(p.numel() for p in ref.parameters()) == TIMM_COUNTS[name]
    with torch.no_grad():
        for p in ref.parameters():  # timm's zero-initialised parts made non-trivial
            p.add_(torch.randn_like(p) * 0.02)
    ours.load_state_dict(zoo.convert_timm_vit(ref.state_dict()), strict=True)
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), ref(images), atol=1e-4, rtol=1e-4)


def _timm_and_ours_with_drop_path(rate: float):
    timm = pytest.importorskip("timm")
    from timm.models.vision_transformer import VisionTransformer

    ref = VisionTransformer(img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=64,
                            depth=6, num_heads=4, mlp_ratio=2.0, drop_path_rate=rate)
    ours = zoo.build("vit-tiny-patch4-28", drop_path_rate=rate)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ours.load_state_dict(zoo.convert_timm_vit(ref.state_dict()), strict=True)
    return timm, ref, ours


def test_vit_drop_path_is_timms():
    timm, ref, ours = _timm_and_ours_with_drop_path(0.3)
    def rates(blocks, attr):
        return [getattr(b.drop_path1, attr, 0.0) for b in blocks]

    assert rates(ours.blocks, "p") == rates(ref.blocks, "drop_prob")
    assert rates(ours.blocks, "p")[-1] == pytest.approx(0.3) and rates(ours.blocks, "p")[0] == 0
    images = torch.randn(16, 1, 28, 28)
    for seed in range(3):  # training: the same examples' branches dropped, the same logits
        torch.manual_seed(seed)
        expected = ref.train()(images)
        torch.manual_seed(seed)
        torch.testing.assert_close(ours.train()(images), expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # evaluation drops nothing: the same as without drop path
        _, plain, _ = _timm_and_ours_with_drop_path(0.0)
        plain.load_state_dict(ref.state_dict())
        torch.testing.assert_close(ours.eval()(images), plain.eval()(images), atol=1e-5,
                                   rtol=1e-5)


def _timm_conv_stem_vit(patch_size: int, d_model: int, **sizes):
    """timm's hybrid ViT over its ConvStem in Xiao et al.'s layout: 3x3 stride-2
    convolutions with BatchNorm and ReLU, then a 1x1 convolution; no projection after."""
    pytest.importorskip("timm")
    from functools import partial

    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer
    from timm.models.vision_transformer_hybrid import ConvStem

    n = patch_size.bit_length() - 1
    stem = ConvStem(in_chans=sizes["in_chans"], depth=n + 1,
                    channels=tuple(d_model >> (n - 1 - i) for i in range(n)) + (d_model,),
                    kernel_size=(3,) * n + (1,), stride=(2,) * n + (1,))
    return VisionTransformer(
        img_size=sizes["img_size"], patch_size=1, in_chans=sizes["in_chans"],
        num_classes=10, embed_dim=d_model, depth=2, num_heads=4, mlp_ratio=2.0,
        class_token=False, global_pool="avg", fc_norm=False,  # zoo norms before the mean
        embed_layer=partial(HybridEmbed, backbone=stem, proj=False))


@pytest.mark.parametrize("patch_size,image_size", [(4, 28), (8, 32)])
def test_vit_conv_stem_is_timms_conv_stem(patch_size, image_size):
    ref = _timm_conv_stem_vit(patch_size, 64, img_size=image_size, in_chans=1)
    ours = zoo.build("vit-tiny-patch4-28", stem="conv", patch_size=patch_size,
                     image_size=image_size, depth=2, class_token=False, pool="mean")
    assert len(ours.patch_embed) == patch_size.bit_length()  # log2(patch) 3x3 and one 1x1
    state = ref.state_dict()
    with torch.no_grad():
        for name, t in state.items():  # BatchNorm's statistics and timm's zeros made non-trivial
            if t.is_floating_point():
                t.add_(torch.rand_like(t) * 0.1 if name.endswith("running_var")
                       else torch.randn_like(t) * 0.02)
    ours.load_state_dict(zoo.convert_timm_vit(state), strict=True)
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in ref.parameters())
    images = torch.randn(6, 1, image_size, image_size)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(images), ref.eval()(images), atol=1e-5, rtol=1e-5)
        # training: BatchNorm normalises by the batch and moves its statistics alike
        torch.testing.assert_close(ours.train()(images), ref.train()(images), atol=1e-5,
                                   rtol=1e-5)
        torch.testing.assert_close(ours.patch_embed[0].bn.running_mean,
                                   ref.patch_embed.backbone[0].bn.running_mean)


def test_vit_conv_stem_wants_a_power_of_two_patch():
    with pytest.raises(zoo.RecipeError, match="power of two"):
        zoo.build("vit-tiny-patch4-28", stem="conv", patch_size=7)


def test_drop_path_keeps_the_expectation_and_drops_whole_examples():
    from zoo.plugin_api import DropPath

    x = torch.randn(20000, 3, 4)
    dropped = DropPath(0.25).train()(x)
    zeroed = (dropped == 0).flatten(1).all(1)
    assert 0.23 < zeroed.float().mean() < 0.27
    torch.testing.assert_close(dropped[~zeroed], x[~zeroed] / 0.75)
    assert DropPath(0.25).eval()(x) is x


def test_layerdrop_skips_whole_layers_in_training_only():
    model = zoo.build("transformer-tiny", vocab_size=20, dropout=0.0, encoder_layerdrop=0.5,
                      decoder_layerdrop=0.5)
    src, tgt = torch.randint(3, 20, (2, 5)), torch.randint(3, 20, (2, 4))
    calls = []
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.register_forward_hook(lambda m, i, o: calls.append(m))
    model.eval()
    full = model(src, tgt)
    n_layers = len(model.encoder.layers) + len(model.decoder.layers)
    assert len(calls) == n_layers
    model.train()
    counts = []
    for seed in range(40):
        calls.clear()
        torch.manual_seed(seed)
        model(src, tgt)
        counts.append(len(calls))
    # each layer kept with probability 1/2: about half are run, sometimes none, never more
    assert 0.35 < sum(counts) / (40 * n_layers) < 0.65 and max(counts) <= n_layers
    assert model.drops_layers
    calls.clear()
    torch.manual_seed(0)  # the draws follow fairseq's rule: one uniform per layer per batch
    draws = torch.rand(n_layers)
    torch.manual_seed(0)
    model(src, tgt)
    assert len(calls) == int((draws >= 0.5).sum())
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(src, tgt), full)


def test_timm_converter_refuses_what_it_cannot_place():
    with pytest.raises(zoo.ZooError, match="reg_token"):
        zoo.convert_timm_vit({"reg_token": torch.zeros(1, 4, 8)})


# -- the kinds of model (zoo.kinds): declared, checked, dispatched on ---------------------------
@pytest.mark.parametrize("name", zoo.list_components("architecture"), ids=lambda c: c.name)
def test_every_architecture_declares_a_kind_its_class_keeps(name):
    from zoo.kinds import PROTOCOLS, missing_methods

    assert name.capabilities.kind in PROTOCOLS
    assert missing_methods(name.load(), name.capabilities.kind) == []
    # the protocol names what the core calls: a class without it is refused
    assert missing_methods(object, name.capabilities.kind)


def test_a_built_model_carries_its_kind_and_the_engine_dispatches_on_it():
    from zoo.kinds import kind_of

    kinds = {n: kind_of(zoo.build(n)) for n in ("transformer-tiny", "llama-tiny",
                                                 "vit-tiny-patch4-28")}
    assert kinds == {"transformer-tiny": "seq2seq", "llama-tiny": "language-model",
                     "vit-tiny-patch4-28": "image-classifier"}
    assert isinstance(zoo.build("transformer-tiny"), zoo.plugin_api.Seq2SeqModel)
    with pytest.raises(zoo.RecipeError, match="an image-classifier model"):
        zoo.generate(zoo.build("vit-tiny-patch4-28"), torch.ones(1, 3, dtype=torch.long),
                     start_id=1, eos_ids=(2,))
    plain = nn.Linear(2, 2)  # not built by zoo: no kind, and said so
    assert kind_of(plain) is None
    with pytest.raises(zoo.RecipeError, match="of no kind zoo decodes"):
        zoo.generate(plain, torch.ones(1, 3, dtype=torch.long), start_id=1, eos_ids=(2,))


def test_an_architecture_of_an_older_plugin_gets_its_kind_inferred_or_refused(fresh_registry):
    import warnings

    seq2seq = zoo.get_component("architecture", "seq2seq").load()

    class Partial(nn.Module):  # says language model, lacks what one has
        def forward(self, tokens, padding_mask=None, cache=None):
            return tokens

    zoo.register_component("architecture", "older", seq2seq,
                           capabilities={"inputs": "tokens", "outputs": "tokens"})
    zoo.register_component("architecture", "partial", Partial,
                           capabilities={"inputs": "tokens", "outputs": "tokens",
                                         "kind": "language-model"})
    recipe = zoo.get_recipe("transformer-tiny").model_dump()
    recipe["architecture"]["name"] = "older"
    with pytest.warns(DeprecationWarning, match="declares no kind; zoo takes it for 'seq2seq'"):
        model = zoo.build(zoo.Recipe.model_validate(recipe))
    assert model.kind == "seq2seq"
    recipe["architecture"]["name"] = "partial"
    with warnings.catch_warnings(), pytest.raises(
            zoo.PluginError, match="declares kind 'language-model'.*defines no padding_mask, "
                                   "init_cache"):
        zoo.build(zoo.Recipe.model_validate(recipe))


def test_a_built_model_carries_one_declared_record():
    from zoo.plugin_api import Kind, ModelRecord, record_of, update_record

    model = zoo.build("gpt2-tiny")
    record = record_of(model)
    assert isinstance(record, ModelRecord)
    assert record.kind is Kind.LANGUAGE_MODEL and model.kind == "language-model"
    assert record.recipe.name == "gpt2-tiny" and record.source == "gpt2-tiny"
    assert record.settings is model.settings and record.imported is None
    # the architecture's own word: its learned table's rows, its padding token
    assert record.max_positions == model.settings.max_len and record.pad_id == model.pad_id
    assert set(vars(record)) <= set(vars(model))  # every field is the model's attribute
    changed = record.generation.model_copy(update={"num_beams": 3})
    model.generation = changed  # a user's change is the record's
    assert record_of(model).generation is changed
    update_record(model, tokenizer="t")
    assert record_of(model).tokenizer == "t"
    with pytest.raises(zoo.ZooError, match="no field 'tokeniser'.*tokenizer"):
        update_record(model, tokeniser="t")
    plain = record_of(nn.Linear(2, 2))  # not built by zoo: the defaults
    assert plain == ModelRecord() and plain.decodes_incrementally


def test_nothing_probes_a_model_or_compares_its_kind_as_a_string():
    """zoo reads a model through its record (zoo.record.record_of), and its kind as a
    Kind: no getattr(model, "field", ...) of a record field, no kind == "seq2seq"."""
    import re

    from zoo.kinds import Kind
    from zoo.record import FIELDS

    root = Path(zoo.__file__).parent.parent
    probe = re.compile(r"getattr\((?:model|self\.model|m|zoo_model), \"(%s)\"" % "|".join(FIELDS))
    string_kind = re.compile(r"kind(?:_of\(\w+\))? *(?:==|!=|in|not in) *\(?\"(?:%s)\"" % "|".join(
        k.value for k in Kind))
    found = [f"{path.relative_to(root)}:{n}: {line.strip()}"
             for folder in ("zoo", "plugins") for path in (root / folder).rglob("*.py")
             if path.name not in ("record.py", "kinds.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if probe.search(line) or string_kind.search(line)]
    assert not found, "\n".join(found)
