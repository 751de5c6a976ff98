"""A decoder-only model's steps after its prompts in zoo's native step (StaticLM): the
logits and tokens of the general path (LanguageModelCache through each attention), for
every kind of layer the built-in and imported language models have."""

from __future__ import annotations

import pytest
import torch

import zoo
from zoo.decoding.steps import PromptSteps
from zoo.ops import Linear
from zoo.plugins.architectures.static_lm import StaticLM, refusal
from zoo.quantization import Int4Linear, QuantizedLinear, quantize

from .test_native import needs_kernel

VARIANTS = [
    ("llama-tiny", {}),  # RoPE, grouped-query attention, RMSNorm, SwiGLU
    ("gpt2-tiny", {}),  # learned positions counted per row, LayerNorm, tanh GELU, biases
    ("gpt2-tiny", {"norm_placement": "post", "positional": "alibi", "ffn": "relu"}),
    ("llama-tiny", {"positional": {"name": "rope", "settings": {"layout": "interleaved"}},
                    "ffn": "geglu"}),
    # each head's queries and keys RMS-normed, their scales stored less one (Gemma 3's),
    # and a sliding window of 3 keys (the steps run past it)
    ("llama-tiny", {"attention.qk_norm": True, "attention.qk_norm_offset": 1.0,
                    "attention.window": 3}),
    # Gemma 2's layer: sandwich norms, scores soft-capped (at 0.5: every score bent)
    ("llama-tiny", {"block": "sandwich", "attention.softcap": 0.5}),
]


def _prompts(vocab: int):
    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(5, vocab, (3, 7), generator=g)
    mask = torch.zeros(3, 7, dtype=torch.bool)
    mask[1, :3] = mask[2, :5] = True  # left padding
    return prompts, mask


def _both_paths(model, beams=2, steps=6):
    """Logits of ``steps`` steps after the prompts through StaticLM and through the
    general path (a beam reorder after the third), and whether StaticLM ran."""
    prompts, mask = _prompts(model.settings.vocab_size)
    rows = prompts.shape[0] * beams
    new = torch.randint(5, model.settings.vocab_size, (rows, steps),
                        generator=torch.Generator().manual_seed(5))
    moved = torch.arange(rows).view(-1, beams).flip(-1).flatten()
    out, ran = [], []
    with torch.no_grad():
        for static in (True, False):
            model.static_decoding = static
            step = PromptSteps(model, prompts, mask, beams=beams, steps=steps + 1)
            tokens = prompts.repeat_interleave(beams, 0)
            logits = [step(tokens)]
            ran.append(step.static is not None)
            for t in range(steps):
                tokens = torch.cat([tokens, new[:, t:t + 1]], 1)
                logits.append(step(tokens))
                if t == 2:
                    step.reorder(moved)
                    tokens = tokens.index_select(0, moved)
            out.append(torch.stack(logits, 1))
    del model.static_decoding
    return out, ran


@needs_kernel
@pytest.mark.parametrize("recipe,overrides", VARIANTS,
                         ids=lambda v: v if isinstance(v, str) else ",".join(v) or "as is")
@pytest.mark.parametrize("dtype", ["fp32", "int8", "int4"])
def test_the_native_step_gives_the_general_paths_logits(recipe, overrides, dtype, monkeypatch):
    monkeypatch.setattr(Linear, "native_rows", 16)
    monkeypatch.setattr(QuantizedLinear, "native_rows", 16)
    torch.manual_seed(0)
    model = zoo.build(recipe, dropout=0.0, **overrides).eval()
    if dtype != "fp32":
        model = quantize(model, dtype)
        assert any(isinstance(m, Int4Linear) for m in model.modules()) == (dtype == "int4")
    assert refusal(model) is None
    (static, general), ran = _both_paths(model)
    assert ran == [True, False]
    torch.testing.assert_close(static, general, rtol=1e-5, atol=1e-5)
    assert torch.equal(static.argmax(-1), general.argmax(-1))


@needs_kernel
def test_rotations_are_made_once_a_module_for_several_steps_at_a_time(monkeypatch):
    """Layers whose rotations are alike share one module's matrices, made for
    ROTATION_STEPS steps in one call (here 4, so 10 steps cross two boundaries), and the
    steps still give the general path's logits."""
    from zoo.plugins.architectures import step_positions

    monkeypatch.setattr(Linear, "native_rows", 16)
    monkeypatch.setattr(step_positions, "ROTATION_STEPS", 4)
    made = []
    real = step_positions.rotation_matrices
    monkeypatch.setattr(step_positions, "rotation_matrices",
                        lambda m, pos, steps, width: made.append((pos, steps)) or
                        real(m, pos, steps, width))
    torch.manual_seed(0)
    model = zoo.build("llama-tiny", dropout=0.0).eval()  # two layers rotated alike
    (static, general), ran = _both_paths(model, steps=10)
    assert ran == [True, False]
    torch.testing.assert_close(static, general, rtol=1e-5, atol=1e-5)
    made = [call for call in made if call[1] != 1]  # (the plan's probes of each module)
    start = 7  # the prompts' width: the first step after them
    assert made == [(start, 4), (start + 4, 4), (start + 8, 4)]


@needs_kernel
def test_what_the_native_step_cannot_run_takes_the_general_path(monkeypatch):
    monkeypatch.setattr(Linear, "native_rows", 16)
    torch.manual_seed(0)
    model = zoo.build("llama-tiny").eval()
    model.layers[1].ffn.act = torch.nn.Tanh()  # no activation code of the step's
    assert refusal(model) is None
    (_, _), ran = _both_paths(model)
    assert ran == [False, False]
    monkeypatch.setattr(Linear, "native_rows", 2)  # six rows: more than the product takes
    (_, _), ran = _both_paths(zoo.build("llama-tiny").eval())
    assert ran == [False, False]


@needs_kernel
def test_a_step_past_the_buffers_is_refused():
    model = zoo.build("llama-tiny").eval()
    prompts, mask = _prompts(model.settings.vocab_size)
    with torch.no_grad():
        step = PromptSteps(model, prompts, mask, steps=2)
        step(prompts)
        assert isinstance(step.static, StaticLM)
        for t in (1, 2):
            step(torch.cat([prompts, prompts[:, :t]], 1))
        with pytest.raises(ValueError, match="hold 2 steps"):
            step(torch.cat([prompts, prompts[:, :3]], 1))


@needs_kernel
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_a_weight_changed_between_two_steps_is_followed(int8, monkeypatch):
    """The native step's packed and joined copies follow a weight changed in place
    between two steps of one decoding, as the general path does (they were kept
    stale: logits 2.85 from the general path's)."""
    monkeypatch.setattr(Linear, "native_rows", 16)
    monkeypatch.setattr(QuantizedLinear, "native_rows", 16)
    torch.manual_seed(0)
    model = zoo.build("llama-tiny", dropout=0.0).eval()
    if int8:
        model = quantize(model)
    attn = model.layers[1].attn
    changed = ((attn.q_proj.weight_scale, attn.out_proj.weight_scale) if int8
               else (attn.q_proj.weight, attn.out_proj.weight))
    prompts, mask = _prompts(model.settings.vocab_size)
    new = torch.randint(5, model.settings.vocab_size, (3, 5),
                        generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        paths = []
        for static in (True, False):
            model.static_decoding = static
            paths.append(PromptSteps(model, prompts, mask, steps=6))
            paths[-1](prompts)
        del model.static_decoding
        assert [p.static is not None for p in paths] == [True, False]
        tokens = prompts
        for t in range(5):
            tokens = torch.cat([tokens, new[:, t:t + 1]], 1)
            if t == 2:
                for weight in changed:
                    weight.mul_(3)
            static, general = (path(tokens) for path in paths)
            torch.testing.assert_close(static, general, rtol=1e-5, atol=1e-5)


class _Parallel(torch.nn.Module):
    """A plugin's parallel-residual layer (GPT-J, GPT-NeoX): x + attn(n1(x)) + ffn(n2(x)),
    which says so through data_flow()."""

    def __init__(self, settings=None, *, d_model, dropout, norm_first, make_attention,
                 make_norm, make_ffn):
        super().__init__()
        self.attn, self.ffn = make_attention(causal=True), make_ffn()
        self.ln1, self.ln2 = make_norm(), make_norm()

    def data_flow(self):
        return zoo.plugin_api.DataFlow(self.attn, self.ffn, (self.ln1, self.ln2), True,
                                       residual="parallel")

    def forward(self, x, key_padding_mask=None, cache=None):
        return x + self.attn(self.ln1(x), key_padding_mask=key_padding_mask, cache=cache) \
            + self.ffn(self.ln2(x))


class _Rewritten(_Parallel):
    """A subclass that changes forward and not its data flow: not trusted."""

    def forward(self, x, key_padding_mask=None, cache=None):
        return super().forward(x, key_padding_mask, cache) * 1.5


@needs_kernel
@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_a_plugins_parallel_block_runs_in_the_native_step(int8, fresh_registry, monkeypatch):
    # a block zoo does not ship reaches the native step through its data_flow(), with the
    # general path's logits (its own forward); a subclass that rewrites forward does not
    import zoo.plugin_api

    monkeypatch.setattr(Linear, "native_rows", 16)
    monkeypatch.setattr(QuantizedLinear, "native_rows", 16)
    caps = {"role": "causal", "norm_placements": ("pre",)}
    zoo.register_component("block", "parallel-test", _Parallel, capabilities=caps)
    zoo.register_component("block", "rewritten-test", _Rewritten, capabilities=caps)
    torch.manual_seed(0)
    overrides = {"positional": {"name": "rope", "settings": {"fraction": 0.5}}, "ffn": "gelu",
                 "norm": "layernorm"}
    model = zoo.build("llama-tiny", block="parallel-test", dropout=0.0, **overrides).eval()
    if int8:
        model = quantize(model)
    assert refusal(model) is None and model.native_plan()
    (static, general), ran = _both_paths(model)
    assert ran == [True, False]
    torch.testing.assert_close(static, general, rtol=1e-5, atol=1e-5)
    assert torch.equal(static.argmax(-1), general.argmax(-1))
    # a subclass that rewrites forward without its data flow keeps the general path
    rewritten = zoo.build("llama-tiny", block="rewritten-test", dropout=0.0, **overrides).eval()
    plan = rewritten.native_plan()
    assert not plan and "does not describe its data flow" in plan.reason


def test_without_the_library_the_gate_still_checks_the_layers(monkeypatch):
    """The layers are checked without the native library: a model whose layers the step
    cannot run says why, one whose layers qualify says that a build makes them run."""
    from zoo.plugins.architectures import native_plan

    monkeypatch.setattr(native_plan.STEP, "available", lambda: False)
    monkeypatch.setattr(native_plan, "_missing_library",
                        lambda: native_plan.Refusal("its library is not built here; its "
                                                    "layers qualify"))
    qualifies = zoo.build("llama-tiny").eval().native_plan()
    assert not qualifies and "its layers qualify" in qualifies.reason
    refused = zoo.build("llama-tiny", positional="shaw").eval().native_plan()
    assert not refused and "qualify" not in refused.reason, refused.reason


def test_a_plan_shows_its_size_not_its_weights():
    plan = zoo.build("llama-tiny").eval().native_plan()
    if not plan:
        pytest.skip(str(plan))
    assert repr(plan) == "<zoo's native plan: 2 layers, heads 4 of width 16 (2 for keys and values)>"
