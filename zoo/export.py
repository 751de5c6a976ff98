"""Export a zoo model to the engines users deploy on: CTranslate2 and ONNX Runtime, and
back to the transformers format.

- ``ctranslate2``: an encoder-decoder (``seq2seq``) model becomes a CTranslate2
  ``TransformerSpec`` written with CTranslate2's own Python API (``model.bin``,
  ``config.json`` and the vocabularies), optionally quantized by CTranslate2
  (``int8``, ...). Only what CTranslate2's Transformer can express is exported:
  softmax attention with the paper's scale, sinusoidal or learned positions,
  LayerNorm or RMSNorm, ReLU, GELU or SwiGLU feed-forward, pre- or post-norm. Any
  other component is refused by name before anything is written. A ``decoder``
  (language) model becomes a model for CTranslate2's ``Generator``: its transformers
  export (below: GPT-2, Llama, Qwen2 or Mistral), converted by CTranslate2's own
  converter with the model's vocabulary and start and end tokens.
- ``onnx``: a ViT becomes ``model.onnx`` (images to logits); a seq2seq model
  ``encoder.onnx`` (source ids to memory) and ``decoder.onnx`` (target ids, memory,
  source ids to logits over the whole target, no cache); a decoder model
  ``model.onnx`` (tokens and their padding mask to the logits of every next token, no
  cache), through ``torch.onnx.export`` with the batch and lengths dynamic. ONNX
  Runtime runs them.
- ``transformers``: a ``seq2seq`` or ``decoder`` model a transformers family
  expresses (through a ``format`` plugin with ``exports``: Marian, the paper's base
  Transformer among them; GPT-2; Llama, Qwen2, Mistral) becomes a folder
  ``from_pretrained`` loads with the same logits:
  ``config.json``, ``generation_config.json``, ``model.safetensors`` and, for a model
  imported from such a folder, its tokenizer's files. Anything else is refused by name.

Each format writes ``zoo-export.json`` beside its files: the format, the recipe, and
how to call what was written. The folder is written beside its destination and
moved into place, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from .artifact import tensor_bytes, weights_to_save
from .errors import ZooError
from .files import describe_os_error, folder_beside, is_write_failure
from .kinds import kind_of
from .ops import plain_linears
from .quantization import is_quantized

FORMATS = ("ctranslate2", "onnx", "transformers")
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
"""The names of ids 0-3 (zoo's tasks: padding, start, end, unknown) in a default
vocabulary."""


class ExportError(ZooError, ValueError):
    """A model an engine cannot express, or an export that cannot be written."""


# -- CTranslate2 --------------------------------------------------------------------------------
CT2_COMPONENTS = {
    "attention": ("vanilla",),
    "cross_attention": ("vanilla",),
    "positional": ("sinusoidal", "learned"),
    "norm": ("layernorm", "rmsnorm"),
    "ffn": ("relu", "gelu", "silu", "swiglu"),
    "encoder_block": ("encoder",),
    "decoder_block": ("decoder",),
}
"""For each slot of ``seq2seq``, the components CTranslate2's Transformer expresses
(the attention kernel is not part of the model: any is fine)."""


def default_vocabulary(size: int) -> list[str]:
    """Token names for a model without a tokenizer: ``<pad> <s> </s> <unk>`` for ids 0-3,
    then the id itself (``"4"``, ``"5"``, ...)."""
    return [SPECIALS[i] if i < len(SPECIALS) else str(i) for i in range(size)]


def ctranslate2_problems(model: nn.Module) -> list[str]:
    """Why CTranslate2 cannot run ``model``, one line per reason (empty: it can)."""
    recipe = getattr(model, "recipe", None)
    if recipe is None:
        return ["the model has no recipe (build it with zoo.build)"]
    if recipe.architecture.name != "seq2seq":
        return [f"architecture {recipe.architecture.name!r}: CTranslate2's Transformer is the "
                "encoder-decoder 'seq2seq' (a ViT exports with --format onnx)"]
    problems = []
    for slot, allowed in CT2_COMPONENTS.items():
        ref = recipe.components.get(slot)
        if ref is not None and ref.name not in allowed:
            problems.append(f"{slot} {ref.name!r}: CTranslate2 has no such component (it "
                            f"expresses {slot} {', '.join(repr(a) for a in allowed)})")
    for slot in ("attention", "cross_attention"):
        ref = recipe.components.get(slot)
        if ref is not None and ref.name == "vanilla" and ref.settings.get("scale") is not None:
            problems.append(f"{slot} scale {ref.settings['scale']}: CTranslate2 scales q·k by "
                            "1/sqrt(d_k) only")
    s = recipe.architecture.settings
    pre = s.get("norm_placement", "post") == "pre"
    final = s.get("final_norm")
    if final is True and not pre:
        problems.append("final_norm with post-norm: CTranslate2 puts a final norm after a "
                        "pre-norm stack only")
    for setting, why in (("head_dim", "heads of d_model / n_heads"),
                         ("scale_output", "no rescaled output"),
                         ("separate_positions", "one position table for both stacks"),
                         ("embedding_norm", "no norm on the embeddings in zoo's export")):
        if s.get(setting):
            problems.append(f"{setting} {s[setting]!r}: CTranslate2's Transformer as zoo "
                            f"writes it has {why}")
    return problems


def _refuse_quantized(model: nn.Module) -> None:
    if is_quantized(model):
        raise ExportError("export the fp32 model: CTranslate2 quantizes it itself "
                          "(quantization='int8'), from the full-precision weights")


def _ct2_linear(spec, *layers: nn.Module) -> None:
    """Set a CTranslate2 LinearSpec from one layer, or from several fused along the
    output dimension (the self-attention's q and kv projections)."""
    spec.weight = torch.cat([m.weight.detach().float() for m in layers], 0).contiguous()
    if all(m.bias is not None for m in layers):
        spec.bias = torch.cat([m.bias.detach().float() for m in layers], 0).contiguous()


def _ct2_norm(spec, norm: nn.Module) -> None:
    spec.gamma = norm.weight.detach().float().clone()
    if getattr(norm, "bias", None) is not None and hasattr(spec, "beta"):
        spec.beta = norm.bias.detach().float().clone()


def _ct2_ffn(spec, ffn: nn.Module, glu: bool) -> None:
    if glu:
        _ct2_linear(spec.linear_0, ffn.fc1_g)
        _ct2_linear(spec.linear_0_noact, ffn.fc1_x)
    else:
        _ct2_linear(spec.linear_0, ffn.fc1)
    _ct2_linear(spec.linear_1, ffn.fc2)


def _ct2_positions(model: nn.Module) -> torch.Tensor:
    """The table CTranslate2 adds to the scaled embeddings (zoo's own values, whatever
    their layout: sinusoidal's sin/cos interleaving or a learned matrix)."""
    pos = model.positional
    table = pos.table if hasattr(pos, "table") else pos.weight
    return table.detach().float().clone()


def ctranslate2_spec(model: nn.Module, *, vocabulary: Sequence[str] | None = None,
                     source_vocabulary: Sequence[str] | None = None, bos_id: int = 1,
                     eos_id: int = 2, unk_id: int = 3):
    """The CTranslate2 ``TransformerSpec`` of a ``seq2seq`` model, weights set, not yet
    saved. ``vocabulary`` names each target id (default :func:`default_vocabulary`);
    ``source_vocabulary`` the source ids when the model does not share them."""
    import ctranslate2.specs as specs

    problems = ctranslate2_problems(model)
    if problems:
        raise ExportError("this model cannot be exported to CTranslate2:\n  - "
                          + "\n  - ".join(problems))
    _refuse_quantized(model)
    recipe = model.recipe
    s = model.settings
    ffn, norm = recipe.components["ffn"], recipe.components["norm"]
    glu = ffn.name == "swiglu"
    activation = {"relu": specs.Activation.RELU, "swiglu": specs.Activation.SWISH,
                  "silu": specs.Activation.SWISH,
                  "gelu": (specs.Activation.GELUTanh if ffn.settings.get("approximate") == "tanh"
                           else specs.Activation.GELU)}[ffn.name]
    pre = s.norm_placement == "pre"
    final = pre if s.final_norm is None else s.final_norm
    spec = specs.TransformerSpec.from_config(
        (len(model.encoder.layers), len(model.decoder.layers)), s.n_heads, pre_norm=pre,
        no_final_norm=pre and not final, activation=activation, ffn_glu=glu,
        rms_norm=norm.name == "rmsnorm")
    spec.config.layer_norm_epsilon = float(model.encoder.layers[0].norm1.eps) \
        if model.encoder.layers else float(model.decoder.layers[0].norm1.eps)
    table = _ct2_positions(model)
    for side, stack, embed in ((spec.encoder, model.encoder, model.src_embed),
                               (spec.decoder, model.decoder, model.tgt_embed)):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = embed.weight.detach().float().clone()
        side.scale_embeddings = float(model.embed_scale)
        side.position_encodings.encodings = table
        if stack.norm is not None:
            _ct2_norm(side.layer_norm, stack.norm)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder.layers):
        _ct2_linear(layer_spec.self_attention.linear[0], layer.attn.q_proj, layer.attn.kv_proj)
        _ct2_linear(layer_spec.self_attention.linear[1], layer.attn.out_proj)
        _ct2_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _ct2_ffn(layer_spec.ffn, layer.ffn, glu)
        _ct2_norm(layer_spec.ffn.layer_norm, layer.norm2)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder.layers):
        _ct2_linear(layer_spec.self_attention.linear[0], layer.self_attn.q_proj,
                    layer.self_attn.kv_proj)
        _ct2_linear(layer_spec.self_attention.linear[1], layer.self_attn.out_proj)
        _ct2_norm(layer_spec.self_attention.layer_norm, layer.norm1)
        _ct2_linear(layer_spec.attention.linear[0], layer.cross_attn.q_proj)
        _ct2_linear(layer_spec.attention.linear[1], layer.cross_attn.kv_proj)
        _ct2_linear(layer_spec.attention.linear[2], layer.cross_attn.out_proj)
        _ct2_norm(layer_spec.attention.layer_norm, layer.norm2)
        _ct2_ffn(layer_spec.ffn, layer.ffn, glu)
        _ct2_norm(layer_spec.ffn.layer_norm, layer.norm3)
    _ct2_linear(spec.decoder.projection, model.lm_head)

    target = list(vocabulary) if vocabulary is not None else default_vocabulary(s.vocab_size)
    source = list(source_vocabulary) if source_vocabulary is not None else (
        target if model.src_embed is model.tgt_embed
        else default_vocabulary(model.src_embed.num_embeddings))
    for name, tokens, size in (("vocabulary", target, s.vocab_size),
                               ("source vocabulary", source, model.src_embed.num_embeddings)):
        _checked_vocabulary(tokens, size, name)
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.bos_token = target[bos_id]
    spec.config.eos_token = target[eos_id]
    spec.config.unk_token = target[unk_id]
    spec.config.decoder_start_token = target[bos_id]
    return spec


def to_ctranslate2(model: nn.Module, folder: str | os.PathLike[str], *,
                   quantization: str | None = None, vocabulary: Sequence[str] | None = None,
                   source_vocabulary: Sequence[str] | None = None, bos_id: int | None = None,
                   eos_id: int | None = None, unk_id: int = 3, force: bool = False) -> Path:
    """Write ``model`` as a CTranslate2 model in ``folder`` (``ctranslate2.Translator``
    loads it); ``quantization`` is CTranslate2's (``int8``, ``int8_float32``, ...) or None
    for fp32. The start and end tokens are the model's own (``model.generation``: an
    imported model's, a run's task's) unless ``bos_id`` and ``eos_id`` say. Returns the
    folder."""
    try:
        import ctranslate2  # noqa: F401
    except ImportError as exc:
        raise ExportError(f"--format ctranslate2 needs the ctranslate2 package ({exc}); "
                          "pip install 'zoo-transformers[export]'") from None
    if kind_of(model) in ("language-model", "encoder"):
        return _through_transformers_to_ctranslate2(
            model, folder, quantization=quantization, vocabulary=vocabulary, bos_id=bos_id,
            eos_id=eos_id, unk_id=unk_id, force=force)
    imported = getattr(model, "imported", None)
    if imported is not None and imported.generation is not None and vocabulary is None:
        # a model from the Hub: its own tokenizer names the ids
        tokenizer = imported.tokenizer()
        vocabulary = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
        unk_id = tokenizer.unk_token_id
    bos_id, eos_id = _start_and_end(model, bos_id, eos_id)
    spec = ctranslate2_spec(model, vocabulary=vocabulary, source_vocabulary=source_vocabulary,
                            bos_id=bos_id, eos_id=eos_id, unk_id=unk_id)
    spec.validate()
    spec.optimize(quantization=quantization)
    with _written(folder, force, model) as tmp:
        spec.save(str(tmp))
        _describe(tmp, model, "ctranslate2", {
            "quantization": quantization or "float32",
            "load": "ctranslate2.Translator(FOLDER).translate_batch([[token, ...], ...])",
            "tokens": {"bos": spec.config.bos_token, "eos": spec.config.eos_token,
                       "unk": spec.config.unk_token}})
    return Path(folder)


def _checked_vocabulary(tokens: Sequence[str], size: int, name: str = "vocabulary") -> None:
    if len(tokens) != size:
        raise ExportError(f"the {name} has {len(tokens)} tokens; the model has {size} "
                          "ids: give one name per id, in id order")
    if len(set(tokens)) != len(tokens):
        raise ExportError(f"the {name} names a token twice; CTranslate2 needs each token once")


def _tokenizer_vocabulary(model: nn.Module, size: int) -> list[str] | None:
    """An imported model's token names in id order (ids its tokenizer lacks named as
    CTranslate2's own converter names them, ``<extra_id_N>``), or None when the model was
    not imported or its folder has no tokenizer."""
    imported = getattr(model, "imported", None)
    if imported is None:
        return None
    try:
        tokenizer = imported.tokenizer()
    except ZooError:
        return None
    named = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, i in named if i < size]
    return tokens + [f"<extra_id_{i}>" for i in range(size - len(tokens))]


class _TokenNames:
    """What CTranslate2's converter reads of a tokenizer: the names of the ids in order
    and of the start, end and unknown tokens."""

    def __init__(self, tokens: list[str], bos: str, eos: str, unk: str) -> None:
        self.tokens, self.bos_token, self.eos_token, self.unk_token = tokens, bos, eos, unk

    def get_vocab(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tokens)}


def _through_transformers_to_ctranslate2(
        model: nn.Module, folder: str | os.PathLike[str], *, quantization: str | None,
        vocabulary: Sequence[str] | None, bos_id: int | None, eos_id: int | None,
        unk_id: int | None, force: bool) -> Path:
    """A decoder model for ``ctranslate2.Generator`` (an encoder for ``ctranslate2.Encoder``):
    its transformers export converted by CTranslate2's ``TransformersConverter``, which names the ids by ``vocabulary`` (else
    the imported model's tokenizer, else :func:`default_vocabulary`)."""
    import tempfile

    try:  # (ctranslate2 itself is there: to_ctranslate2 asked)
        import transformers  # noqa: F401
        from ctranslate2.converters import TransformersConverter
    except ImportError as exc:
        raise ExportError(f"--format ctranslate2 of a language model converts its "
                          f"transformers export, and needs transformers ({exc}); pip install "
                          "'zoo-transformers[hub-formats]'") from None
    _refuse_quantized(model)
    positional = model.recipe.components.get("positional")
    if positional is not None and positional.settings.get("scaling") == "llama3":
        # measured: CTranslate2 4.8's converter leaves Llama 3's scaling out, and its
        # model scores a text as the unscaled RoPE does
        raise ExportError("positional rope scaling 'llama3': CTranslate2's converter does not "
                          "carry Llama 3's frequency scaling (its model would compute RoPE "
                          "unscaled); export with --format onnx or transformers")
    size = model.settings.vocab_size
    tokens = list(vocabulary) if vocabulary is not None else (
        _tokenizer_vocabulary(model, size) or default_vocabulary(size))
    _checked_vocabulary(tokens, size)
    start, end = _start_and_end(model, bos_id, eos_id)
    encoder = kind_of(model) == "encoder"
    imported = getattr(model, "imported", None)
    if encoder and imported is not None and vocabulary is None:
        unk_id = getattr(imported.tokenizer(), "unk_token_id", unk_id)  # BERT's [UNK]: 100
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < size else ""
    names = _TokenNames(tokens, tokens[start], tokens[end], unk)
    engine = "Encoder" if encoder else "Generator"

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return names

    with tempfile.TemporaryDirectory(prefix="zoo-ct2-") as work:
        try:
            to_transformers(model, Path(work) / "transformers", bos_id=start, eos_id=end)
        except ExportError as exc:
            raise ExportError(f"CTranslate2's {engine} runs the models of transformers' "
                              f"families, and {exc}") from None
        with _written(folder, force, model) as tmp:
            Converter(str(Path(work) / "transformers")).convert(
                str(tmp), quantization=quantization, force=True)
            _describe(tmp, model, "ctranslate2", {
                "quantization": quantization or "float32",
                "load": "ctranslate2.Encoder(FOLDER).forward_batch([[token, ...], ...])"
                if encoder else
                "ctranslate2.Generator(FOLDER).generate_batch([[token, ...], ...])",
                "tokens": {"bos": names.bos_token, "eos": names.eos_token,
                           "unk": names.unk_token}})
    return Path(folder)


# -- ONNX ---------------------------------------------------------------------------------------
class _Encoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        return self.model.encode(src)


class _Decoder(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return self.model.decode(tgt, memory, self.model.padding_mask(src))


class _TextEncoder(nn.Module):
    """An encoder-only model's forward with every input given (token types all 0 where the
    model has none)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor,
                token_types: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, padding_mask=padding_mask, token_types=token_types)


class _LanguageModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        return self.model(tokens, padding_mask=padding_mask)


def _onnx_export(module: nn.Module, args: tuple, path: Path, names: list[str],
                 output: str, dynamic: dict[str, dict[int, str]], opset: int) -> None:
    from torch.export import Dim

    dims: dict[str, Any] = {}
    shapes = {}
    for name, axes in dynamic.items():
        shapes[name] = {axis: dims.setdefault(label, Dim(label, min=1, max=4096))
                        for axis, label in axes.items()}
    with plain_linears(), torch.no_grad(), warnings.catch_warnings():
        # the exporter's note that two inputs share an axis name is what was asked for
        warnings.filterwarnings("ignore", message=r"# The axis name")
        torch.onnx.export(module, args, str(path), input_names=names, output_names=[output],
                          dynamic_shapes=shapes, opset_version=opset, dynamo=True,
                          external_data=False, verbose=False)


def to_onnx(model: nn.Module, folder: str | os.PathLike[str], *, opset: int = 18,
            force: bool = False) -> Path:
    """Write ``model`` as ONNX in ``folder``: ``model.onnx`` for a ViT (``pixel_values`` to
    ``logits``), for a decoder model (``tokens`` and ``padding_mask``, True at the
    padding, to ``logits``) and for an encoder (``tokens``, ``padding_mask`` and
    ``token_types`` to its head's output: ``hidden_states`` or ``logits``), ``encoder.onnx`` and ``decoder.onnx`` for a seq2seq model
    (``src`` to ``memory``; ``tgt``, ``memory``, ``src`` to ``logits``). Returns the
    folder."""
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise ExportError(f"--format onnx needs the onnx and onnxscript packages ({exc}); "
                          "pip install 'zoo-transformers[export]'") from None
    recipe = getattr(model, "recipe", None)
    arch = recipe.architecture.name if recipe is not None else None
    if arch not in ("vit", "seq2seq", "decoder", "encoder"):
        raise ExportError(f"--format onnx exports 'vit', 'seq2seq', 'decoder' and 'encoder' "
                          f"models; this one is {arch!r}")
    if is_quantized(model):
        raise ExportError("export the fp32 model: ONNX Runtime quantizes an ONNX graph "
                          "itself (onnxruntime.quantization.quantize_dynamic)")
    model = model.eval()
    device = next(model.parameters()).device
    with _written(folder, force, model) as tmp:
        if arch == "vit":
            s = recipe.architecture.settings
            x = torch.randn(2, s.get("in_chans", 3), s["image_size"], s["image_size"],
                            device=device)
            _onnx_export(model, (x,), tmp / "model.onnx", ["pixel_values"], "logits",
                         {"images": {0: "batch"}}, opset)
            calls = {"model.onnx": "pixel_values (B, C, H, W) float32 -> logits (B, classes)"}
        elif arch == "decoder":
            tokens = torch.randint(0, model.settings.vocab_size, (2, 7), device=device)
            padding = torch.zeros_like(tokens, dtype=torch.bool)
            padding[1, :3] = True  # left padding, as prompts are padded
            _onnx_export(_LanguageModel(model).eval(), (tokens, padding), tmp / "model.onnx",
                         ["tokens", "padding_mask"], "logits",
                         {"tokens": {0: "batch", 1: "length"},
                          "padding_mask": {0: "batch", 1: "length"}}, opset)
            calls = {"model.onnx": "tokens (B, L) int64, padding_mask (B, L) bool (True at "
                                   "the left padding) -> logits (B, L, vocab); no cache: "
                                   "feed the whole text"}
        elif arch == "encoder":
            tokens = torch.randint(4, model.settings.vocab_size, (2, 7), device=device)
            padding = torch.zeros_like(tokens, dtype=torch.bool)
            padding[1, 4:] = True
            output = "hidden_states" if model.settings.head == "hidden" else "logits"
            axes = {0: "batch", 1: "length"}
            _onnx_export(_TextEncoder(model).eval(), (tokens, padding, torch.zeros_like(tokens)),
                         tmp / "model.onnx", ["tokens", "padding_mask", "token_types"], output,
                         {"tokens": axes, "padding_mask": axes, "token_types": axes}, opset)
            calls = {"model.onnx": f"tokens (B, L) int64, padding_mask (B, L) bool (True at "
                                   f"padding), token_types (B, L) int64 -> {output}"}
        else:
            vocab = model.settings.vocab_size
            src = torch.randint(4, vocab, (2, 7), device=device)
            tgt = torch.randint(4, vocab, (2, 5), device=device)
            memory = model.encode(src)
            _onnx_export(_Encoder(model).eval(), (src,), tmp / "encoder.onnx", ["src"], "memory",
                         {"src": {0: "batch", 1: "src_len"}}, opset)
            _onnx_export(_Decoder(model).eval(), (tgt, memory, src), tmp / "decoder.onnx",
                         ["tgt", "memory", "src"], "logits",
                         {"tgt": {0: "batch", 1: "tgt_len"},
                          "memory": {0: "batch", 1: "src_len"},
                          "src": {0: "batch", 1: "src_len"}}, opset)
            calls = {"encoder.onnx": "src (B, Ls) int64 -> memory (B, Ls, d)",
                     "decoder.onnx": "tgt (B, Lt) int64, memory (B, Ls, d), src (B, Ls) int64 "
                                     "-> logits (B, Lt, vocab); no cache: feed the whole prefix"}
        _describe(tmp, model, "onnx", {"opset": opset, "files": calls,
                                       "load": "onnxruntime.InferenceSession(FILE)"})
    return Path(folder)


# -- transformers ------------------------------------------------------------------------------
def _start_and_end(model: nn.Module, bos_id: int | None, eos_id: int | None) -> tuple[int, int]:
    """The decoder's start and end tokens: as given, else the model's own
    (``model.generation``), else zoo's tasks' (1 and 2)."""
    g = getattr(model, "generation", None)
    if bos_id is None:
        bos_id = g.start_id if g is not None else 1
    if eos_id is None:
        eos_id = g.eos_ids[0] if g is not None else 2
    return bos_id, eos_id


def _tokenizer_file(name: str) -> bool:
    """A transformers tokenizer's file: SentencePiece models (``source.spm``,
    ``spiece.model``), BPE merges, and the JSON files of the tokenizer and its vocabulary
    (``tokenizer.json``, ``tokenizer_config.json``, ``vocab.json``, ...)."""
    suffix = Path(name).suffix
    return suffix in (".spm", ".model", ".txt") or (
        suffix == ".json" and ("token" in name or "vocab" in name))


def to_transformers(model: nn.Module, folder: str | os.PathLike[str], *,
                    bos_id: int | None = None, eos_id: int | None = None,
                    tokenizer: str | os.PathLike[str] | None = None,
                    force: bool = False) -> Path:
    """Write ``model`` as a transformers folder through the first ``format`` plugin that
    exports and can express it (an imported model's own format first), with the model's
    own generation settings (``model.generation``; ``bos_id`` and ``eos_id`` replace its
    start and end tokens) and its tokenizer's files: an imported model's, or those in
    the folder ``tokenizer`` (a run fine-tuned from an imported model keeps them)."""
    from safetensors.torch import save_file

    from .registry import registry

    if is_quantized(model):
        raise ExportError("export the fp32 model: a transformers folder holds full weights")
    imported = getattr(model, "imported", None)
    own = getattr(model, "generation", None)
    encoder = kind_of(model) == "encoder"
    if own is None and not encoder:
        raise ExportError(f"--format transformers writes models that generate text (zoo's "
                          f"seq2seq as Marian) and encoders (BERT); this "
                          f"{type(model).__name__} has no generation settings. Export it with "
                          "--format onnx.")
    generation = None
    if own is not None:
        start, end = _start_and_end(model, bos_id, eos_id)
        generation = own.model_dump(mode="json")
        generation.update(start_id=start, eos_ids=[end] + [
            i for i in generation.get("eos_ids", ()) if i != end])
    writers = sorted((c for c in registry.list("format") if c.capabilities.exports),
                     key=lambda c: c.name != getattr(imported, "format", None))
    recipe = model.recipe.to_dict()
    # each tied matrix once, as the format contract says (save_file refuses shared ones)
    state = {k: v.float() for k, v in weights_to_save(model).items()}
    refusals = []
    for component in writers:
        try:
            config, settings, weights = component.load()(None).export(recipe, state,
                                                                      generation)
            break
        except ZooError as exc:
            refusals.append(f"{component.name}: {exc}")
        except (TypeError, KeyError, AttributeError) as exc:  # a family for other models
            refusals.append(f"{component.name}: cannot write this model ({exc!r})")
    else:
        raise ExportError("no transformers family expresses this model:\n"
                          + ("\n".join(refusals) or "no format plugin exports"))
    with _written(folder, force, model) as tmp:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        if settings is not None:  # (an encoder generates nothing)
            (tmp / "generation_config.json").write_text(json.dumps(settings, indent=2) + "\n")
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        source = imported.folder if imported is not None else tokenizer
        if source is not None:
            for path in Path(source).iterdir():
                if path.is_file() and _tokenizer_file(path.name):
                    (tmp / path.name).write_bytes(path.read_bytes())
        auto = ("AutoModelForCausalLM" if kind_of(model) == "language-model"
                else "AutoModel" if encoder else "AutoModelForSeq2SeqLM")
        _describe(tmp, model, "transformers", {"family": component.name,
                                               "load": f"{auto}.from_pretrained"})
    return Path(folder)


# -- both ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def _written(folder: str | os.PathLike[str], force: bool, model: nn.Module | None = None):
    """A temporary folder beside ``folder`` that takes its place when the block succeeds
    (:func:`zoo.files.folder_beside`); an existing non-empty folder only with ``force``.
    A write the file system refuses (a full disk, in whatever words the writer uses) is
    one ExportError naming the disk, the space free and about the space needed (the
    model's weights)."""
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not force:
        raise ExportError(f"{folder} exists and is not empty; choose another folder or "
                          "pass force=True (zoo export --force) to replace it")
    try:
        with folder_beside(folder) as tmp:
            yield tmp
    except Exception as exc:
        if not is_write_failure(exc):
            raise
        need = None if model is None else tensor_bytes(model.state_dict().values())
        kept = " What was there before is kept." if folder.exists() else ""
        raise ExportError(f"Could not export to {folder}: "
                          f"{describe_os_error(exc, folder, need)}.{kept}") from None


def _describe(folder: Path, model: nn.Module, fmt: str, extra: dict) -> None:
    from .version import __version__

    recipe = getattr(model, "recipe", None)
    info = {"format": fmt, "zoo": __version__,
            "recipe": recipe.model_dump(mode="json") if recipe is not None else None, **extra}
    (folder / "zoo-export.json").write_text(json.dumps(info, indent=2) + "\n")


def export(model: nn.Module, folder: str | os.PathLike[str], format: str, **kwargs) -> Path:
    """Export ``model`` to ``folder`` in ``format`` (``ctranslate2``, ``onnx`` or
    ``transformers``); keyword arguments go to :func:`to_ctranslate2`, :func:`to_onnx` or
    :func:`to_transformers`."""
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; zoo exports to "
                          f"{', '.join(FORMATS)}")
    writer = {"ctranslate2": to_ctranslate2, "onnx": to_onnx,
              "transformers": to_transformers}[format]
    return writer(model, folder, **kwargs)
