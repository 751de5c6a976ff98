"""The conformance kit's checks of the format family: a format that writes transformers
folders (``writes="transformers"``) reads back what it writes with the same outputs,
and transformers' own classes compute them too.

The kit maps the format's ``example`` (a small ``config.json`` of its family, as data: a
class attribute of the format) with the format's own ``recipe()``, builds it with its
weights made less uniform, writes it with ``write()``, reads the folder back with
``zoo.build``, and compares outputs on the same tokens."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from ..builder import build
from ..format_base import as_format
from ..kinds import Kind, kind_of, said
from ..recipe import Recipe
from .contract import Failed, Seed, Skip, check, close

AUTO = {"seq2seq": "AutoModelForSeq2SeqLM", "language-model": "AutoModelForCausalLM",
        "encoder": "AutoModel", "image-text": "AutoModel"}
"""transformers' class that loads each kind of model's folder."""


def _example(component):
    reader = as_format(component.load()(None))
    example = getattr(reader, "example", None)
    if example is None:
        raise Skip("the format gives no example config (the class attribute example)")
    recipe = Recipe.from_dict(reader.recipe(dict(example)),
                              f"format {component.name!r}'s example")
    with Seed(0):
        model = build(recipe).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.2)  # not the initialisation's symmetries
    return reader, model


def _no_other_target(*args, **kwargs):
    raise Skip("the format's write asks for another export target")


def _images(model) -> torch.Tensor:
    """Two images of an image-text model's size."""
    s = model.settings.vision
    return torch.randn(2, s.in_chans, s.image_size, s.image_size,
                       generator=torch.Generator().manual_seed(3))


def _run(model, tokens: torch.Tensor) -> torch.Tensor:
    kind = kind_of(model)
    with torch.no_grad():
        if kind is Kind.SEQ2SEQ:
            return model(tokens, tokens[:, :4])
        if kind is Kind.ENCODER:
            return model.hidden_states(tokens)
        if kind is Kind.IMAGE_TEXT:  # each tower's vectors in the shared space
            return torch.cat([model.text_features(tokens), model.image_features(_images(model))])
        return model(tokens)


def _transformers(folder: Path, kind: str, tokens: torch.Tensor) -> torch.Tensor | None:
    try:
        import transformers
    except ImportError:
        return None
    reference = getattr(transformers, AUTO[kind]).from_pretrained(folder).eval()
    with torch.no_grad():
        if kind is Kind.IMAGE_TEXT:
            images = _images(build(f"local-dir:{folder}", pretrained=False))
            text = reference.get_text_features(input_ids=tokens)
            image = reference.get_image_features(pixel_values=images)
            return torch.cat([getattr(text, "pooler_output", text),
                              getattr(image, "pooler_output", image)])
        if kind is Kind.SEQ2SEQ:
            return reference(input_ids=tokens, decoder_input_ids=tokens[:, :4]).logits
        out = reference(input_ids=tokens)
        return out.last_hidden_state if kind is Kind.ENCODER else out.logits


@check("format", "target")
def _format_round_trip(component, settings):
    """A transformers family's format reads back the folder it writes of its example
    model (``zoo.build("local-dir:...")``) with the same outputs, and transformers' own
    class for the kind (``AutoModelForCausalLM``, ...) loads the folder and computes them
    too, where transformers is installed."""
    if component.capabilities.target != "transformers":
        raise Skip(f"writes {component.capabilities.target}, not transformers folders")
    reader, model = _example(component)
    kind = kind_of(model)
    tokens = torch.randint(3, 16, (2, 7), generator=torch.Generator().manual_seed(2))
    expected = _run(model, tokens)
    with tempfile.TemporaryDirectory(prefix="zoo-kit-") as work:
        folder = Path(work)
        reader.write(model, folder, export=_no_other_target)
        if not (folder / "config.json").is_file():
            raise Failed("write() left no config.json")
        back = build(f"local-dir:{folder}").eval()
        if kind_of(back) != kind:
            raise Failed(f"read back as {said(kind_of(back))}, written as {said(kind)}")
        close(_run(back, tokens), expected, "the outputs of the folder read back by zoo")
        theirs = _transformers(folder, kind, tokens)
        if theirs is not None:
            close(theirs, expected, f"transformers' {AUTO[kind]} outputs of the folder")
