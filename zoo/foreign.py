"""Folders in another library's format (a transformers ``config.json`` and its
safetensors), read through the ``format`` family into a zoo recipe and zoo's
weight names.

A folder is foreign when its ``config.json`` names a ``model_type`` and is not a zoo
config. The format plugin whose ``model_types`` list that type maps the config to a
recipe (refusing by name any option zoo cannot express, before a weight is read),
renames the weights, and reads the generation settings; this module reads the files
(bounded JSON, safetensors only: a pickle is refused with the command that converts
it, and never opened) and keeps the model's tokenizer folder. It builds nothing
(``zoo.build`` does, one layer up).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import torch

from ._text import quoted, short_repr
from .artifact import CONFIG_NAME, INDEX_NAME, PICKLE_SUFFIXES, WEIGHTS_NAME
from .artifact import read_json, read_weights, weight_files
from .errors import ArtifactError, FormatError, ZooError
from .decoding import GenerationSettings, parse_settings
from .format_base import as_format
from .recipe import Recipe, as_meant_by
from .registry import NOTICED, NOTICES, PREFER_BUILTIN, Component, choose_claim, registry
from .tokenizer_files import check_tokenizer_files

GENERATION_NAME = "generation_config.json"
EXTRA = "zoo-transformers[hub-formats]"
"""The extra that brings what foreign tokenizers need (transformers, sentencepiece)."""


_READING = threading.Lock()
"""Held while a folder's tokenizer is read (at its first use, from any thread)."""

@dataclass
class Imported:
    """What a model built from a foreign folder keeps of it (``model.imported``)."""

    format: str
    """The format component that read it (``marian``, ``t5``, ...)."""
    source: str
    """The name it was built from (``hf-hub:Helsinki-NLP/opus-mt-de-en``)."""
    folder: Path
    """The folder holding its files (the tokenizer's among them)."""
    config: dict[str, Any] = field(repr=False)
    """Its ``config.json``, as read."""
    generation: GenerationSettings | None = None
    """Its generation settings (None for models that do not generate)."""
    _tokenizer: Any = field(default=None, repr=False, compare=False)

    def tokenizer(self):
        """The model's own tokenizer (transformers' ``AutoTokenizer`` over its folder),
        read and checked once, on first use, and kept: the model carries its text."""
        if self._tokenizer is None:
            with _READING:  # two threads' first uses read it once
                if self._tokenizer is None:
                    self._tokenizer = load_tokenizer(self.folder, self.source)
        return self._tokenizer

    def translate(self, model, texts: list[str], **changes: Any) -> list[str]:
        """Deprecated: ``zoo.translate(model, texts, **changes)``, which reads the model's
        own tokenizer (``model.tokenizer``) the same way."""
        from .decoding.text import translate
        from .deprecations import warn_deprecated

        warn_deprecated("Imported.translate", "model.imported.translate is "
                        "zoo.translate(model, texts) now")
        return translate(model, texts, **changes)


class FolderTokenizer:
    """An imported model's ``model.tokenizer``: its folder's own tokenizer (transformers'
    ``AutoTokenizer``), read and checked at its first use and kept (a model built only to
    be exported or benchmarked never reads it; a folder without tokenizer files says so
    when one is asked for). It stands for that tokenizer: calls and attributes go to it."""

    def __init__(self, imported: Imported) -> None:
        object.__setattr__(self, "_imported", imported)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._imported.tokenizer()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy, pickle and the like ask; the tokenizer is not read
            raise AttributeError(name)
        return getattr(self._imported.tokenizer(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._imported.tokenizer(), name, value)

    def __repr__(self) -> str:
        return f"FolderTokenizer({self._imported.source})"


def foreign_config(folder: Path, source: str) -> dict[str, Any] | None:
    """The ``config.json`` of ``folder`` when it is in a foreign format (it names a
    ``model_type`` and is no zoo config), else None."""
    try:
        data = read_json(folder / CONFIG_NAME, source)
    except ArtifactError:
        return None  # artifact.read_config says what is wrong
    return data if data.get("format") != "zoo" and "model_type" in data else None


FORMAT_CHOICE = "ZOO_FORMAT_FOR"
"""The environment variable that chooses among formats claiming one ``model_type``:
``ZOO_FORMAT_FOR="llama=myplugin:llama,qwen2=other:qwen"``."""


def _chosen(model_type: str, claims: list[Component], source: str) -> Component | None:
    """The claimant :data:`FORMAT_CHOICE` names for ``model_type``, if it names one."""
    for pair in os.environ.get(FORMAT_CHOICE, "").split(","):
        kind, _, name = pair.strip().partition("=")
        if kind != model_type:
            continue
        for c in claims:
            if name in (c.name, c.qualified_name):
                return c
        raise FormatError(
            f"{source}: {FORMAT_CHOICE} chooses {name!r} for model_type {model_type!r}, "
            f"which is none of the formats that read it: "
            f"{quoted([c.qualified_name for c in claims])}.")
    return None


def _readers_of(model_type: str, source: str) -> Component | None:
    """The one format that reads ``model_type``, by one rule: the only one that claims it;
    else the one :data:`FORMAT_CHOICE` names; else the one that says it overrides; else
    an installed plugin's over zoo's own (the user installed it for those folders; zoo's
    stays reachable through :data:`FORMAT_CHOICE` or ``ZOO_PREFER_BUILTIN``), said once a
    process. Two installed plugins claiming it, none overriding, are refused, naming how
    to choose. Formats of one name from two plugins both claim (each by its qualified
    name)."""
    claims = [c for c in registry.qualified("format")
              if model_type in c.capabilities.model_types]
    if len(claims) <= 1:
        return claims[0] if claims else None
    chosen = _chosen(model_type, claims, source)
    if chosen is not None:
        return chosen
    overriding = [c for c in claims if model_type in c.capabilities.overrides]
    if len(overriding) == 1:
        return overriding[0]
    picked = choose_claim(claims, model_type, registry.builtin)
    if picked is not None:
        told = ("format", model_type, picked.qualified_name)
        if not registry.builtin(picked.plugin) and told not in NOTICED:
            NOTICED.add(told)
            NOTICES.warning(
                "zoo: model_type %r is read by plugin %s's format %r (zoo's own: %s). %s=%s "
                "gives it back to zoo's (docs/compatibility.md).", model_type, picked.plugin,
                picked.name, ", ".join(c.qualified_name for c in claims if c is not picked),
                PREFER_BUILTIN, model_type)
        return picked
    theirs = [c for c in claims if not registry.builtin(c.plugin)]
    named = ", ".join(f"{c.qualified_name!r}" for c in theirs)
    raise FormatError(
        f"{source}: model_type {model_type!r} is claimed by the formats of {len(theirs)} "
        f"installed plugins, {named}, and {'several say' if overriding else 'none says'} "
        f"it overrides the others. Choose one: {FORMAT_CHOICE}=\"{model_type}="
        f"{theirs[-1].qualified_name}\" (docs/compatibility.md), or uninstall one.")


def format_for(config: dict[str, Any], source: str) -> Component:
    """The format component that reads ``config``'s ``model_type``."""
    model_type = config.get("model_type")
    known = {t: c for c in registry.qualified("format") for t in c.capabilities.model_types}
    if isinstance(model_type, str) and model_type in known:
        return _readers_of(model_type, source)
    if not isinstance(model_type, str) or model_type not in known:
        raise FormatError(
            f"{source}: {CONFIG_NAME} is a transformers config of model_type "
            f"{short_repr(model_type, 60)}, which no installed format plugin reads. zoo reads "
            f"{quoted(sorted(known))}; a plugin can add more (family 'format', "
            "docs/from-the-hub.md).")
    return known[model_type]


class _Guarded:
    """A format's reader whose hooks raise only zoo's errors: anything else a hook raises
    becomes one FormatError naming the format, its plugin and the hook."""

    def __init__(self, component: Component, reader: Any, source: str) -> None:
        self._component, self._reader, self._source = component, reader, source

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._reader, name)
        if not callable(value):
            return value

        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            except ZooError:
                raise
            except Exception as exc:
                c = self._component
                raise FormatError(
                    f"{self._source}: format {c.name!r} (plugin {c.plugin!r}) failed in "
                    f"{name}(): {type(exc).__name__}: {short_repr(exc, 300)}. The folder may "
                    "hold what the format does not expect; if it is a transformers folder "
                    f"transformers loads, report it to the plugin's authors.") from exc
        return guarded


def _reader(config: dict[str, Any], source: str,
            component: Component | None = None) -> tuple[Component, Any]:
    component = component or format_for(config, source)
    try:
        reader = as_format(component.load()(None))
    except ZooError:
        raise
    except Exception as exc:
        raise FormatError(f"{source}: format {component.name!r} (plugin {component.plugin!r}) "
                          f"could not be made: {type(exc).__name__}: {short_repr(exc, 300)}"
                          ) from exc
    return component, _Guarded(component, reader, source)


def convert_weights(converter: str, state_dict: Mapping[str, torch.Tensor],
                    source: str = "weights") -> dict[str, torch.Tensor]:
    """``state_dict`` in zoo's names: ``converter`` is ``"zoo"`` (already zoo's) or a
    format of the family (``"timm-vit"``: a recipe's ``weights.converter``), whose
    ``weights`` hook renames them."""
    if converter == "zoo":
        return dict(state_dict)
    _, reader = _reader({}, source, registry.get("format", converter))
    return reader.weights(dict(state_dict), {})


def convert_timm_vit(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A timm ``VisionTransformer`` state dict in the names of zoo's ``vit`` (the
    ``timm-vit`` format's ``weights``): the fused ``qkv`` split into ``q_proj`` and
    ``kv_proj``, ``pos_embed`` as the learned positions' table; a key with no
    counterpart raises FormatError."""
    return convert_weights("timm-vit", state_dict, "timm ViT weights")


def foreign_recipe(config: dict[str, Any], source: str, folder: Path | None = None) -> Recipe:
    """The zoo recipe of a foreign config (the format plugin's mapping, validated), as
    sentence-transformers reads it where ``folder`` is one of its own
    (:func:`sentence_body`)."""
    component, reader = _reader(config, source)
    if folder is not None:
        config = sentence_body(folder, config, reader)
    data = reader.recipe(config)
    recipe = Recipe.from_dict(data, f"{source} (mapped from its {CONFIG_NAME})")
    return as_meant_by(recipe, component.plugin)


def file_patterns(config: dict[str, Any], source: str) -> list[str]:
    """The files of a foreign repository that building it needs (weights, tokenizer,
    generation settings), as patterns."""
    _, reader = _reader(config, source)
    files = getattr(reader, "files", ())
    return sorted({CONFIG_NAME, GENERATION_NAME, WEIGHTS_NAME, INDEX_NAME,
                   "model-*.safetensors", *CHAT_TEMPLATE_FILES,
                   *(files() if callable(files) else files)})


def convert_command(folder: str) -> str:
    """The command that rewrites a transformers folder's pickled weights as safetensors
    (transformers loads them with torch's weights-only unpickler): the class its
    ``config.json`` names (its head included: ``AutoModel`` would drop it), then the
    tokenizer beside it."""
    return ("python -c \"import json, transformers as t; d = '" + folder + "'; o = d + "
            "'-safetensors'; c = json.load(open(d + '/config.json')); "
            "getattr(t, (c.get('architectures') or ['AutoModel'])[0])"
            ".from_pretrained(d).save_pretrained(o); "
            "t.AutoTokenizer.from_pretrained(d).save_pretrained(o)\"")


def foreign_weight_files(folder: Path, source: str) -> list[Path]:
    """The safetensors files of a foreign folder. Pickled weights are never opened: they
    are refused with the command that converts them."""
    if not (folder / WEIGHTS_NAME).is_file() and not (folder / INDEX_NAME).is_file():
        pickles = sorted(p.name for p in folder.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
        if pickles:
            raise FormatError(
                f"{source} holds its weights only as pickle ({quoted(pickles)}); zoo never "
                "unpickles, because unpickling can run any code. Convert a folder you trust "
                f"to safetensors with: {convert_command(str(folder))}")
    return weight_files(folder, source)


def read_generation(folder: Path, config: dict[str, Any], source: str,
                    reader: Any) -> GenerationSettings | None:
    """The generation settings of a foreign folder: ``generation_config.json`` if there
    is one, else the generation keys of ``config.json`` (older saves)."""
    path = folder / GENERATION_NAME
    generation = read_json(path, source) if path.is_file() else {}
    data = reader.generation(config, generation)
    if data is None:
        return None
    try:
        return parse_settings(data, f"{source}'s {GENERATION_NAME} (as zoo reads it)")
    except ValueError as exc:  # a RecipeError, worded; a format's own odd value, shown
        raise FormatError(str(exc) if isinstance(exc, ZooError) else
                          f"{source}: its generation settings cannot be used: "
                          f"{short_repr(exc, 600)}") from None


def read_foreign(folder: Path, config: dict[str, Any], source: str, *,
                 weights: bool = True) -> tuple[Recipe, dict[str, torch.Tensor] | None, Imported]:
    """A foreign folder as a zoo recipe, its weights in zoo's names (None when not
    asked) and what the model keeps of it. The recipe is mapped, and refused, before
    any weight is read."""
    component, reader = _reader(config, source)
    imported_config, config = config, sentence_body(folder, config, reader)
    recipe = foreign_recipe(config, source)  # (sentence_body already applied)
    generation = read_generation(folder, config, source, reader)
    state = None
    if weights:
        state = read_weights(foreign_weight_files(folder, source), source)
        check_tied(state, reader.tied(config), source)
        state = reader.weights(state, config)
    return recipe, state, Imported(component.name, source, folder, imported_config, generation)


def sentence_body(folder: Path, config: dict[str, Any], reader: Any) -> dict[str, Any]:
    """``config`` as sentence-transformers reads a folder of its own (``modules.json``):
    the family's bare encoder, as ``AutoModel`` loads it whatever ``architectures`` names
    (all-mpnet-base-v2's config names ``MPNetForMaskedLM`` over the body's weights); any
    other folder's as it is."""
    heads = getattr(reader, "heads", None)
    if not isinstance(heads, dict) or not os.path.lexists(folder / "modules.json"):
        return config
    body = next((cls for cls, head in heads.items() if head == "hidden"), None)
    return config if body is None else {**config, "architectures": [body]}


def check_tied(state: Mapping[str, torch.Tensor], pairs: list[tuple[str, str]],
               source: str) -> None:
    """Refuse ``state`` (a folder's tensors, in its family's names) where it stores a
    tied matrix twice (each of ``pairs``: the format's :meth:`~zoo.format_base.Format.tied`)
    with different values: a tied model keeps one of them, and which one is a guess."""
    for alias, original in pairs:
        a, b = state.get(alias), state.get(original)
        if a is None or b is None or (a.shape == b.shape and (
                torch.equal(a, b) if a.dtype == b.dtype else torch.equal(a.double(), b.double()))):
            continue
        how = (f"shapes {tuple(a.shape)} and {tuple(b.shape)}" if a.shape != b.shape else
               f"values up to {float((a.double() - b.double()).abs().max()):.4g} apart")
        raise FormatError(
            f"{source}: its config.json ties {alias} to {original} (one matrix: "
            f"tie_word_embeddings or shared embeddings), but its weights store the two with "
            f"different {how}. Set tie_word_embeddings to false in config.json if the model "
            f"uses {alias} as stored, or store it equal to {original}. Nothing was loaded.")


CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
"""Where an instruct model's chat template may be, beside tokenizer_config.json's
``chat_template`` (:mod:`zoo.decoding.chat`)."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt",
                   "source.spm", "spiece.model", "sentencepiece.bpe.model")
"""The files of which a transformers tokenizer has at least one."""


def load_tokenizer(folder: Path, source: str):
    """transformers' ``AutoTokenizer`` over a foreign folder: the model's own tokenizer
    (SentencePiece for Marian and T5, byte-level BPE for BART)."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise FormatError(
            f"{source} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}) beside "
            "its config.json, so its text cannot be read or written. Save the model's "
            "tokenizer there: python -c \"from transformers import AutoTokenizer; "
            f"AutoTokenizer.from_pretrained('NAME').save_pretrained('{folder}')\"")
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise FormatError(f"{source}: its tokenizer is read by transformers, which is not "
                          f"installed: pip install '{EXTRA}'.") from None
    check_tokenizer_files(folder, source)
    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except ImportError as exc:
        raise FormatError(f"{source}: its tokenizer needs a package that is not installed "
                          f"({short_repr(exc, 200)}): pip install '{EXTRA}'.") from None
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception, others more
        raise FormatError(f"{source}: its tokenizer could not be read ({short_repr(exc, 300)}); "
                          "the folder needs the tokenizer's files beside config.json.") from None
