"""zoo: a plugin-based zoo of Transformer models in PyTorch.

>>> import zoo
>>> zoo.list_recipes("vit-tiny-*")
['vit-tiny-patch4-28', 'vit-tiny-patch16-224']

Attributes load on first use, so ``import zoo`` (and ``zoo --help``) stays free
of torch until a model is built.
"""

from __future__ import annotations

import importlib
from typing import Any

from .hookspecs import hookimpl

__version__ = "0.1.0"

_LAZY = {
    "build": "zoo.builder",
    "footprint": "zoo.builder",
    "Recipe": "zoo.recipe",
    "ComponentRef": "zoo.recipe",
    "list_recipes": "zoo.recipe",
    "get_recipe": "zoo.recipe",
    "load_recipe": "zoo.recipe",
    "save_recipe": "zoo.recipe",
    "resolve": "zoo.resolver",
    "register_plugin": "zoo.plugin_manager",
    "list_plugins": "zoo.plugin_manager",
    "list_components": "zoo.api",
    "get_component": "zoo.api",
    "register_component": "zoo.api",
    "list_families": "zoo.api",
    "convert_timm_vit": "zoo.convert",
    "save_pretrained": "zoo.artifact",
    "load_artifact": "zoo.artifact",
    "ArtifactError": "zoo.errors",
    "MissingPluginError": "zoo.errors",
    "push_to_hub": "zoo.hub",
    "train": "zoo.training.loop",
    "get_train_recipe": "zoo.training.config",
    "list_train_recipes": "zoo.training.config",
    "TrainRecipe": "zoo.training.config",
    "generate": "zoo.decoding",
    "KVCache": "zoo.cache",
    "DecoderCache": "zoo.cache",
    "ZooError": "zoo.errors",
    "RecipeError": "zoo.errors",
    "CapabilityError": "zoo.errors",
    "UnknownNameError": "zoo.errors",
    "DuplicateComponentError": "zoo.errors",
    "MemoryBudgetError": "zoo.errors",
    "PluginError": "zoo.errors",
}

__all__ = ["hookimpl", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
