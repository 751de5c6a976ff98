"""The plugin API's former name: ``zoo.plugin`` is now :mod:`zoo.plugin_api`.

Every name of :mod:`zoo.plugin_api` still imports from here, with a
``DeprecationWarning`` at the importing line that names the new module; this
module goes in a later release. (The old name read as one letter off the
package of zoo's own plugins.)
"""

from __future__ import annotations

import importlib
from typing import Any

from .deprecations import warn_deprecated

__all__ = list(importlib.import_module("zoo.plugin_api").__all__)


def __getattr__(name: str) -> Any:
    api = importlib.import_module("zoo.plugin_api")
    if name not in api.__all__:
        raise AttributeError(f"module 'zoo.plugin' (now 'zoo.plugin_api') has no attribute "
                             f"{name!r}")
    warn_deprecated("zoo.plugin", f"zoo.plugin is now zoo.plugin_api: write `from "
                    f"zoo.plugin_api import {name}`")
    return getattr(api, name)
