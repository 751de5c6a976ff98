"""Recipes: data that names an architecture and a component for each slot.

A recipe is a pydantic model stored as YAML (read with ``yaml.safe_load``) or
JSON. It names registered components and gives their settings; it can never
name a Python path or carry code. ``load_recipe(save_recipe(r, p)) == r``.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from ._text import (
    validate_plain,
    DISTRIBUTION_RE,
    NAME_RE,
    QUALIFIED_RE,
    RECIPE_NAME_RE,
    describe_validation_error,
    is_git_ref,
    quoted,
    short_repr,
)
from .errors import RecipeError, UnknownNameError
from .files import atomic_write_text, file_kind
from .recipe_inheritance import extend
from .registry import RecipeEntry, registry

RECIPE_SUFFIXES = (".yaml", ".yml", ".json")


class ComponentRef(BaseModel):
    """A registered component by name, with its settings. ``"rmsnorm"`` is short for
    ``{"name": "rmsnorm"}``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The registered component's name (``zoo components FAMILY`` lists them)."""
    settings: dict[str, JsonValue] = Field(default_factory=dict)
    """Its settings, validated against the component's ``Settings`` when the recipe is
    resolved; a setting left out takes the component's default."""

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _registry_name(cls, name: str) -> str:
        if not NAME_RE.match(name) and not QUALIFIED_RE.match(name):
            raise ValueError(
                f"{name!r} is not a component name: recipes name registered components "
                "(lower-case letters, digits and dashes, e.g. 'rmsnorm', or PLUGIN:NAME for "
                "one plugin's, e.g. 'ffn:geglu'), never Python paths, files or code"
            )
        return name


class PretrainedWeights(BaseModel):
    """Published weights of a recipe: a safetensors file in a Hub repo, and the converter
    (a name zoo knows, never code) that maps its tensor names to zoo's."""

    model_config = ConfigDict(extra="forbid")

    hub: str
    """The Hub repository, ``owner/name``."""
    revision: str = "main"
    filename: str = "model.safetensors"
    converter: str = "zoo"
    """``zoo`` (the file holds zoo's names) or a format of the ``format`` family whose
    ``weights`` renames them (``timm-vit``)."""

    @field_validator("converter")
    @classmethod
    def _converter(cls, value: str) -> str:
        if value != "zoo" and not (NAME_RE.match(value) or QUALIFIED_RE.match(value)):
            raise ValueError(f"{value!r} is not 'zoo' or the name of a format (timm-vit)")
        return value

    @field_validator("hub")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", value) or ".." in value:
            raise ValueError(f"{value!r} is not a Hub repository id (owner/name)")
        return value

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        if not is_git_ref(value):
            raise ValueError(f"{short_repr(value, 80)} is not a branch, tag or commit name "
                             "(no '..', no leading '/', no spaces or control characters)")
        return value

    @field_validator("filename")
    @classmethod
    def _safetensors(cls, value: str) -> str:
        if not value.endswith(".safetensors") or ".." in value or value.startswith("/"):
            raise ValueError(
                f"{value!r}: published weights are a .safetensors file inside the repository "
                "(pickle checkpoints are refused: loading them can run code)"
            )
        return value


class Recipe(BaseModel):
    """A named model: an architecture, its settings and a component per slot."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The recipe's name (``zoo.build(name)``)."""
    description: str = ""
    """One line or a paragraph: what the model is (``zoo list`` shows it)."""
    architecture: ComponentRef
    """The architecture and its settings (sizes, layers, dropout: ``docs/recipes.md``
    lists each architecture's settings with their defaults)."""
    components: dict[str, ComponentRef] = Field(default_factory=dict)
    """A component per slot, keyed by the architecture's slot names (``attention``,
    ``norm``, ...). A slot left out takes the slot's default. ``model.recipe`` of a built
    model is the recipe it was built from, overrides applied (the slots a recipe left
    out stay out: their defaults are listed with the architecture's slots)."""
    requires: list[str] = Field(default_factory=list)
    """Plugin distributions the recipe needs (``pip install`` names)."""
    weights: PretrainedWeights | None = None
    """Published weights, loaded by ``zoo.build(name, pretrained=True)``."""
    based_on: str | None = None
    """A record: the ``base:`` this recipe was written from (a named recipe or a file).
    The other fields hold the whole recipe, so nothing is read from the base again."""

    @field_validator("requires")
    @classmethod
    def _distributions(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not DISTRIBUTION_RE.match(n)]
        if bad:
            raise ValueError(f"{short_repr(bad, 80)}: requires lists package names, as pip "
                             "installs them (e.g. zoo-plugin-example)")
        return names

    @field_validator("name")
    @classmethod
    def _recipe_name(cls, name: str) -> str:
        if not RECIPE_NAME_RE.match(name):
            raise ValueError(
                f"{name!r} is not a recipe name: use lower-case letters, digits, dots, "
                "dashes and underscores, e.g. 'transformer-base'"
            )
        return name

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain JSON-ready data (``based_on`` only when there is one)."""
        data = self.model_dump(mode="json")
        if data["based_on"] is None:
            del data["based_on"]
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "recipe", *,
                  relative_to: Path | None = None) -> "Recipe":
        """A recipe from plain data; a problem raises one :class:`RecipeError` naming
        ``source`` and the keys. Data with a ``base:`` (a named recipe, or a recipe file,
        relative to ``relative_to``) is that recipe with these changes
        (``zoo/recipe_inheritance.py`` has the rules)."""
        if not isinstance(data, dict):
            raise RecipeError(
                f"{source}: a recipe is a mapping with keys "
                f"{quoted([*cls.model_fields, 'base'])}, got {type(data).__name__}."
            )
        check_data(data, source)
        if "base" in data:
            data = extend(data, source, lambda name: _base_recipe(name, source,
                                                                  relative_to).to_dict())
        try:
            return validate_plain(cls, data)
        except ValidationError as exc:
            raise RecipeError(describe_validation_error(exc, source, cls)) from None


# -- files -------------------------------------------------------------------------------------
def parse_recipe_text(text: str, source: str, suffix: str = ".yaml", *,
                      relative_to: Path | None = None) -> Recipe:
    """A recipe from YAML or JSON text; YAML tags that would build objects are refused.
    A ``base:`` file is found relative to ``relative_to`` (the directory of the file)."""
    return Recipe.from_dict(parse_data(text, source, suffix), source, relative_to=relative_to)


MAX_TEXT = 1 << 20
"""Characters a recipe, a training recipe or a ``--set`` value may have."""
MAX_NODES = 20_000
"""Values (each mapping, list, key and scalar, counted every time a YAML alias repeats one)
that such data may hold: far more than any recipe, far less than a billion laughs."""
MAX_DEPTH = 32
"""Nesting such data may have."""
MAX_INT = 2**53
"""The largest integer a recipe may give (any size, count or seed is far below it; torch
takes no integer past 2^63)."""


def check_data(data: Any, source: str) -> Any:
    """Refuse data too large, too deep, with integers beyond any size zoo takes, or with
    NaN or infinite numbers, before anything validates it (or quotes it in an error). The
    walk stops at the first excess, so a self-repeating input costs no more than the
    limits."""
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise RecipeError(f"{source}: more than {MAX_NODES:,} values (YAML aliases count "
                              "each time they repeat); a recipe is a few dozen. Refusing it.")
        if depth > MAX_DEPTH:
            raise RecipeError(f"{source}: nested more than {MAX_DEPTH} levels deep; a recipe "
                              "is a few levels deep. Refusing it.")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, (list, tuple)):
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and abs(value) > MAX_INT:
            raise RecipeError(f"{source}: the integer {short_repr(value, 60)} is larger than "
                              f"any size, count or seed zoo takes (at most 2^53).")
        elif isinstance(value, float) and not math.isfinite(value):
            raise RecipeError(f"{source}: {value} is not a number a setting can take; give a "
                              "finite value.")
    return data


class _Loader(yaml.SafeLoader):
    """yaml's safe loader, with two changes: a key given twice in one mapping is refused
    with its line (PyYAML keeps the last one silently), and ``1e-6`` is read as the
    number it is (YAML 1.2; PyYAML, following YAML 1.1, reads it as text)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base" merges; a key given beside it overrides (YAML's rule)
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, (seen[key], line))
                seen[key] = line
            except TypeError:  # an unhashable key: the base class says what is wrong
                continue
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(Exception):
    """A key given twice in one mapping, and the lines it is on (YAML; JSON says none)."""

    def __init__(self, key: Any, lines: tuple[int, ...] = ()) -> None:
        super().__init__(key, lines)
        self.key, self.lines = key, tuple(dict.fromkeys(lines))


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def parse_data(text: str, source: str, suffix: str = ".yaml") -> Any:
    """Plain data from YAML or JSON text; YAML tags that would build objects are refused,
    and so is data past :func:`check_data`'s limits."""
    if len(text) > MAX_TEXT:
        raise RecipeError(f"{source}: {len(text):,} characters; a recipe is a few hundred. "
                          "Refusing it.")
    try:
        data = (json.loads(text, object_pairs_hook=_json_pairs) if suffix == ".json"
                else yaml.load(text, Loader=_Loader))  # noqa: S506 (a safe loader)
    except _DuplicateKey as dup:
        where = (f" (line{'s' if len(dup.lines) > 1 else ''} "
                 f"{' and '.join(map(str, dup.lines))})" if dup.lines else "")
        raise RecipeError(f"{source}: the key {short_repr(dup.key, 60)} is given twice in one "
                          f"mapping{where}; give each key once.") from None
    except RecursionError:
        raise RecipeError(f"{source}: nested too deeply to read; a recipe is a few levels "
                          "deep.") from None
    except yaml.constructor.ConstructorError as exc:
        raise RecipeError(
            f"{source}: {exc.problem} ({exc.problem_mark}). Recipes are plain data "
            "(mappings, lists, strings, numbers, booleans); YAML tags such as "
            "!!python/object are refused. Remove the tag."
        ) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise RecipeError(f"{source}: not valid {suffix.lstrip('.').upper()}: {exc}") from None
    return check_data(data, source)


def parse_value(text: str, source: str) -> Any:
    """One value written as YAML (``--set key=value``): ``3``, ``rmsnorm``, ``{name: ...}``."""
    return parse_data(text, source, ".yaml")


MAX_FILE_BYTES = MAX_TEXT
"""Bytes read from a recipe or training recipe file, at most (1 MiB)."""


def read_text(path: Path, what: str) -> str:
    """A regular file's text, read as UTF-8, at most 1 MiB of it; anything else (a FIFO,
    a device such as ``/dev/zero``, a folder, a file past the bound, bytes that are not
    UTF-8) is one RecipeError, raised before the file is read or parsed. The file is
    opened without blocking, so a FIFO never hangs."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise RecipeError(f"Cannot read {what} {path}: {exc.strerror}.") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RecipeError(f"{what} {path} is {file_kind(mode)}, not a regular file; zoo "
                              f"reads a {what} only from a regular file. Save it as one.")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise RecipeError(f"Cannot read {what} {path}: {exc.strerror}.") from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise RecipeError(f"{what} {path} is larger than {MAX_FILE_BYTES:,} bytes; a {what} "
                          "is a few hundred. Refusing it.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{what} {path} is not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r}); save it as UTF-8.") from None


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Read a recipe file (``.yaml``, ``.yml`` or ``.json``)."""
    path = Path(path)
    if path.suffix not in RECIPE_SUFFIXES:
        raise RecipeError(f"{path}: recipe files end in {quoted(RECIPE_SUFFIXES)}.")
    return parse_recipe_text(read_text(path, "recipe"), str(path), path.suffix,
                             relative_to=path.parent)


def dump_recipe(recipe: Recipe, suffix: str = ".yaml") -> str:
    """The recipe as YAML text (JSON for ``suffix=".json"``)."""
    data = recipe.to_dict()
    if suffix == ".json":
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def save_recipe(recipe: Recipe, path: str | os.PathLike[str]) -> Path:
    """Write a recipe as YAML or JSON (by suffix), atomically."""
    path = Path(path)
    if path.suffix not in RECIPE_SUFFIXES:
        raise RecipeError(f"{path}: recipe files end in {quoted(RECIPE_SUFFIXES)}.")
    return atomic_write_text(path, dump_recipe(recipe, path.suffix))


# -- named recipes -------------------------------------------------------------------------------
def _read_source(entry: RecipeEntry) -> Recipe:
    """A registered recipe's source as a :class:`Recipe`: a mapping, a Recipe, or a
    ``"package:path/file.yaml"`` file shipped inside a package."""
    source, where = entry.source, f"recipe {entry.name!r} from plugin {entry.plugin!r}"
    if isinstance(source, Recipe):
        recipe = source.model_copy(deep=True)
    elif isinstance(source, str):
        package, _, path = source.partition(":")
        try:
            file = resources.files(package).joinpath(path)
            text = file.read_text(encoding="utf-8")
        except (ModuleNotFoundError, OSError, UnicodeDecodeError) as exc:
            raise RecipeError(f"{where}: cannot read {source!r} ({type(exc).__name__}: "
                              f"{exc}); the plugin ships it as package:path/file.yaml.") from None
        suffix = "." + path.rsplit(".", 1)[-1] if "." in path else ".yaml"
        recipe = parse_recipe_text(text, f"{where} ({source})", suffix)
    else:
        recipe = Recipe.from_dict(source, where)
    if recipe.name != entry.name:
        raise RecipeError(f"{where}: the recipe inside is named {recipe.name!r}; a registered "
                          "recipe's name and its 'name:' agree.")
    return as_meant_by(recipe, entry.plugin)


def as_meant_by(recipe: Recipe, plugin: str) -> Recipe:
    """``recipe`` as ``plugin`` (whose recipe, or whose format's mapping, it is) means
    it: a name that plugin's distribution registered means that component, even where
    another plugin took the plain name since (zoo's own recipes and formats mean zoo's
    components; an older plugin's recipe, its own)."""
    own = {slot: ref.model_copy(update={"name": registry.own_name(plugin, ref.name)})
           for slot, ref in recipe.components.items()}
    arch = recipe.architecture.model_copy(
        update={"name": registry.own_name(plugin, recipe.architecture.name)})
    return recipe.model_copy(update={"components": own, "architecture": arch})


def list_recipes(pattern: str = "*", *, pretrained: bool = False) -> list[str]:
    """Names of the named recipes (the built-in ones and those plugins ship) matching
    ``pattern`` (fnmatch), naturally sorted; with ``pretrained=True`` only those with
    published weights."""
    names = [entry.name for entry in registry.recipes(pattern)]
    if pretrained:
        names = [n for n in names if catalogue_recipe(n).weights is not None]
    return names


def recipe_plugin(name: str) -> str:
    """The plugin that ships the named recipe (``recipes`` for zoo's own)."""
    return registry.recipe(name).plugin


def catalogue_recipe(name: str | os.PathLike[str] | Recipe) -> Recipe:
    """The catalogue's recipe: a named one (built-in or from a plugin) or one from a
    ``.yaml``/``.json`` path; a :class:`Recipe` is copied. Nothing here reaches the
    network: ``zoo.get_recipe`` (:func:`zoo.builder.get_recipe`, one layer up) also reads
    saved models (``hf-hub:``, ``local-dir:``), and is the one users call."""
    if isinstance(name, Recipe):
        return name.model_copy(deep=True)
    text = os.fspath(name)
    if text.endswith(RECIPE_SUFFIXES) or os.sep in text:
        return load_recipe(text)
    return _read_source(registry.recipe(text))


def missing_requirements(recipe: Recipe) -> list[str]:
    """The distributions in the recipe's ``requires`` that are not installed."""
    missing = []
    for dist in recipe.requires:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    return missing


def _base_recipe(name: str, source: str, relative_to: Path | None) -> Recipe:
    """The recipe a ``base:`` names: a recipe file (relative to ``relative_to``) or a
    named recipe."""
    if name.endswith(RECIPE_SUFFIXES) or "/" in name:
        path = Path(name)
        if not path.is_absolute() and relative_to is not None:
            path = relative_to / path
        return load_recipe(path)
    try:
        return _read_source(registry.recipe(name))
    except UnknownNameError as exc:
        raise RecipeError(f"{source}: base {name!r} is neither a named recipe nor a recipe "
                          f"file. {exc}") from None
