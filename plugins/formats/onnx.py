"""The ONNX export target (``zoo export --format onnx``): a member of the ``format``
family that writes what ONNX Runtime runs, through ``torch.onnx.export`` with the batch
and the lengths dynamic (no cache: the whole text or prefix is fed each time).

- an image classifier: ``model.onnx``, ``pixel_values`` (B, C, H, W) to ``logits``;
- a seq2seq model: ``encoder.onnx`` (``src`` to ``memory``) and ``decoder.onnx``
  (``tgt``, ``memory``, ``src`` to the logits over the whole target);
- a language model: ``model.onnx``, ``tokens`` and ``padding_mask`` (True at the left
  padding) to the logits of every next token;
- an encoder: ``model.onnx``, ``tokens``, ``padding_mask`` and ``token_types`` to its
  head's output (``hidden_states`` or ``logits``);
- an image-text model (CLIP): ``image.onnx`` (``pixel_values`` to ``image_embeds``) and
  ``text.onnx`` (``tokens`` and ``padding_mask`` to ``text_embeds``), each vector of unit
  length, as transformers' ``CLIPModel`` gives them; the export's record holds the
  ``logit_scale`` that turns their cosines into logits.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from zoo.plugin_api import (ExportError, Format, Kind, is_quantized, kind_of, plain_linears,
                            refuse_options)

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


class _Images(nn.Module):
    """An image-text model's image tower: images to vectors of unit length."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.model.image_features(images), dim=-1)


class _Texts(nn.Module):
    """An image-text model's text tower: tokens and their padding to vectors of unit
    length."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.model.text_features(tokens, padding_mask), dim=-1)


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



def _image_classifier(model: nn.Module, folder: Path, opset: int) -> dict[str, str]:
    """``model.onnx``: images to logits."""
    device = next(model.parameters()).device
    s = model.recipe.architecture.settings
    x = torch.randn(2, s.get("in_chans", 3), s["image_size"], s["image_size"],
                    device=device)
    _onnx_export(model, (x,), folder / "model.onnx", ["pixel_values"], "logits",
                 {"images": {0: "batch"}}, opset)
    calls = {"model.onnx": "pixel_values (B, C, H, W) float32 -> logits (B, classes)"}
    return calls


def _seq2seq(model: nn.Module, folder: Path, opset: int) -> dict[str, str]:
    """``encoder.onnx`` and ``decoder.onnx``."""
    device = next(model.parameters()).device
    vocab = model.settings.vocab_size
    src = torch.randint(4, vocab, (2, 7), device=device)
    tgt = torch.randint(4, vocab, (2, 5), device=device)
    memory = model.encode(src)
    _onnx_export(_Encoder(model).eval(), (src,), folder / "encoder.onnx", ["src"], "memory",
                 {"src": {0: "batch", 1: "src_len"}}, opset)
    _onnx_export(_Decoder(model).eval(), (tgt, memory, src), folder / "decoder.onnx",
                 ["tgt", "memory", "src"], "logits",
                 {"tgt": {0: "batch", 1: "tgt_len"},
                  "memory": {0: "batch", 1: "src_len"},
                  "src": {0: "batch", 1: "src_len"}}, opset)
    calls = {"encoder.onnx": "src (B, Ls) int64 -> memory (B, Ls, d)",
             "decoder.onnx": "tgt (B, Lt) int64, memory (B, Ls, d), src (B, Ls) int64 "
                             "-> logits (B, Lt, vocab); no cache: feed the whole prefix"}
    return calls


def _language_model(model: nn.Module, folder: Path, opset: int) -> dict[str, str]:
    """``model.onnx``: tokens and their left padding to logits."""
    device = next(model.parameters()).device
    tokens = torch.randint(0, model.settings.vocab_size, (2, 7), device=device)
    padding = torch.zeros_like(tokens, dtype=torch.bool)
    padding[1, :3] = True  # left padding, as prompts are padded
    _onnx_export(_LanguageModel(model).eval(), (tokens, padding), folder / "model.onnx",
                 ["tokens", "padding_mask"], "logits",
                 {"tokens": {0: "batch", 1: "length"},
                  "padding_mask": {0: "batch", 1: "length"}}, opset)
    calls = {"model.onnx": "tokens (B, L) int64, padding_mask (B, L) bool (True at "
                           "the left padding) -> logits (B, L, vocab); no cache: "
                           "feed the whole text"}
    return calls


def _encoder(model: nn.Module, folder: Path, opset: int) -> dict[str, str]:
    """``model.onnx``: tokens, padding and token types to the head's output."""
    device = next(model.parameters()).device
    tokens = torch.randint(4, model.settings.vocab_size, (2, 7), device=device)
    padding = torch.zeros_like(tokens, dtype=torch.bool)
    padding[1, 4:] = True
    output = "hidden_states" if model.settings.head == "hidden" else "logits"
    axes = {0: "batch", 1: "length"}
    _onnx_export(_TextEncoder(model).eval(), (tokens, padding, torch.zeros_like(tokens)),
                 folder / "model.onnx", ["tokens", "padding_mask", "token_types"], output,
                 {"tokens": axes, "padding_mask": axes, "token_types": axes}, opset)
    calls = {"model.onnx": f"tokens (B, L) int64, padding_mask (B, L) bool (True at "
                           f"padding), token_types (B, L) int64 -> {output}"}
    return calls


def _image_text(model: nn.Module, folder: Path, opset: int) -> dict[str, str]:
    """``image.onnx`` and ``text.onnx``: each tower to vectors of unit length."""
    device = next(model.parameters()).device
    s = model.settings.vision
    images = torch.randn(2, s.in_chans, s.image_size, s.image_size, device=device)
    _onnx_export(_Images(model).eval(), (images,), folder / "image.onnx", ["pixel_values"],
                 "image_embeds", {"images": {0: "batch"}}, opset)
    tokens = torch.randint(0, model.settings.text.vocab_size, (2, 7), device=device)
    padding = torch.zeros_like(tokens, dtype=torch.bool)
    padding[1, 5:] = True
    axes = {0: "batch", 1: "length"}
    _onnx_export(_Texts(model).eval(), (tokens, padding), folder / "text.onnx",
                 ["tokens", "padding_mask"], "text_embeds",
                 {"tokens": axes, "padding_mask": axes}, opset)
    return {"image.onnx": "pixel_values (B, C, H, W) float32 -> image_embeds (B, d), "
                          "unit length",
            "text.onnx": "tokens (B, L) int64, padding_mask (B, L) bool (True at padding) "
                         "-> text_embeds (B, d), unit length; logits_per_image = "
                         "image_embeds @ text_embeds.T * logit_scale"}


WRITERS = {"image-classifier": _image_classifier, "seq2seq": _seq2seq,
           "language-model": _language_model, "encoder": _encoder, "image-text": _image_text}
"""What each kind of model is written as."""


class OnnxWriter(Format):
    """Writes a zoo model as ONNX graphs (``onnxruntime.InferenceSession`` loads each)."""

    family = "onnx"
    generates = False

    def write(self, model: nn.Module, folder: Path, *, export: Callable[..., Path],
              vocabulary: Any = None, tokenizer: Any = None, bos_id: int | None = None,
              eos_id: int | None = None, opset: int = 18, **options: Any) -> dict[str, Any]:
        """``opset``: the ONNX operator set (18)."""
        refuse_options(options, "--format onnx")
        try:
            import onnx  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError as exc:
            raise ExportError(f"--format onnx needs the onnx and onnxscript packages "
                              f"({exc}); pip install 'zoo-transformers[export]'") from None
        kind = kind_of(model)
        if kind is None:
            raise ExportError(f"--format onnx exports image classifiers, seq2seq and language "
                              f"models, encoders and image-text models; this "
                              f"{type(model).__name__} is of none of these kinds")
        if is_quantized(model):
            raise ExportError("export the fp32 model: ONNX Runtime quantizes an ONNX graph "
                              "itself (onnxruntime.quantization.quantize_dynamic)")
        model = model.eval()
        calls = WRITERS[kind](model, folder, opset)
        info = {"opset": opset, "files": calls, "load": "onnxruntime.InferenceSession(FILE)"}
        if kind is Kind.IMAGE_TEXT:  # what turns the towers' cosines into logits
            info["logit_scale"] = float(model.logit_scale.detach().exp())
        return info
