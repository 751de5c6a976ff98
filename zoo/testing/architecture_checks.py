"""The conformance kit's checks of the architecture family: the kind an architecture
declares is the model it builds, each row of a batch is computed alone, and what its
kind promises holds (a cache changes no decoded token; an encoder's padding changes no
real position).

The kit builds the architecture with its slots' defaults and the ``settings=`` given
(small sizes: a vocabulary of at least 16 tokens, a few layers), in eval mode."""

from __future__ import annotations

import torch

from ..builder import build
from ..decoding import generate
from ..kinds import Kind, kind_of, missing_methods
from ..record import record_of
from ..recipe import Recipe
from ..registry import registry
from .contract import Failed, Seed, Skip, check, close, shape

VOCAB = 16
"""The token ids the kit feeds a text model lie in 3 .. VOCAB - 1."""


PREFERRED = ("vanilla",)
"""The kit fills a slot without a default with the first of these that fits it, else with
the first registered component that does."""


def _fill(slot) -> str:
    """A registered component for ``slot`` that meets what it requires."""
    fits = [c.name for c in registry.list(slot.family)
            if all(getattr(c.capabilities, k, None) == v for k, v in slot.requires.items())]
    if not fits:
        raise Skip(f"no registered {slot.family} component fits a slot that requires "
                   f"{slot.requires}")
    return next((name for name in PREFERRED if name in fits), fits[0])


def _model(component, settings):
    data = settings.model_dump() if settings is not None else {}
    slots = dict(getattr(component.load(), "slots", {}))
    recipe = Recipe.from_dict({"name": "conformance", "architecture": {
        "name": component.qualified_name if component.plugin != "<runtime>" else
        component.name, "settings": data},
        "components": {name: _fill(slot) for name, slot in slots.items()
                       if slot.default is None}}, "the conformance kit's recipe")
    with Seed(0):
        return build(recipe).eval()


def _tokens(model, rows: int, length: int) -> torch.Tensor:
    vocab = getattr(record_of(model).settings, "vocab_size", VOCAB)
    if vocab < VOCAB:
        raise Skip(f"a vocabulary of {vocab} tokens: the kit feeds ids up to {VOCAB - 1}")
    return torch.randint(3, VOCAB, (rows, length), generator=torch.Generator().manual_seed(1))


def _images(model, rows: int) -> torch.Tensor:
    s = record_of(model).settings
    s = getattr(s, "vision", s)  # an image-text model's image tower
    size, chans = getattr(s, "image_size", None), getattr(s, "in_chans", 3)
    if size is None:
        raise Skip("the settings name no image_size: the kit cannot make an image")
    return torch.randn(rows, chans, size, size, generator=torch.Generator().manual_seed(1))


def _outputs(model, kind: str, inputs: torch.Tensor) -> torch.Tensor:
    """What the kind computes from ``inputs`` (rows first)."""
    if kind is Kind.SEQ2SEQ:
        return model(inputs, inputs[:, :4])
    if kind is Kind.ENCODER:
        return model.hidden_states(inputs)
    return model(inputs)


@check("architecture")
def _architecture_kind(component, settings):
    """The built model is of the kind the architecture declares (its class defines what
    the kind's protocol lists), and each row of a batch gives what it gives alone: finite
    outputs of one shape."""
    kind = component.capabilities.kind
    if kind is None:
        raise Skip("declares no kind (zoo decodes, embeds and exports nothing of it)")
    if missing_methods(component.load(), kind):
        raise Failed(f"kind {kind!r}: the class defines no "
                     f"{', '.join(missing_methods(component.load(), kind))}")
    model = _model(component, settings)
    if kind_of(model) != kind:
        raise Failed(f"the built model's kind is {kind_of(model)!r}, not {kind!r}")
    if kind is Kind.IMAGE_TEXT:  # each tower's vectors
        cases = [("image_features", _images(model, 3)), ("text_features", _tokens(model, 3, 6))]
    else:
        inputs = _images(model, 3) if kind is Kind.IMAGE_CLASSIFIER else _tokens(model, 3, 6)
        cases = [(None, inputs)]
    for method, inputs in cases:
        with torch.no_grad():
            run = getattr(model, method) if method else (
                lambda x: _outputs(model, kind, x))
            together, alone = run(inputs), run(inputs[1:2])
        what = f"the {kind} model's {method or 'outputs'}"
        shape(together, (3, *together.shape[1:]), what)
        close(together[1:2], alone, f"{what}: a row computed in a batch against the same "
              "row alone")


@check("architecture")
def _architecture_decodes(component, settings):
    """A model that generates (``seq2seq``, ``language-model``) decodes the same tokens
    with its cache as without it, greedy and with 3 beams (``zoo.generate``)."""
    if component.capabilities.kind not in (Kind.SEQ2SEQ, Kind.LANGUAGE_MODEL):
        raise Skip("generates no text")
    model = _model(component, settings)
    prompts = _tokens(model, 2, 5)
    for beams in (1, 3):
        cached = generate(model, prompts, num_beams=beams, max_new_tokens=6, min_new_tokens=6)
        again = generate(model, prompts, num_beams=beams, max_new_tokens=6, min_new_tokens=6,
                         use_cache=False)
        if not torch.equal(cached, again):
            raise Failed(f"{beams} beam(s): the tokens with a cache {cached.tolist()} differ "
                         f"from those without {again.tolist()}")


@check("architecture")
def _architecture_pads(component, settings):
    """An encoder's hidden states at a row's real positions do not change when the row is
    padded on the right (its padding mask given)."""
    if component.capabilities.kind is not Kind.ENCODER:
        raise Skip("no encoder")
    model = _model(component, settings)
    tokens = _tokens(model, 1, 5)
    pad = record_of(model).pad_id or 0
    padded = torch.cat([tokens, torch.full((1, 3), pad)], dim=1)
    mask = torch.zeros_like(padded, dtype=torch.bool)
    mask[:, 5:] = True
    with torch.no_grad():
        close(model.hidden_states(padded, mask)[:, :5], model.hidden_states(tokens),
              "the hidden states of a row padded on the right, at its real positions")
