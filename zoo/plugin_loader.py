"""Finding and loading plugins (pluggy, entry-point group ``zoo``).

The manager knows hooks and entry points, not where components go: it is
handed a ``register`` and an ``unregister`` callback (the registry's) and
calls each plugin's hooks with ``register`` bound to one family, as llm's
plugin manager does. It imports nothing of the registry.

Plugins load on the first registry lookup, not on ``import zoo``. Each one is
imported and asked to register on its own: a plugin that raises is recorded
with its error (``zoo plugins`` shows it), its partial registrations are
undone, and the others keep working.

Environment:
  ``ZOO_DISABLE_PLUGIN_AUTOLOAD=1``  load no entry-point plugin (the built-in
  ones included); add plugins with :func:`register_plugin`.
  ``ZOO_PLUGINS=a,b``  load only these entry points (by entry-point name or
  distribution name); set but empty loads none.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import pluggy

from . import hookspecs
from ._text import did_you_mean, quoted
from .errors import PluginError
from .families import FAMILIES

ENTRY_POINT_GROUP = "zoo"


@dataclass
class PluginInfo:
    """What ``zoo plugins`` shows for one plugin."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    registered: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the plugin loaded and registered without an error."""
        return self.error is None


Register = Callable[..., Any]
"""``register(family, name, target, *, plugin, description=, capabilities=, override=, former_names=)``."""
RegisterRecipe = Callable[..., Any]
"""``register_recipe(name, source, *, plugin, override=)``."""
Unregister = Callable[..., None]
"""``unregister(kind, name, plugin)``: undo one registration of ``plugin`` (kind: a
family, or ``recipe``)."""
RECIPE_HOOK = "register_recipes"


class PluginManager:
    """The plugins of one registry: entry points found once, run-time plugins added later.

    ``register`` and ``unregister`` are where components go; a plugin's hooks call
    ``register`` bound to their family and to the plugin's name. With
    ``entry_points=False`` only plugins added by :meth:`register_plugin` are used."""

    def __init__(self, register: Register, unregister: Unregister,
                 register_recipe: RegisterRecipe | None = None, *,
                 entry_points: bool = True) -> None:
        self.pm = pluggy.PluginManager("zoo")
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self._register_component = register
        self._unregister_component = unregister
        self._register_recipe = register_recipe
        self._loaded = not entry_points
        self._loading = False

    # -- loading -------------------------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """Whether the entry-point plugins have been loaded (or are not used)."""
        return self._loaded

    def ensure_loaded(self) -> None:
        """Load the entry-point plugins, once (honouring ``ZOO_DISABLE_PLUGIN_AUTOLOAD`` and
        ``ZOO_PLUGINS``)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            if os.environ.get("ZOO_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0"):
                return
            allow = os.environ.get("ZOO_PLUGINS")
            allowed = None if allow is None else {a.strip() for a in allow.split(",") if a.strip()}
            for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
                dist = ep.dist.name if ep.dist else None
                if allowed is not None and ep.name not in allowed and dist not in allowed:
                    continue
                version = ep.dist.version if ep.dist else None
                name = ep.name
                if name in self.infos:
                    first = self.infos[name]
                    if (first.module, first.distribution) == (ep.value, dist):
                        continue  # the same distribution seen twice on sys.path
                    name = f"{dist}:{ep.name}"  # entry-point names are per distribution
                info = PluginInfo(name, ep.value, dist, version)
                self.infos[name] = info
                try:
                    plugin = ep.load()
                except Exception as exc:
                    info.error = _describe(exc, f"importing {ep.value}")
                    continue
                self._add(plugin, info)
        finally:
            self._loading = False
            self._loaded = True

    def register_plugin(self, plugin: Any, name: str | None = None) -> PluginInfo:
        """Add a plugin object (module, class or instance with hookimpls) at run time."""
        self.ensure_loaded()
        module = getattr(plugin, "__name__", None) or type(plugin).__module__
        name = name or self.pm.get_canonical_name(plugin)
        if name in self.infos and self.infos[name].ok:
            raise ValueError(
                f"A plugin named {name!r} is already registered ({self.infos[name].module}); "
                "pass another name=."
            )
        info = PluginInfo(name, module, *_distribution_of(module))
        self.infos[name] = info
        self._add(plugin, info)
        if info.error:
            raise PluginError(f"Plugin {name!r} failed: {info.error}")
        return info

    def _add(self, plugin: Any, info: PluginInfo) -> None:
        try:
            self.pm.register(plugin, name=info.name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            info.error = _describe_hook_error(exc, plugin)
            return
        hooks = [(family.hook, functools.partial(self._register, info, family.name))
                 for family in FAMILIES.values()]
        family_of = {family.hook: family.name for family in FAMILIES.values()}
        hooks += [(old, functools.partial(self._register, info, family_of[new]))
                  for old, new in hookspecs.DEPRECATED.items()]
        hooks.append((RECIPE_HOOK, functools.partial(self._recipe, info)))
        for hook, register in hooks:
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                try:
                    impl.function(register=register)
                except Exception as exc:
                    info.error = _describe(exc, f"{hook}()")
                    for kind, name in info.registered:
                        self._unregister_component(kind, name, info.name)
                    info.registered.clear()
                    self.pm.unregister(plugin)
                    return

    def _register(self, info: PluginInfo, family: str, name: str, target: Any, **kw: Any):
        component = self._register_component(family, name, target, plugin=info.name, **kw)
        info.registered.append((family, name))
        return component

    def _recipe(self, info: PluginInfo, name: str, recipe: Any, **kw: Any) -> Any:
        if self._register_recipe is None:
            raise PluginError("this registry takes no recipes")
        entry = self._register_recipe(name, recipe, plugin=info.name, **kw)
        info.registered.append(("recipe", name))
        return entry

    def failed(self) -> list[PluginInfo]:
        """The plugins that could not be loaded or registered, with their errors."""
        return [i for i in self.infos.values() if not i.ok]

    def plugin_names(self) -> list[str]:
        """The names of the plugins that loaded without an error."""
        return [n for n, i in self.infos.items() if i.ok]


_OURS = (os.path.dirname(__file__), os.path.dirname(pluggy.__file__),
         os.path.dirname(functools.__file__))


def _describe(exc: BaseException, during: str) -> str:
    """The error with the plugin's own file and line: the last frame of the traceback
    outside zoo, pluggy and the standard library (the last frame when there is none)."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    theirs = [f for f in frames if not f.filename.startswith(_OURS)]
    frame = (theirs or frames or [None])[-1]
    where = f" at {frame.filename}:{frame.lineno}" if frame else ""
    return f"{type(exc).__name__} while {during}: {exc}{where}"


HOOKS = sorted(name for name in vars(hookspecs)
               if name.startswith("register_") and name not in hookspecs.DEPRECATED)
"""The hooks a plugin may implement (their current names)."""


def _describe_hook_error(exc: BaseException, plugin: Any) -> str:
    """pluggy's refusal of a hook implementation, pointing at the plugin's function (not
    at pluggy), with the closest hook name for a misspelt one."""
    match = re.search(r"unknown hook '(\w+)'", str(exc))
    if match is None:
        return _describe(exc, "registering its hooks")
    name = match.group(1)
    hint = did_you_mean(name, HOOKS) or f" The hooks are {quoted(HOOKS)}."
    function = inspect.unwrap(getattr(plugin, name, None) or (lambda: None))
    code = getattr(function, "__code__", None)
    where = f" at {code.co_filename}:{code.co_firstlineno}" if code else ""
    return (f"{type(exc).__name__} while registering its hooks: {name!r} is not a zoo "
            f"hook{where}.{hint}")


def _distribution_of(module: str) -> tuple[str | None, str | None]:
    top = module.split(".")[0]
    dists = metadata.packages_distributions().get(top) or []
    if not dists:
        return None, None
    try:
        return dists[0], metadata.version(dists[0])
    except metadata.PackageNotFoundError:
        return dists[0], None

