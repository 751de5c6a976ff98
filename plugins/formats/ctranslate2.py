"""The CTranslate2 export target (``zoo export --format ctranslate2``): a member of the
``format`` family that writes and reads nothing else.

An encoder-decoder (kind ``seq2seq``) becomes a CTranslate2 ``TransformerSpec`` written
with CTranslate2's own Python API (``model.bin``, ``config.json`` and the vocabularies),
optionally quantized by CTranslate2 (``int8``, ...). Only what CTranslate2's Transformer
expresses is exported: softmax attention with the paper's scale, sinusoidal or learned
positions, LayerNorm or RMSNorm, ReLU, GELU or SwiGLU feed-forward, pre- or post-norm;
any other component is refused by name before anything is written. A language model
(for CTranslate2's ``Generator``) or an encoder (its ``Encoder``) is its transformers
export (GPT-2, Llama, Qwen2 and 3, Mistral, Phi-3, Gemma 1 to 3; BERT, DistilBERT,
RoBERTa, XLM-RoBERTa) converted by CTranslate2's own converter, with the model's
vocabulary and start and end tokens (Klein et al. 2020, "Efficient and High-Quality
Neural Machine Translation with OpenNMT"); a family it has no conversion for (MPNet,
ModernBERT, DeBERTa) is refused by name.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.plugin_api import (ExportError, Format, Kind, ZooError, default_vocabulary,
                            is_quantized, kind_of, record_of, refuse_options,
                            start_and_end)

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


def ctranslate2_problems(model: nn.Module) -> list[str]:
    """Why CTranslate2 cannot run ``model``, one line per reason (empty: it can)."""
    recipe = record_of(model).recipe
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
        if ref is not None and ref.settings.get("qk_norm"):
            problems.append(f"{slot} qk_norm: zoo writes CTranslate2's Transformer without "
                            "norms of the queries and keys")
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


class CTranslate2Writer(Format):
    """Writes a zoo model for CTranslate2 (``ctranslate2.Translator``, ``Generator`` or
    ``Encoder`` loads the folder)."""

    family = "ctranslate2"
    generates = False

    def write(self, model: nn.Module, folder: Path, *, export: Callable[..., Path],
              vocabulary: Sequence[str] | None = None, tokenizer: Any = None,
              bos_id: int | None = None, eos_id: int | None = None,
              quantization: str | None = None, source_vocabulary: Sequence[str] | None = None,
              unk_id: int = 3, **options: Any) -> dict[str, Any]:
        """``quantization`` is CTranslate2's (``int8``, ``int8_float32``, ...; None:
        fp32); the start and end tokens are the model's own (``model.generation``) unless
        ``bos_id`` and ``eos_id`` say; ``vocabulary`` names the ids (else an imported
        model's tokenizer, else :func:`~zoo.plugin_api.default_vocabulary`)."""
        refuse_options(options, "--format ctranslate2")
        try:
            import ctranslate2  # noqa: F401
        except ImportError as exc:
            raise ExportError(f"--format ctranslate2 needs the ctranslate2 package ({exc}); "
                              "pip install 'zoo-transformers[export]'") from None
        _refuse_quantized(model)
        if kind_of(model) in (Kind.LANGUAGE_MODEL, Kind.ENCODER):
            return _converted(model, folder, export, quantization=quantization,
                              vocabulary=vocabulary, bos_id=bos_id, eos_id=eos_id,
                              unk_id=unk_id)
        imported = model.imported
        if imported is not None and imported.generation is not None and vocabulary is None:
            # a model from the Hub: its own tokenizer names the ids
            named = imported.tokenizer()
            vocabulary = [t for t, _ in sorted(named.get_vocab().items(), key=lambda kv: kv[1])]
            unk_id = named.unk_token_id
        bos_id, eos_id = start_and_end(model, bos_id, eos_id)
        spec = ctranslate2_spec(model, vocabulary=vocabulary,
                                source_vocabulary=source_vocabulary, bos_id=bos_id,
                                eos_id=eos_id, unk_id=unk_id)
        spec.validate()
        spec.optimize(quantization=quantization)
        spec.save(str(folder))
        return {"quantization": quantization or "float32",
                "load": "ctranslate2.Translator(FOLDER).translate_batch([[token, ...], ...])",
                "tokens": {"bos": spec.config.bos_token, "eos": spec.config.eos_token,
                           "unk": spec.config.unk_token}}


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
    imported = model.imported
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


def _converted(model: nn.Module, folder: Path, export: Callable[..., Path], *,
               quantization: str | None, vocabulary: Sequence[str] | None,
               bos_id: int | None, eos_id: int | None, unk_id: int | None) -> dict[str, Any]:
    """A language model for ``ctranslate2.Generator`` (an encoder for
    ``ctranslate2.Encoder``): its transformers export converted by CTranslate2's
    ``TransformersConverter``, which names the ids by ``vocabulary`` (else the imported
    model's tokenizer, else :func:`~zoo.plugin_api.default_vocabulary`)."""
    try:  # (ctranslate2 itself is there: write() asked)
        import transformers  # noqa: F401
        from ctranslate2.converters import TransformersConverter
    except ImportError as exc:
        raise ExportError(f"--format ctranslate2 of a language model converts its "
                          f"transformers export, and needs transformers ({exc}); pip install "
                          "'zoo-transformers[hub-formats]'") from None
    positional = model.recipe.components.get("positional")
    if positional is not None and positional.settings.get("scaling") == "llama3":
        # measured: CTranslate2 4.8's converter leaves Llama 3's scaling out, and its
        # model scores a text as the unscaled RoPE does
        raise ExportError("positional rope scaling 'llama3': CTranslate2's converter does not "
                          "carry Llama 3's frequency scaling (its model would compute RoPE "
                          "unscaled); export with --format onnx or transformers")
    if positional is not None and positional.settings.get("fraction", 1.0) < 1:
        # CTranslate2's Phi-3 loader rotates every feature of a head (its rotary_dim 0)
        raise ExportError(f"positional rope fraction {positional.settings['fraction']}: "
                          "CTranslate2's converter rotates every feature of a Phi-3 head; "
                          "export with --format onnx or transformers")
    size = model.settings.vocab_size
    named = None if vocabulary is not None else _tokenizer_vocabulary(model, size)
    tokens = list(vocabulary) if vocabulary is not None else (named or default_vocabulary(size))
    _checked_vocabulary(tokens, size)
    start, end = start_and_end(model, bos_id, eos_id)
    encoder = kind_of(model) is Kind.ENCODER
    if encoder and named is not None:  # the folder's tokenizer names the ids
        unk_id = getattr(model.imported.tokenizer(), "unk_token_id", unk_id)  # BERT's: 100
    unk = tokens[unk_id] if unk_id is not None and 0 <= unk_id < size else ""
    names = _TokenNames(tokens, tokens[start], tokens[end], unk)
    engine = "Encoder" if encoder else "Generator"

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return names

    with tempfile.TemporaryDirectory(prefix="zoo-ct2-") as work:
        try:
            export(model, Path(work) / "transformers", "transformers", bos_id=start,
                   eos_id=end)
        except ExportError as exc:
            raise ExportError(f"CTranslate2's {engine} runs the models of transformers' "
                              f"families, and {exc}") from None
        written = Path(work) / "transformers"
        try:
            Converter(str(written)).convert(str(folder), quantization=quantization, force=True)
        except ValueError as exc:
            if "No conversion is registered" not in str(exc):
                raise
            family = json.loads((written / "config.json").read_text())["model_type"]
            raise ExportError(f"CTranslate2's converter has no conversion for {family} "
                              f"models (it converts BERT, DistilBERT, RoBERTa and "
                              f"XLM-RoBERTa encoders, and GPT-2, Llama, Qwen, Mistral, Phi "
                              f"and Gemma language models); export with --format onnx or "
                              f"transformers") from None
    return {"quantization": quantization or "float32",
            "load": "ctranslate2.Encoder(FOLDER).forward_batch([[token, ...], ...])"
            if encoder else "ctranslate2.Generator(FOLDER).generate_batch([[token, ...], ...])",
            "tokens": {"bos": names.bos_token, "eos": names.eos_token, "unk": names.unk_token}}
