"""zoo's own named recipes (the YAML files of ``zoo.recipes``), registered through the
same ``register_recipes`` hook a third-party plugin ships its recipes with."""

from importlib import resources

from zoo import hookimpl

SUFFIXES = (".yaml", ".yml", ".json")


@hookimpl
def register_recipes(register):
    for entry in sorted(resources.files("zoo.recipes").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(SUFFIXES):
            register(entry.name.rsplit(".", 1)[0], f"zoo.recipes:{entry.name}")
