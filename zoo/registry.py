"""One registry for every component family.

``registry.register(family, name, target, ...)`` adds a component; ``get`` and
``list`` find them. A target is a class (or builder) or a ``"module:attribute"``
string that is imported on first use, so that plugins register without
importing torch. Names are lower-case with dashes.

A registry owns a :class:`~zoo.plugin_loader.PluginManager` and hands it its
own ``register``: ``Registry()`` starts empty and loads nothing by itself (a
test can fill one by hand); the process-wide ``registry`` loads the entry-point
plugins on its first lookup.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from ._text import (
    validate_plain,
    NAME_RE,
    QUALIFIED_RE,
    RECIPE_NAME_RE,
    closest,
    describe_validation_error,
    did_you_mean,
    natural_key,
    quoted,
    short_repr,
    with_article,
)
from .deprecations import removal
from .errors import DuplicateComponentError, PluginError, RecipeError, UnknownNameError
from .families import FAMILIES, Capabilities, Family
from .plugin_loader import PluginInfo, PluginManager

RUNTIME = "<runtime>"
"""The plugin of components registered by hand (``zoo.register_component``)."""
BUILTIN_DISTRIBUTION = "zoo-transformers"
"""The distribution of zoo's own plugins."""


PREFER_BUILTIN = "ZOO_PREFER_BUILTIN"
"""The environment variable that gives plain names back to zoo's built-ins where an
installed plugin registered the same name (or ``model_type``): ``all`` (or ``1``) for
every name, else names separated by commas (``geglu,m2m_100``)."""
NOTICES = logging.getLogger("zoo.plugin_names")
"""Where the one notice of a process goes that an installed plugin holds a name a
built-in also has (a line on standard error; silence it through :mod:`logging`)."""
NOTICED: set[tuple[str, ...]] = set()
"""What this process has been told (``(family, name, plugin)`` of a shared name,
``("format", model_type, format)`` of a model type): each is said once."""


def prefers_builtin(name: str) -> bool:
    """Whether :data:`PREFER_BUILTIN` gives the plain ``name`` (or ``model_type``) to the
    built-in."""
    given = {part.strip() for part in os.environ.get(PREFER_BUILTIN, "").split(",")}
    return bool(given & {"all", "1", name})


def choose_claim(claims: list[Component], name: str, builtin: Any) -> Component | None:
    """Which of several components claiming one plain name (or one ``model_type``) gets
    it: an installed plugin's over zoo's own (``builtin(plugin)`` tells them apart),
    zoo's own where :func:`prefers_builtin` says so or no other claims it; None where
    two installed plugins claim it (the user chooses)."""
    ours = [c for c in claims if builtin(c.plugin)]
    theirs = [c for c in claims if not builtin(c.plugin)]
    if ours and (not theirs or prefers_builtin(name)):
        return ours[0]
    return theirs[0] if len(theirs) == 1 else None


class PluginNameWarning(UserWarning):
    """No longer issued (an installed plugin now simply wins a name a built-in also has,
    with one notice a process on the ``zoo.plugin_names`` logger); kept so that code that
    filters it still imports."""


class RenamedComponentWarning(DeprecationWarning):
    """A recipe named a component by a name it had before (``former_names``): it still
    resolves, and the warning names the new name to write."""


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
    former_names: tuple[str, ...] = ()
    _loaded: Any = field(default=None, repr=False)

    @property
    def qualified_name(self) -> str:
        """``plugin:name``: this component even where another plugin's takes its name."""
        return f"{self.plugin}:{self.name}"

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
            return validate_plain(model, settings)
        except ValidationError as exc:
            raise RecipeError(
                describe_validation_error(exc, f"settings of {self.family} {self.name!r}", model)
            ) from None

    def build(self, settings: dict[str, Any] | BaseModel | None = None, **context: Any) -> Any:
        """Instantiate: ``target(validated_settings, **context)``."""
        return self.load()(self.validate_settings(settings), **context)


def _caller_origin() -> str:
    """``file:line`` of the code that called ``register`` (for duplicate errors). The
    frames are walked, never ``inspect.stack()``, which reads each frame's source lines:
    that was most of a registry's reload once transformers was imported (seconds)."""
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.endswith(("registry.py", "plugin_loader.py", "functools.py")):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


@dataclass
class RecipeEntry:
    """A named recipe a plugin registered: its source (a mapping, a ``Recipe`` or a
    ``"package:path.yaml"`` file), read by :mod:`zoo.recipe` when first asked for."""

    name: str
    source: Any
    plugin: str
    origin: str


class Registry:
    """All families' components, keyed by family then name, and the plugins that added them.

    With ``entry_points=True`` the installed plugins (entry-point group ``zoo``) load on
    the first lookup; without, only what is registered by hand or through
    ``registry.plugins.register_plugin`` is there."""

    def __init__(self, *, entry_points: bool = False) -> None:
        self._components: dict[str, dict[str, Component]] = {f: {} for f in FAMILIES}
        self._qualified: dict[str, dict[str, Component]] = {f: {} for f in FAMILIES}
        """Every plugin's components by ``plugin:name``, those whose plain name another
        plugin's component holds among them."""
        self._former: dict[str, dict[str, Component]] = {f: {} for f in FAMILIES}
        """Components by a name they had in an earlier release (``former_names``)."""
        self._ambiguous: dict[str, dict[str, list[Component]]] = {f: {} for f in FAMILIES}
        """Plain names that two installed plugins (neither zoo's own) register: a lookup
        of the plain name is refused, naming both."""
        self._recipes: dict[str, RecipeEntry] = {}
        self._entry_points = entry_points
        self.plugins = self._new_manager()

    def _new_manager(self) -> PluginManager:
        return PluginManager(self.register, self.unregister, self.register_recipe,
                             entry_points=self._entry_points)

    def _ensure_loaded(self) -> None:
        """Load the entry-point plugins on the first lookup (when this registry uses them)."""
        if not self.plugins.loaded:
            self.plugins.ensure_loaded()
            if self.plugins.loaded:
                self._settle()

    def _settle(self) -> None:
        """Give each shared plain name its holder now that every plugin is known (and so
        which are zoo's own), and say so once."""
        for family in FAMILIES:
            for name in {c.name for c in self._qualified[family].values()}:
                if len(self._claims(family, name)) > 1:
                    self._share(family, name)
        self.notice_shared()

    def ensure_loaded(self) -> None:
        """Load the entry-point plugins now, if they are not loaded yet."""
        self._ensure_loaded()

    def plugin_names(self) -> list[str]:
        """The plugins that loaded without an error."""
        return self.plugins.plugin_names()

    def reset(self) -> None:
        """Forget every component and plugin; the entry points load again on next use."""
        for members in (*self._components.values(), *self._qualified.values(),
                        *self._former.values(), *self._ambiguous.values()):
            members.clear()
        self._recipes.clear()
        self.plugins = self._new_manager()

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
        plugin: str = RUNTIME,
        former_names: tuple[str, ...] | list[str] = (),
    ) -> Component:
        """Add a component; a name already taken raises unless ``override=True``, or
        unless another plugin took it: then both stay reachable as ``plugin:name``, the
        plain name is the built-in's (or, between two other plugins, the first's), and a
        :class:`PluginNameWarning` names both. A release of zoo that adds a built-in of a
        name a plugin already uses so never stops that plugin from loading.

        ``former_names`` are the names the component had in earlier releases: a recipe
        (or a saved model's config) that writes one still resolves to it, with a
        :class:`RenamedComponentWarning` naming the new name, unless a component of
        that name is registered now (a current name always wins)."""
        fam = self._family(family)
        former = (former_names,) if isinstance(former_names, str) else tuple(former_names)
        for given in (name, *former):
            if not isinstance(given, str) or not NAME_RE.match(given):
                raise ValueError(
                    f"Invalid {family} name {given!r}: names are lower-case letters, digits "
                    "and dashes, starting with a letter or digit (e.g. 'sliding-window')."
                )
        if name in former:
            raise ValueError(f"{family} {name!r}: former_names lists the name itself.")
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
                f"{family} {name!r}: capabilities must be "
                f"{with_article(fam.capabilities.__name__)} "
                f"(or a dict of its fields), got {type(capabilities).__name__}."
            )
        origin = _caller_origin()
        existing = self._components[family].get(name)
        shared = (existing is not None and not override and plugin != existing.plugin
                  and RUNTIME not in (plugin, existing.plugin))
        if existing is not None and not override and not shared:
            raise DuplicateComponentError(
                f"{family} {name!r} is already registered by plugin {existing.plugin!r} "
                f"(at {existing.origin}); the second registration came from plugin {plugin!r} "
                f"(at {origin}). Pick another name, or pass override=True to replace it."
            )
        if not description:
            loaded = target if not isinstance(target, str) else None
            doc = inspect.getdoc(loaded) if loaded is not None else None
            description = doc.splitlines()[0] if doc else ""
        component = Component(family, name, target, description, capabilities, plugin, origin,
                              former)
        for old in former:
            self._former[family].setdefault(old, component)
        if plugin != RUNTIME:
            self._qualified[family][component.qualified_name] = component
        if shared:
            self._share(family, name)
        else:
            self._components[family][name] = component
        return component

    def _distribution(self, plugin: str) -> str | None:
        info = self.plugins.infos.get(plugin)
        return info.distribution if info is not None else None

    def builtin(self, plugin: str) -> bool:
        """Whether ``plugin`` is one of zoo's own (distribution ``zoo-transformers``)."""
        return self._distribution(plugin) == BUILTIN_DISTRIBUTION

    def _share(self, family: str, name: str) -> None:
        """One plain name, several plugins: an installed plugin's wins over the built-in
        (the user installed it for that name), unless :data:`PREFER_BUILTIN` says
        otherwise; two installed plugins' leave the plain name to none of them
        (:meth:`get` names both and the fix). Every one stays ``plugin:name``."""
        claims = self._claims(family, name)
        plain = choose_claim(claims, name, self.builtin)
        self._ambiguous[family].pop(name, None)
        if plain is None:
            self._ambiguous[family][name] = claims
            plain = claims[0]
        self._components[family][name] = plain

    def _claims(self, family: str, name: str) -> list[Component]:
        return [c for c in self._qualified[family].values() if c.name == name]

    def notice_shared(self) -> None:
        """Say once a process, in one line on the ``zoo.plugin_names`` logger, which names an
        installed plugin holds in place of a built-in (and which two plugins claim)."""
        told = []
        for family in FAMILIES:
            for name, plain in self._components[family].items():
                claims = self._claims(family, name)
                if len(claims) < 2:
                    continue
                key = (family, name, plain.plugin)
                if key in NOTICED:
                    continue
                NOTICED.add(key)
                others = ", ".join(c.qualified_name for c in claims if c is not plain)
                if name in self._ambiguous[family]:
                    told.append(f"{family} {name!r} is claimed by installed plugins "
                                f"({', '.join(c.qualified_name for c in claims)}): write one")
                else:
                    told.append(f"{family} {name!r} means plugin {plain.plugin}'s (also: "
                                f"{others})")
        if told:
            NOTICES.warning("zoo: %s. A recipe reaches any of them as PLUGIN:NAME; %s=NAME "
                            "gives a name back to zoo's built-in (docs/compatibility.md).",
                            "; ".join(told), PREFER_BUILTIN)

    def unregister(self, family: str, name: str, plugin: str | None = None) -> None:
        """Remove a component (``plugin``'s, when given: another plugin's of the same name
        then takes the plain name back), or with ``family="recipe"`` a recipe (nothing
        happens when it is not there)."""
        if family == "recipe":
            self._recipes.pop(name, None)
            return
        self._family(family)
        members, qualified = self._components[family], self._qualified[family]
        former = self._former[family]
        for old in [k for k, c in former.items()
                    if c.name == name and (plugin is None or c.plugin == plugin)]:
            del former[old]
        if plugin is None:
            gone = members.pop(name, None)
            if gone is not None:
                qualified.pop(gone.qualified_name, None)
            return
        qualified.pop(f"{plugin}:{name}", None)
        self._ambiguous[family].pop(name, None)
        if name in members and members[name].plugin == plugin:
            del members[name]
        left = self._claims(family, name)
        if len(left) > 1:
            self._share(family, name)
        elif left:
            members[name] = left[0]

    def register_recipe(self, name: str, source: Any, *, plugin: str = "<runtime>",
                        override: bool = False) -> RecipeEntry:
        """Add a named recipe; its source is read (and validated) when first asked for."""
        if not isinstance(name, str) or not RECIPE_NAME_RE.match(name):
            raise ValueError(f"Invalid recipe name {short_repr(name, 80)}: use lower-case "
                             "letters, digits, dots, dashes and underscores (e.g. "
                             "'transformer-mqa-tiny').")
        if isinstance(source, str) and ":" not in source:
            raise ValueError(f"recipe {name!r}: a file is given as 'package:path/file.yaml', "
                             f"got {source!r}.")
        origin = _caller_origin()
        existing = self._recipes.get(name)
        if existing is not None and not override:
            raise DuplicateComponentError(
                f"recipe {name!r} is already registered by plugin {existing.plugin!r} (at "
                f"{existing.origin}); the second registration came from plugin {plugin!r} "
                f"(at {origin}). Pick another name, or pass override=True to replace it.")
        entry = RecipeEntry(name, source, plugin, origin)
        self._recipes[name] = entry
        return entry

    def recipe(self, name: str) -> RecipeEntry:
        """A registered recipe; an unknown name raises with the closest names."""
        self._ensure_loaded()
        try:
            return self._recipes[name]
        except KeyError:
            pass
        raise UnknownNameError(
            f"Unknown recipe {name!r}.{did_you_mean(name, self._recipes)} Recipes: "
            f"{quoted(sorted(self._recipes, key=natural_key))}. A recipe file is given by its "
            f"path (ending in .yaml or .json).{self._failed_plugins()}")

    def recipes(self, pattern: str = "*") -> list[RecipeEntry]:
        """The registered recipes whose names match ``pattern``, naturally sorted."""
        self._ensure_loaded()
        names = [n for n in self._recipes if fnmatch.fnmatchcase(n, pattern)]
        return [self._recipes[n] for n in sorted(names, key=natural_key)]

    def _failed_plugins(self) -> str:
        """A sentence naming the plugins that failed to load, when any did: what the user
        asked for may be theirs."""
        failed = self.plugins.failed()
        if not failed:
            return ""
        listed = "; ".join(f"{i.name!r} ({i.error})" for i in failed)
        return (f" {len(failed)} plugin{'s' if len(failed) > 1 else ''} failed to load, and "
                f"it may come from {'one of them' if len(failed) > 1 else 'it'}: {listed} "
                "(see zoo plugins).")

    # -- lookup ------------------------------------------------------------------------------
    def get(self, family: str, name: str) -> Component:
        """One component; an unknown name raises with the closest names and the plugins."""
        self._family(family)
        self._ensure_loaded()
        members = self._components[family]
        claims = self._ambiguous[family].get(name) if isinstance(name, str) else None
        if claims:
            raise UnknownNameError(
                f"{family} {name!r} is registered by {len(claims)} installed plugins: "
                f"{quoted([c.qualified_name for c in claims])}, and zoo cannot know which "
                "one you mean. Write that name in the recipe (or override), or uninstall "
                "one of the plugins (docs/compatibility.md).")
        try:
            return members[name]
        except KeyError:
            pass
        if isinstance(name, str) and name in self._qualified[family]:
            return self._qualified[family][name]
        renamed = self._renamed(family, name)
        if renamed is not None:
            return renamed
        hint = did_you_mean(name, members)
        if isinstance(name, str) and QUALIFIED_RE.match(name):
            plugin = name.split(":", 1)[0]
            if plugin not in self.plugins.infos:
                hint += (f" {plugin!r} is no installed plugin: recipes name registered "
                         "components, never Python paths or code.")
            hint += (f" A qualified name is PLUGIN:NAME; {family} components by plugin: "
                     f"{quoted(sorted(self._qualified[family], key=natural_key))}.")
        elif isinstance(name, str) and (":" in name or "." in name or "/" in name):
            hint += " Recipes name registered components, never Python paths or files."
        raise UnknownNameError(
            f"Unknown {family} {name!r}.{hint} Known {family} components: "
            f"{quoted(sorted(members, key=natural_key))}. Installed plugins: "
            f"{quoted(self.plugin_names())}. A component from another package appears "
            f"once that package is installed (see `zoo plugins`).{self._failed_plugins()}"
        )

    def _renamed(self, family: str, name: Any) -> Component | None:
        """The component that had ``name`` (or ``plugin:name``) before, with a warning."""
        if not isinstance(name, str):
            return None
        plugin, _, plain = name.rpartition(":")
        component = self._former[family].get(plain)
        if component is None or (plugin and plugin != component.plugin):
            return None
        new = component.qualified_name if plugin else component.name
        warnings.warn(RenamedComponentWarning(
            f"{family} {name!r} is now named {new!r} (plugin {component.plugin!r}); the old "
            f"name still works: write {new!r} ({removal('former-component-names')})."),
            stacklevel=3)
        return component

    def list(self, family: str, pattern: str = "*") -> list[Component]:
        """The members of ``family`` matching ``pattern`` (fnmatch), naturally sorted."""
        self._family(family)
        self._ensure_loaded()
        names = [n for n in self._components[family] if fnmatch.fnmatchcase(n, pattern)]
        return [self._components[family][n] for n in sorted(names, key=natural_key)]

    def names(self, family: str) -> list[str]:
        """The names of the members of ``family``, naturally sorted."""
        return [c.name for c in self.list(family)]

    def _family(self, family: str) -> Family:
        try:
            return FAMILIES[family]
        except KeyError:
            raise UnknownNameError(
                f"Unknown family {family!r}.{did_you_mean(family, FAMILIES)} "
                f"Families: {quoted(FAMILIES)}."
            ) from None

    def qualified(self, family: str) -> list[Component]:
        """Every plugin's members of ``family``, those another plugin's shadows included,
        by qualified name (``plugin:name``)."""
        self._family(family)
        self._ensure_loaded()
        return [self._qualified[family][k] for k in sorted(self._qualified[family],
                                                            key=natural_key)]

    def registrants(self, family: str, name: str) -> list[Component]:
        """Every plugin's ``family`` member of the plain ``name``: more than one where a
        name is shared (the plain name then reaches one of them, ``plugin:name`` each)."""
        self._family(family)
        self._ensure_loaded()
        return self._claims(family, name)

    def own_name(self, plugin: str, name: str) -> str:
        """``name`` as a recipe of ``plugin`` means it: ``plugin:name`` (or the name in
        another plugin of the same distribution: zoo's recipes and formats mean zoo's
        components) where that plugin registered a component of that name whose plain
        name another plugin's now reaches (in exactly one family), else ``name``
        unchanged."""
        if ":" in name:
            return name
        self._ensure_loaded()
        dist = self._distribution(plugin)
        mine = [c for f in FAMILIES for c in self._claims(f, name)
                if (c.plugin == plugin or (dist is not None
                                           and self._distribution(c.plugin) == dist))
                and (self._components[f].get(name) is not c
                     or name in self._ambiguous[f])]
        return mine[0].qualified_name if len(mine) == 1 else name

    def __contains__(self, key: tuple[str, str]) -> bool:
        family, name = key
        self._ensure_loaded()
        return (name in self._components.get(family, {}) or name in self._qualified.get(family, {})
                or name in self._former.get(family, {}))


registry = Registry(entry_points=True)
"""The process-wide registry that the installed plugins fill."""


# -- the public functions (``zoo.list_components`` and friends) ----------------------------------
def list_families() -> list[Family]:
    """The component families, with their call contracts."""
    return list(FAMILIES.values())


def list_components(family: str, pattern: str = "*") -> list[Component]:
    """Components of ``family`` whose names match ``pattern`` (fnmatch), naturally sorted.

    Each has ``name``, ``plugin``, ``capabilities`` and ``description``.
    """
    return registry.list(family, pattern)


def get_component(family: str, name: str) -> Component:
    """One component; an unknown name raises with the closest names and the plugins."""
    return registry.get(family, name)


def register_component(
    family: str, name: str, target: Any, *, description: str = "",
    capabilities: Any = None, override: bool = False,
) -> Component:
    """Register one component directly, outside any plugin."""
    registry.ensure_loaded()
    return registry.register(
        family, name, target, description=description, capabilities=capabilities,
        override=override, plugin="<runtime>",
    )


def register_plugin(plugin: Any, name: str | None = None) -> PluginInfo:
    """Add a plugin object (a module, class or instance with ``zoo.hookimpl`` hooks) at run
    time; a plugin that fails raises :class:`~zoo.PluginError` and registers nothing."""
    registry.ensure_loaded()
    info = registry.plugins.register_plugin(plugin, name)
    registry.notice_shared()
    return info


def list_plugins() -> list[PluginInfo]:
    """Every plugin found (entry points and run-time ones), with what each registered or
    the error that stopped it."""
    registry.ensure_loaded()
    return list(registry.plugins.infos.values())


__all__ = ["Component", "Registry", "PluginNameWarning", "PREFER_BUILTIN", "NOTICED", "choose_claim", "RenamedComponentWarning", "registry", "natural_key", "closest",
           "describe_validation_error", "list_families", "list_components", "get_component",
           "register_component", "register_plugin", "list_plugins"]
