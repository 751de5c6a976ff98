"""The ``zoo`` command line. Importing this module imports no torch; commands
that need it import it when they run."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import __version__


def _parse_sets(pairs: list[str]) -> dict[str, Any]:
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"zoo: --set takes key=value (e.g. norm=rmsnorm), got {pair!r}")
        overrides[key] = yaml.safe_load(value)
    return overrides


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_list(args: argparse.Namespace) -> int:
    from .recipe import get_recipe, list_recipes

    names = list_recipes(args.pattern)
    if not names:
        print(f"No recipe matches {args.pattern!r}.", file=sys.stderr)
        return 1
    rows = []
    for name in names:
        recipe = get_recipe(name)
        rows.append([name, recipe.architecture.name, recipe.description.split(":")[0][:70]])
    print(_table(rows, ["recipe", "architecture", "description"]))
    return 0


def cmd_components(args: argparse.Namespace) -> int:
    from .api import list_components, list_families

    families = [args.family] if args.family else [f.name for f in list_families()]
    rows = []
    for family in families:
        for c in list_components(family, args.pattern):
            rows.append([family, c.name, c.plugin, c.capability_summary(), c.description])
    print(_table(rows, ["family", "name", "plugin", "capabilities", "description"]))
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .builder import footprint, format_bytes, memory_available
    from .recipe import dump_recipe, get_recipe
    from .resolver import resolve

    import torch

    resolved = resolve(get_recipe(args.name), _parse_sets(args.set))
    recipe = resolved.recipe
    fp = footprint(resolved)
    print(f"# {recipe.name}: {recipe.description}\n")
    print(dump_recipe(recipe))
    rows = [["architecture", resolved.architecture.name, resolved.architecture.plugin,
             resolved.architecture.description]]
    rows += [[slot, p.component.name, p.component.plugin, p.component.description]
             for slot, p in resolved.parts.items()]
    print(_table(rows, ["slot", "component", "plugin", "description"]))
    print()
    print(f"parameters: {fp.parameters:,}")
    for dtype in (torch.float32, torch.bfloat16):
        size = format_bytes(fp.bytes_in(dtype))
        print(f"weights in {str(dtype).removeprefix('torch.')}: {size}")
    print(f"memory on this machine: {format_bytes(memory_available())}")
    return 0


def cmd_plugins(args: argparse.Namespace) -> int:
    from .plugin_manager import list_plugins

    infos = list_plugins()
    if args.json:
        print(json.dumps([
            {"name": i.name, "module": i.module, "distribution": i.distribution,
             "version": i.version, "registered": [f"{f}:{n}" for f, n in i.registered],
             "error": i.error}
            for i in infos
        ], indent=2))
        return 0
    rows = []
    for i in infos:
        what = i.error and f"FAILED: {i.error}" or ", ".join(f"{f}:{n}" for f, n in i.registered)
        rows.append([i.name, i.distribution or "-", i.version or "-", what or "(nothing)"])
    print(_table(rows, ["plugin", "distribution", "version", "registered"]))
    return 0


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoo",
        description="A plugin-based zoo of Transformer models: list recipes and "
        "components, inspect models, see the installed plugins.",
    )
    parser.add_argument("--version", action="version", version=f"zoo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="list the recipes (named models)")
    p.add_argument("pattern", nargs="?", default="*", help="fnmatch pattern, e.g. 'vit-*'")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("components", help="list registered components by family")
    p.add_argument("family", nargs="?", help="attention, kernel, positional, norm, ffn, block, ...")
    p.add_argument("pattern", nargs="?", default="*")
    p.set_defaults(func=cmd_components)

    p = sub.add_parser("info", help="a recipe: its components, parameters, memory")
    p.add_argument("name", help="recipe name or recipe file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override, e.g. --set norm=rmsnorm --set encoder_layers=3")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("plugins", help="installed plugins: what each registered, or its error")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_plugins)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from .errors import ZooError

    try:
        return args.func(args)
    except ZooError as exc:
        print(f"zoo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
