"""The hooks a zoo plugin may implement.

Each component hook receives a ``register`` callback bound to one family::

    register(name, target, *, description="", capabilities=None, override=False,
             former_names=())

``target`` is a class (or builder) or a ``"module:attribute"`` string imported
on first use; pass strings to keep ``import`` of your plugin free of torch.
``register_recipes`` receives ``register(name, recipe, *, override=False)``, where
``recipe`` is a mapping, a ``zoo.Recipe`` or ``"package:path/file.yaml"`` (a file
shipped inside a package, read when the recipe is first asked for).

Every hook is ``register_`` and the plural of what it registers. An older name is
still called, with a ``DeprecationWarning`` (pointing at the plugin's function) that
names the new one: see :data:`DEPRECATED`.
"""

from __future__ import annotations

import pluggy

from .deprecations import removal

hookspec = pluggy.HookspecMarker("zoo")
hookimpl = pluggy.HookimplMarker("zoo")


@hookspec
def register_attentions(register):
    """Register attention mechanisms (family ``attention``)."""


@hookspec
def register_kernels(register):
    """Register attention kernels (family ``kernel``)."""


@hookspec
def register_positionals(register):
    """Register positional encodings (family ``positional``)."""


@hookspec
def register_norms(register):
    """Register normalisation layers (family ``norm``)."""


@hookspec
def register_ffns(register):
    """Register feed-forward networks (family ``ffn``)."""


@hookspec
def register_blocks(register):
    """Register Transformer blocks (family ``block``)."""


@hookspec
def register_architectures(register):
    """Register whole-model architectures (family ``architecture``)."""


@hookspec
def register_losses(register):
    """Register training losses (family ``loss``)."""


@hookspec
def register_formats(register):
    """Register readers of foreign model folders (family ``format``)."""


@hookspec
def register_rules(register):
    """Register decoding rules: what a step's scores go through (family ``rule``)."""


@hookspec
def register_tasks(register):
    """Register training tasks (family ``task``)."""


@hookspec
def register_recipes(register):
    """Register named model recipes (``zoo.build(name)``, ``zoo list``)."""


DEPRECATED: dict[str, str] = {"register_attention": "register_attentions"}
"""Hook names of earlier releases, and the name each now has."""


@hookspec(warn_on_impl=DeprecationWarning(
    "the hook register_attention is now named register_attentions; rename the function "
    f"({removal('register_attention')})"))
def register_attention(register):
    """Deprecated: the former name of :func:`register_attentions`."""
