"""One registry for every component family.

``registry.register(family, name, target, ...)`` adds a component; ``get``,
``list`` and ``build`` find and make them. A target is a class (or builder) or
a ``"module:attribute"`` string that is imported on first use, so that plugins
register without importing torch. Names are lower-case with dashes.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ._text import closest, did_you_mean, quoted
from .errors import DuplicateComponentError, PluginError, RecipeError, UnknownNameError
from .families import FAMILIES, Capabilities

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def natural_key(text: str) -> list[Any]:
    """Sort key that orders ``vit-2`` before ``vit-10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


@dataclass
class Component:
    """A registered member of a family."""

    family: str
    name: str
    target: Any
    description: str
    capabilities: Capabilities
    plugin: str
    origin: str
    _loaded: Any = field(default=None, repr=False)

    def load(self) -> Any:
        """The class or builder, importing it on first use."""
        if self._loaded is None:
            target = self.target
            if isinstance(target, str):
                module_name, _, attr = target.partition(":")
                try:
                    target = getattr(importlib.import_module(module_name), attr)
                except Exception as exc:  # report which plugin's target failed
                    raise PluginError(
                        f"{self.family} {self.name!r} from plugin {self.plugin!r} could not "
                        f"import its implementation {self.target!r}: {type(exc).__name__}: {exc}"
                    ) from exc
            self._loaded = target
        return self._loaded

    def capability_summary(self) -> str:
        """The capabilities in one line: true flags by name, other values as key=value."""
        shown = []
        for key, value in self.capabilities.model_dump().items():
            if value is True:
                shown.append(key)
            elif value not in (False, None, (), []):
                text = ",".join(value) if isinstance(value, (list, tuple)) else value
                shown.append(f"{key}={text}")
        return " ".join(shown) or "-"

    @property
    def settings_model(self) -> type[BaseModel] | None:
        """The pydantic model of this component's settings (``cls.Settings``)."""
        return getattr(self.load(), "Settings", None)

    def validate_settings(self, settings: dict[str, Any] | BaseModel | None) -> BaseModel | None:
        """Settings checked against the component's model; errors name the keys."""
        model = self.settings_model
        if isinstance(settings, BaseModel):
            return settings
        settings = dict(settings or {})
        if model is None:
            if settings:
                raise RecipeError(
                    f"{self.family} {self.name!r} takes no settings, got {quoted(settings)}."
                )
            return None
        try:
            return model.model_validate(settings)
        except ValidationError as exc:
            raise RecipeError(
                describe_validation_error(exc, f"settings of {self.family} {self.name!r}", model)
            ) from None

    def build(self, settings: dict[str, Any] | BaseModel | None = None, **context: Any) -> Any:
        """Instantiate: ``target(validated_settings, **context)``."""
        return self.load()(self.validate_settings(settings), **context)


def describe_validation_error(exc: ValidationError, where: str, model: type[BaseModel]) -> str:
    """One readable message for a pydantic error, listing valid keys for unknown ones."""
    lines = []
    valid = list(model.model_fields)
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            key = str(err["loc"][-1])
            lines.append(
                f"unknown key {key!r}.{did_you_mean(key, valid)} Valid keys: {quoted(valid)}"
            )
        elif err["type"] == "missing":
            lines.append(f"missing required key {loc!r}")
        else:
            lines.append(f"{loc or 'value'}: {err['msg']} (got {err.get('input')!r})")
    return f"Invalid {where}: " + "; ".join(lines)


def _caller_origin() -> str:
    """``file:line`` of the code that called ``register`` (for duplicate errors)."""
    for frame in inspect.stack()[2:]:
        if not frame.filename.endswith(("registry.py", "plugin_manager.py", "functools.py")):
            return f"{frame.filename}:{frame.lineno}"
    return "<unknown>"


class Registry:
    """All families' components, keyed by family then name."""

    def __init__(self) -> None:
        self._components: dict[str, dict[str, Component]] = {f: {} for f in FAMILIES}

    def _ensure_loaded(self) -> None:
        """Load the plugins (entry points) on first lookup."""
        from . import plugin_manager

        plugin_manager.get_manager().ensure_loaded()

    def plugin_names(self) -> list[str]:
        from . import plugin_manager

        return plugin_manager.get_manager().plugin_names()

    # -- registration ----------------------------------------------------------------------
    def register(
        self,
        family: str,
        name: str,
        target: Any,
        *,
        description: str = "",
        capabilities: Capabilities | dict[str, Any] | None = None,
        override: bool = False,
        plugin: str = "<runtime>",
    ) -> Component:
        fam = self._family(family)
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ValueError(
                f"Invalid {family} name {name!r}: names are lower-case letters, digits and "
                "dashes, starting with a letter or digit (e.g. 'sliding-window')."
            )
        if isinstance(target, str) and ":" not in target:
            raise ValueError(
                f"{family} {name!r}: a string target must be 'module:attribute', got {target!r}."
            )
        if capabilities is None or isinstance(capabilities, dict):
            try:
                capabilities = fam.capabilities(**(capabilities or {}))
            except ValidationError as exc:
                raise ValueError(
                    describe_validation_error(
                        exc, f"capabilities of {family} {name!r}", fam.capabilities
                    )
                ) from None
        elif not isinstance(capabilities, fam.capabilities):
            raise TypeError(
                f"{family} {name!r}: capabilities must be a {fam.capabilities.__name__} "
                f"(or a dict of its fields), got {type(capabilities).__name__}."
            )
        origin = _caller_origin()
        existing = self._components[family].get(name)
        if existing is not None and not override:
            raise DuplicateComponentError(
                f"{family} {name!r} is already registered by plugin {existing.plugin!r} "
                f"(at {existing.origin}); the second registration came from plugin {plugin!r} "
                f"(at {origin}). Pick another name, or pass override=True to replace it."
            )
        if not description:
            loaded = target if not isinstance(target, str) else None
            doc = inspect.getdoc(loaded) if loaded is not None else None
            description = doc.splitlines()[0] if doc else ""
        component = Component(family, name, target, description, capabilities, plugin, origin)
        self._components[family][name] = component
        return component

    def unregister(self, family: str, name: str) -> None:
        self._family(family)
        self._components[family].pop(name, None)

    # -- lookup ------------------------------------------------------------------------------
    def get(self, family: str, name: str) -> Component:
        self._family(family)
        self._ensure_loaded()
        members = self._components[family]
        try:
            return members[name]
        except KeyError:
            pass
        hint = did_you_mean(name, members)
        if isinstance(name, str) and (":" in name or "." in name or "/" in name):
            hint += " Recipes name registered components, never Python paths or files."
        raise UnknownNameError(
            f"Unknown {family} {name!r}.{hint} Known {family} components: "
            f"{quoted(sorted(members, key=natural_key))}. Installed plugins: "
            f"{quoted(self.plugin_names())}. A component from another package appears "
            "once that package is installed (see `zoo plugins`)."
        )

    def list(self, family: str, pattern: str = "*") -> list[Component]:
        self._family(family)
        self._ensure_loaded()
        names = [n for n in self._components[family] if fnmatch.fnmatchcase(n, pattern)]
        return [self._components[family][n] for n in sorted(names, key=natural_key)]

    def names(self, family: str) -> list[str]:
        return [c.name for c in self.list(family)]

    def build(self, family: str, name: str, settings: Any = None, **context: Any) -> Any:
        return self.get(family, name).build(settings, **context)

    def _family(self, family: str):
        try:
            return FAMILIES[family]
        except KeyError:
            raise UnknownNameError(
                f"Unknown family {family!r}.{did_you_mean(family, FAMILIES)} "
                f"Families: {quoted(FAMILIES)}."
            ) from None

    def __contains__(self, key: tuple[str, str]) -> bool:
        family, name = key
        self._ensure_loaded()
        return name in self._components.get(family, {})


registry = Registry()
"""The process-wide registry that plugins fill."""

__all__ = ["Component", "Registry", "registry", "natural_key", "closest"]
