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
from .version import __version__

_LAZY = {
    "build": "zoo.builder",
    "footprint": "zoo.builder",
    "get_recipe": "zoo.builder",
    "load_artifact": "zoo.builder",
    "Recipe": "zoo.recipe",
    "ComponentRef": "zoo.recipe",
    "list_recipes": "zoo.recipe",
    "load_recipe": "zoo.recipe",
    "save_recipe": "zoo.recipe",
    "resolve": "zoo.resolver",
    "register_plugin": "zoo.registry",
    "Component": "zoo.registry",
    "list_plugins": "zoo.registry",
    "list_components": "zoo.registry",
    "get_component": "zoo.registry",
    "register_component": "zoo.registry",
    "list_families": "zoo.registry",
    "convert_timm_vit": "zoo.foreign",
    "save_pretrained": "zoo.saving",
    "push_to_hub": "zoo.saving",
    "ArtifactError": "zoo.errors",
    "MissingPluginError": "zoo.errors",
    "train": "zoo.training.loop",
    "get_train_recipe": "zoo.training.config",
    "list_train_recipes": "zoo.training.config",
    "TrainRecipe": "zoo.training.config",
    "generate": "zoo.decoding",
    "stream": "zoo.decoding",
    "complete": "zoo.decoding.text",
    "translate": "zoo.decoding.text",
    "load": "zoo.loading",
    "embed": "zoo.embedding",
    "cosine": "zoo.embedding",
    "rerank": "zoo.reranking",
    "classify_image": "zoo.classifying",
    "stream_text": "zoo.decoding.text",
    "chat": "zoo.decoding.chat",
    "stream_chat": "zoo.decoding.chat",
    "GenerationSettings": "zoo.decoding",
    "quantize": "zoo.quantization",
    "KVCache": "zoo.cache",
    "DecoderCache": "zoo.cache",
    "ZooError": "zoo.errors",
    "RecipeError": "zoo.errors",
    "CapabilityError": "zoo.errors",
    "UnknownNameError": "zoo.errors",
    "DuplicateComponentError": "zoo.errors",
    "MemoryBudgetError": "zoo.errors",
    "PluginError": "zoo.errors",
    "CheckpointError": "zoo.errors",
    "TrainingError": "zoo.errors",
    "FormatError": "zoo.errors",
    "SettingError": "zoo.errors",
}

__all__ = ["hookimpl", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    """The public names, each imported from its module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names and the lazily loaded public ones."""
    return sorted(set(globals()) | set(_LAZY))
