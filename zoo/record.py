"""What a model zoo built is and holds: one declared record, set in one place.

``zoo.build`` stamps every model it makes with each field of :class:`ModelRecord`, as the
model's attribute of the same name: ``model.kind``, ``model.recipe``, ``model.generation``,
``model.tokenizer``, ... (the names the docs have always given, so a user's
``model.generation = ...`` is the record's new value). zoo's engine, CLI, exports and text
entrances read a model through :func:`record_of`, typed, and never probe its attributes by
name; what is set after the build (a run's task gives its tokenizer, an image processor
read at first use) goes through :func:`update_record`, whose field names are checked.

Four fields are the architecture's own word on its model, set in its ``__init__`` where
they differ from the default (docs/contract/architecture.md): ``pad_id`` (the token it
reads as padding), ``decodes_incrementally``
(False where its attention keeps no cache: decoding re-runs the prefix),
``max_positions`` (the positions a learned table holds, None for any) and
``drops_layers`` (LayerDrop, so DDP looks for unused parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ZooError
from .kinds import Kind, as_kind


@dataclass(frozen=True)
class ModelRecord:
    """What a built model is and holds (:func:`record_of`); every field is also the
    model's attribute of that name."""

    kind: Kind | None = None
    """What zoo may call on it (:class:`zoo.kinds.Kind`); None for a module zoo did not
    build, or an architecture of none of the kinds."""
    recipe: Any = None
    """The recipe it was built from, overrides applied (a ``zoo.recipe.Recipe``)."""
    settings: Any = None
    """The architecture's settings (the recipe's ``architecture.settings``, validated)."""
    source: str | None = None
    """Where it came from: the recipe's name, ``hf-hub:owner/repo``, ``local-dir:path``,
    or the published weights' address."""
    imported: Any = None
    """What a foreign folder came with (``zoo.foreign.ImportedModel``: its format,
    folder, config, tokenizer files and generation settings); None otherwise."""
    tokenizer: Any = None
    """Its text: an imported folder's tokenizer or a run's task's; None where it has none."""
    generation: Any = None
    """How it decodes (``zoo.decoding.GenerationSettings``: seq2seq and language models);
    None where it carries none."""
    pooling: Any = None
    """How its hidden states become one vector (``zoo.plugin_api.Pooling``: encoders)."""
    score_activation: str | None = None
    """What a cross-encoder's scores go through, as its folder says; None for the default."""
    image_processor: Any = None
    """The image processor of its folder, read at its first use (CLIP, ViT)."""
    pad_id: int | None = None
    """The architecture's: the token id it reads as padding (``padding_mask``), or None."""
    decodes_incrementally: bool = True
    """The architecture's: whether decoding may keep a cache and feed one token a step."""
    max_positions: int | None = None
    """The architecture's: the positions it reads (a learned table's rows); None for any."""
    drops_layers: bool = False
    """The architecture's: whether training skips layers at random (LayerDrop)."""


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(ModelRecord))
"""The record's fields, each a built model's attribute."""
ZOOS = ("kind", "recipe", "source")
"""The fields only zoo sets; an architecture may set any other itself."""
EMPTY = ModelRecord()
_MISSING = object()


def stamp(model: Any, record: ModelRecord) -> Any:
    """Set ``record`` on ``model`` (every field as its attribute), the builder's one
    place. ``kind``, ``recipe`` and ``source`` are zoo's word; every other field the
    architecture set itself (in its ``__init__``, as a seq2seq model its default
    ``generation``, or on its class) is kept. Returns ``model``."""
    for name in FIELDS:
        if name not in ZOOS and hasattr(model, name):
            continue  # the architecture's own word
        setattr(model, name, getattr(record, name))
    return model


def record_of(model: Any) -> ModelRecord:
    """The record of ``model``: what ``zoo.build`` stamped, with what was changed since;
    a module zoo did not build has the defaults where it sets nothing of its own."""
    values = {name: value for name in FIELDS
              if (value := getattr(model, name, _MISSING)) is not _MISSING}
    if "kind" in values:
        values["kind"] = as_kind(values["kind"])
    return replace(EMPTY, **values)


def update_record(model: Any, **changes: Any) -> Any:
    """Change fields of ``model``'s record after its build (a run's tokenizer, an image
    processor read at first use); a name that is no field is a ZooError. Returns
    ``model``."""
    unknown = sorted(set(changes) - set(FIELDS))
    if unknown:
        raise ZooError(f"a model's record has no field {', '.join(map(repr, unknown))}; its "
                       f"fields: {', '.join(FIELDS)}")
    for name, value in changes.items():
        setattr(model, name, value)
    return model
