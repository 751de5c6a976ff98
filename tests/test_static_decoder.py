"""The seq2seq architecture's static decoder (fixed buffers, one product for q, k and v)
gives what the general path gives (DecoderCache through each attention's forward), and
steps aside whenever a part of the decoder is not plain."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from zoo.decoding import GenerationSettings, generate
from zoo.ops import Linear
from zoo.plugins.architectures.static_decoder import StaticDecoder, fused_qkv, refusal
from zoo.quantization import quantize

from .test_decoding import BOS, EOS
from .test_native import needs_kernel
from .test_decoding import tiny as tiny_of


def native_runs(cls, monkeypatch) -> list[bool]:
    """A list that gains, for each ``cls`` (StaticDecoder, StaticLM) made from now on,
    whether the native step runs it."""
    ran = []
    made = cls.__init__

    def watched(self, *args, **kwargs):
        made(self, *args, **kwargs)
        ran.append(self.native is not None)

    monkeypatch.setattr(cls, "__init__", watched)
    return ran


def tiny(vocab=16, **kw):
    """test_decoding's sharpened transformer-tiny, with a vocabulary of 16 here."""
    return tiny_of(vocab, **kw)


def both_paths(model, run):
    """run() through the static decoder, then through the general path."""
    assert refusal(model) is None
    model.static_decoding = True
    static = run()
    model.static_decoding = False
    try:
        return static, run()
    finally:
        del model.static_decoding


def source(vocab=16):
    src = torch.randint(3, vocab, (3, 7), generator=torch.Generator().manual_seed(1))
    src[1, 4:] = 0  # padding
    return src


VARIANTS = [
    {},
    {"norm_placement": "pre"},
    {"positional": "rope"},
    {"positional": "learned"},
    {"ffn": "swiglu", "norm": "rmsnorm"},
    {"attention": {"name": "vanilla", "settings": {"bias": False, "scale": 0.3}},
     "cross_attention": {"name": "vanilla", "settings": {"bias": False}}},
    {"share_embeddings": False, "tie_output": False, "output_bias": True,
     "scale_output": True, "embedding_norm": True},
    {"head_dim": 8, "kernel": "eager"},
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(o) or "base")
def test_static_steps_give_the_general_paths_logits_and_tokens(overrides):
    model = tiny(**overrides)
    src = source()
    memory, mask = model.encode(src), model.padding_mask(src)
    steps = torch.randint(3, 16, (3, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        static = StaticDecoder(model, memory, mask, groups=1, length=6)
        cache = model.init_cache()
        for t in range(6):
            a = static(steps[:, t:t + 1])
            b = model.decode(steps[:, t:t + 1], memory, mask, cache=cache)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    g = both_paths(model, lambda: generate(model, src, max_new_tokens=10))
    assert torch.equal(*g)
    beams = both_paths(model, lambda: generate(model, src, num_beams=3, max_new_tokens=8,
                                              return_scores=True))
    assert torch.equal(beams[0][0], beams[1][0])
    torch.testing.assert_close(beams[0][1], beams[1][1], rtol=1e-5, atol=1e-5)


def test_beams_reordered_in_the_buffers_equal_the_general_caches():
    # a beam search moves rows among the beams of each source at every step
    model = tiny(vocab=12)
    src = source(12)
    settings = GenerationSettings(start_id=0, eos_ids=(EOS,), pad_id=0, max_length=9,
                                  num_beams=4, length_penalty=0.7)
    a, b = both_paths(model, lambda: generate(model, src, settings))
    assert torch.equal(a, b)
    a, b = both_paths(model, lambda: generate(model, src, settings, num_beams=1))
    assert torch.equal(a, b)


def test_int8_layers_decode_statically_with_a_fused_product():
    model = quantize(tiny())
    assert fused_qkv(model.decoder.layers[0].self_attn) is not None
    src = source()
    a, b = both_paths(model, lambda: generate(model, src, num_beams=3, max_new_tokens=8))
    assert torch.equal(a, b)


def test_the_fused_product_follows_the_weights():
    model = tiny()
    attn = model.decoder.layers[0].self_attn
    first = fused_qkv(attn)
    assert fused_qkv(attn) is first  # kept while the weights stay
    src = source()
    before = generate(model, src, max_new_tokens=8)
    with torch.no_grad():
        attn.kv_proj.weight.mul_(-2.0)
    assert fused_qkv(attn) is not first
    torch.testing.assert_close(fused_qkv(attn).weight[attn.inner_dim:], attn.kv_proj.weight)
    a, b = both_paths(model, lambda: generate(model, src, max_new_tokens=8))
    assert torch.equal(a, b) and not torch.equal(a, before)
    assert not any("fused" in k for k in model.state_dict())


def test_parts_that_are_not_plain_take_the_general_path(caplog):
    # each refusal names the layer and the part, and the gate logs it (zoo native status)
    assert refusal(tiny(positional="shaw")) == "layer 0's attention holds positions of its own"
    assert "not softmax attention" in refusal(tiny(attention="linear"))
    model = tiny()
    model.decoder.layers[1].self_attn.record_weights = True
    assert refusal(model).startswith("layer 1's")
    assert refusal(tiny().train()) == "the model is in training mode"
    # a subclass of the plain mechanism that rewrites _attend and says nothing
    vanilla = type(tiny().decoder.layers[0].self_attn)
    Peeking = type("Peeking", (vanilla,), {"_attend": vanilla._attend})
    model = tiny()
    model.decoder.layers[0].cross_attn.__class__ = Peeking
    assert refusal(model) == ("layer 0's Peeking is not softmax attention over every key, "
                              "or records its maps")
    model = tiny()
    src = source()
    memory = model.encode(src)
    model.static_decoding = False
    with caplog.at_level("DEBUG", logger="zoo.native"):
        assert model.static_decoder(memory, None, groups=1, length=4) is None
    assert "does not run this model: static_decoding is off" in caplog.text


def test_a_step_past_the_buffers_is_refused():
    model = tiny()
    src = source()
    decoder = model.static_decoder(model.encode(src), None, groups=1, length=2)
    with torch.no_grad():
        decoder(torch.full((3, 1), BOS))
        decoder(torch.full((3, 1), BOS))
        with pytest.raises(ValueError, match="hold 2 steps"):
            decoder(torch.full((3, 1), BOS))


# -- the native step (plugins/architectures/csrc/decoder_layers.cpp) ---------------------------
T5_LAYER = {"positional": "t5-bias", "norm": "rmsnorm", "ffn": "geglu", "ffn.approximate": "tanh",
            "norm_placement": "pre", "attention": {"name": "vanilla",
                                                   "settings": {"bias": False, "scale": 1.0}}}
"""Flan-T5's layer: relative position bias inside self-attention, RMSNorm, gated tanh GELU."""
NATIVE = VARIANTS + [
    {"positional": "rope", "norm": "rmsnorm", "ffn": "swiglu", "norm_placement": "pre"},
    {"positional": {"name": "rope", "settings": {"layout": "interleaved"}}},
    {"ffn": "gelu", "ffn.approximate": "tanh", "norm_placement": "pre"},
    {"ffn": "silu"},  # Marian's network (opus-mt)
    {"positional": "t5-bias"}, {"positional": "alibi"},
    {"ffn": "geglu", "norm": "rmsnorm", "norm_placement": "pre"},
    {"ffn": "relu", "ffn.bias": False, "norm": "rmsnorm", "positional": "t5-bias"}, T5_LAYER]


def _python_and_native_steps(model, groups=1):
    """Logits of six steps through the static decoder in C++ and in Python, with a beam
    reorder after the third; and whether the C++ step ran."""
    src = source()
    memory, mask = model.encode(src), model.padding_mask(src)
    rows = src.shape[0] * groups
    steps = torch.randint(3, 16, (rows, 6), generator=torch.Generator().manual_seed(2))
    moved = torch.arange(rows).view(-1, groups).flip(-1).flatten()  # beams of a source swap
    out, native = [], []
    with torch.no_grad():
        for use in (True, False):
            StaticDecoder.native_step = use
            try:
                decoder = StaticDecoder(model, memory, mask, groups=groups, length=6)
            finally:
                StaticDecoder.native_step = True  # the class's own value, for later tests
            native.append(decoder.native is not None)
            logits = []
            for t in range(6):
                logits.append(decoder(steps[:, t:t + 1]))
                if t == 2:
                    decoder.reorder(moved)
            out.append(torch.cat(logits, 1))
    return out, native


@needs_kernel
@pytest.mark.parametrize("overrides", NATIVE, ids=lambda o: ",".join(o) or "base")
@pytest.mark.parametrize("groups", [1, 3])
def test_the_native_step_gives_the_python_steps_logits(overrides, groups, monkeypatch):
    """The C++ step computes the Python step's logits up to fp32 rounding (its
    attention and norms sum in another order), beams, padding, pre-norm, GELU, head
    widths and scales included; and the same tokens in a search."""
    # the kernel takes 4 rows by default on AVX-512 (128 on AVX2): 9 rows here
    monkeypatch.setattr(Linear, "native_rows", 16)
    (native, python), ran = _python_and_native_steps(tiny(**overrides), groups)
    assert ran == [True, False]
    torch.testing.assert_close(native, python, rtol=1e-5, atol=1e-5)
    assert torch.equal(native.argmax(-1), python.argmax(-1))


def _tanh_network(model):
    model.decoder.layers[1].ffn.act = torch.nn.Tanh()  # no activation code of the step's


def _one_layer_rotated_otherwise(model):
    import copy

    attn = model.decoder.layers[1].self_attn  # (the layers share one module: a copy)
    attn.positional = copy.deepcopy(attn.positional)
    attn.positional.inv_freq.mul_(0.5)


@needs_kernel
def test_layers_rotated_by_rotations_of_their_own_run_natively(monkeypatch):
    """Each layer's own rotation of its queries and keys (Gemma 3's local and global
    bases): the native step gives the Python step's logits, each layer rotated by its
    module's matrix."""
    monkeypatch.setattr(Linear, "native_rows", 16)
    model = tiny(positional="rope")
    _one_layer_rotated_otherwise(model)
    (native, python), ran = _python_and_native_steps(model)
    assert ran == [True, False]
    torch.testing.assert_close(native, python, rtol=1e-5, atol=1e-5)
    plain = tiny(positional="rope")
    plain.load_state_dict(model.state_dict())
    (other, _), _ = _python_and_native_steps(plain)
    assert not torch.allclose(other, native, atol=1e-3)  # the second rotation mattered


@needs_kernel
@pytest.mark.parametrize("overrides,change,why", [
    ({}, _tanh_network, "not a plain MLP or GLU of ReLU, GELU or SiLU")], ids=["tanh"])
def test_parts_the_native_step_does_not_run_stay_in_python(overrides, change, why,
                                                           monkeypatch, caplog):
    monkeypatch.setattr(Linear, "native_rows", 16)
    model = tiny(**overrides)
    (_, _), ran = _python_and_native_steps(model)
    assert ran == [True, False]  # as it is, the step runs it
    change(model)
    assert refusal(model) is None
    with caplog.at_level("DEBUG", logger="zoo.native"):  # the gate says why it refused
        (_, _), ran = _python_and_native_steps(model)
    assert ran == [False, False]
    assert any(why in r.getMessage() for r in caplog.records), caplog.text


@needs_kernel
def test_a_feed_forward_network_that_rewrites_forward_stays_in_python():
    model = tiny()
    ffn = model.decoder.layers[0].ffn
    # a subclass that changes what forward computes, without saying plain_mlp again
    doubled = type("Doubled", (type(ffn),), {"forward": lambda self, x: 2 * super(
        type(self), self).forward(x)})
    ffn.__class__ = doubled
    (native, python), ran = _python_and_native_steps(model)
    assert ran == [False, False]
    ffn.__class__ = doubled.__mro__[1]
    (again, _), ran = _python_and_native_steps(model)
    assert ran == [True, False] and not torch.allclose(again, native)


@needs_kernel
def test_more_rows_than_the_kernel_takes_stay_in_python(monkeypatch):
    model = tiny()
    monkeypatch.setattr(Linear, "native_rows", 2)  # three sources: three rows a step
    (_, _), ran = _python_and_native_steps(model)
    assert ran == [False, False]


@needs_kernel
def test_native_step_arguments_that_do_not_fit_are_refused_by_name_not_crashed_on():
    """tests/native_fuzz.py steps the native plan (torch.classes.zoo_decoder) with each argument made
    inconsistent (the issue's SIGSEGVs, SIGFPE, malloc assertion and silent reads) in a
    process of its own: each call is a ValueError naming the argument."""
    import subprocess
    import sys
    from pathlib import Path

    from .native_fuzz import CHANGES

    done = subprocess.run([sys.executable, "-m", "tests.native_fuzz"], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"survived {len(CHANGES)}" in done.stdout
    # the plugin's op lives in its own namespace, not in the core's
    assert "zoo_decoder" in done.stdout and "namespace zoo_decoder" in done.stdout


@needs_kernel
@pytest.mark.parametrize("change", ["strided", "short"])
def test_norm_weights_the_native_step_cannot_read_stay_in_python(change, monkeypatch):
    monkeypatch.setattr(Linear, "native_rows", 16)
    model = tiny()
    norm = model.decoder.layers[1].norm2
    d = norm.weight.numel()
    with torch.no_grad():
        if change == "strided":  # the same values, every other float of a longer storage
            wide = torch.zeros(2 * d)
            wide[::2] = torch.linspace(0.5, 1.5, d)
            norm.weight = torch.nn.Parameter(wide[::2])
        else:
            norm.weight = torch.nn.Parameter(torch.ones(d - 4))
    if change == "short":  # Python refuses it as torch's layer_norm does
        with pytest.raises(RuntimeError):
            _python_and_native_steps(model)
        return
    (native, python), ran = _python_and_native_steps(model)
    assert ran == [False, False]
    norm.weight = torch.nn.Parameter(norm.weight.detach().contiguous())
    (again, _), ran = _python_and_native_steps(model)
    assert ran == [True, False]
    torch.testing.assert_close(again, python, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_strided_bias_gives_f_linears_result_on_every_path():
    import torch.nn.functional as F

    from zoo.derived import fixed_weights

    layer = Linear(24, 40).eval()
    layer.bias = torch.nn.Parameter(torch.randn(80)[::2])
    for rows in (1, 20, 300):
        x = torch.randn(rows, 24)
        with torch.no_grad():
            expected = F.linear(x, layer.weight, layer.bias)
            torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)
            with fixed_weights(layer):
                torch.testing.assert_close(layer(x), expected, rtol=1e-5, atol=1e-5)


@needs_kernel
@pytest.mark.parametrize("variant,eos", [("opus-mt", 0), ("tc-big", 0), ("bart", 2),
                                         ("mbart", 2), ("m2m100", 2), ("t5", 1),
                                         ("flan-t5", 1)])
def test_imported_models_decode_through_the_native_step(variant, eos, tmp_path, monkeypatch):
    """Every imported seq2seq family runs in the C++ step: Marian's SiLU network (the
    step's activation code 3) and opus-mt-tc-big's ReLU, BART's post-norm with an
    embedding norm, mBART's and M2M100's pre-norm with final norms, T5's relative
    position bias inside self-attention with RMSNorm and ReLU (T5) or gated tanh GELU
    (Flan-T5). Each decodes with transformers' tokens."""
    import zoo
    from .formats import padded_batch, save_family

    monkeypatch.setattr(Linear, "native_rows", 64)
    hf, pad = save_family(variant, tmp_path / "m", generate=True)
    model = zoo.build(f"local-dir:{tmp_path / 'm'}").eval()
    ran = native_runs(StaticDecoder, monkeypatch)
    src, mask = padded_batch(pad)
    out = model.generate(src, num_beams=1)
    assert ran == [True]
    with torch.no_grad():
        ref = hf.generate(input_ids=src, attention_mask=mask, num_beams=1)[:, 1:]
    for ours, theirs in zip(out.tolist(), ref.tolist()):
        end = theirs.index(eos) + 1 if eos in theirs else len(theirs)
        assert ours[:end] == theirs[:end]


@needs_kernel
@pytest.mark.parametrize("native_step", [True, False], ids=["native", "python"])
def test_a_weight_changed_between_two_steps_is_followed(native_step, monkeypatch):
    """The static decoder's packed and joined copies (in C++ and in Python) follow a
    weight changed in place between two steps of one decoding, as the general path's
    cache does."""
    monkeypatch.setattr(Linear, "native_rows", 16)
    monkeypatch.setattr(StaticDecoder, "native_step", native_step)
    model = tiny()
    attn = model.decoder.layers[1].self_attn
    src = source()
    memory, mask = model.encode(src), model.padding_mask(src)
    steps = torch.randint(3, 16, (3, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        static = StaticDecoder(model, memory, mask, groups=1, length=6)
        assert (static.native is not None) == native_step
        cache = model.init_cache()
        for t in range(6):
            if t == 3:
                attn.q_proj.weight.mul_(3)
                attn.out_proj.weight.mul_(-2)
            a = static(steps[:, t:t + 1])
            b = model.decode(steps[:, t:t + 1], memory, mask, cache=cache)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_one_kept_plan_serves_calls_alive_at_once_and_follows_a_changed_setting(monkeypatch):
    """The decoder's plan is made once and each decoding call copies it with buffers of its
    own: two calls alive at once (steps taken in turn, one of them reordered) make one
    plan and each give the general path's logits; a setting changed before the next block
    (a norm's eps) makes it again, and a block with nothing changed makes none."""
    from zoo.derived import fixed_weights
    from zoo.plugins.architectures import static_decoder

    monkeypatch.setattr(Linear, "native_rows", 16)
    model = tiny()
    made = []
    seal = static_decoder.seal_kept
    monkeypatch.setattr(static_decoder, "seal_kept",
                        lambda *a, **kw: made.append(1) or seal(*a, **kw))
    src = source()
    memories = [(model.encode(s), model.padding_mask(s)) for s in (src, src.flip(0))]
    steps = torch.randint(3, 16, (6, 6), generator=torch.Generator().manual_seed(2))
    moved = torch.tensor([1, 0, 2, 3, 5, 4])  # two beams of each source, some swapped
    for eps, plans in ((None, 1), (0.5, 1), (None, 0)):
        if eps is not None:
            model.decoder.layers[1].norm2.eps = eps
        made.clear()
        with torch.no_grad(), fixed_weights(model):
            static = [StaticDecoder(model, m, k, groups=2, length=6) for m, k in memories]
            assert [d.native is not None for d in static] == [True, True]
            assert len(made) == plans
            caches = [model.init_cache() for _ in memories]
            for t in range(6):
                for i, ((memory, mask), decoder) in enumerate(zip(memories, static)):
                    a = decoder(steps[:, t:t + 1])
                    b = model.decode(steps[:, t:t + 1], memory.repeat_interleave(2, 0),
                                     mask.repeat_interleave(2, 0), cache=caches[i])
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
                    if t == 2 and i == 0:
                        decoder.reorder(moved)
                        caches[i].reorder(moved, within_groups=True)


def cpp_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, arguments, lines) of each function defined in C++ ``source``."""
    import re

    source = re.sub(r"__attribute__\(\(.*?\)\)", "", source)
    out = []
    for m in re.finditer(r"\n[ \t]*(?:inline |static )?[\w:<>,*& ]+?[\s*&](\w+)\(([^;{}()]*)\)"
                         r"\s*(?:const\s*)?\{", source):
        if m.group(1) in ("if", "for", "while", "switch", "return"):
            continue
        depth, i = 1, m.end()
        while depth and i < len(source):
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        args = m.group(2).strip()
        count = len(re.split(r",(?![^<]*>)", args)) if args else 0
        out.append((m.group(1), count, source[m.start():i].count("\n")))
    return out


def test_the_native_steps_cpp_is_short_functions_of_few_arguments():
    """The step's layers are named fields end to end: no function of its C++ takes more
    than 6 arguments or runs past 60 lines (a layer's sublayers each a short function)."""
    import zoo.plugins.architectures as architectures

    folder = Path(architectures.__file__).parent / "csrc"
    found = {path.name: cpp_functions(path.read_text()) for path in sorted(folder.iterdir())}
    assert "decoder_layer" in {name for name, _, _ in found["decoder_layers.cpp"]}
    long = [f"{file}: {name} ({count} arguments, {lines} lines)"
            for file, functions in found.items() for name, count, lines in functions
            if count > 6 or lines > 60]
    assert not long, long
    # the checker sees a function of 7 arguments
    assert cpp_functions("\nint f(int a, int b, int c, int d, int e, int g, int h) {\n}\n") == [
        ("f", 7, 2)]
