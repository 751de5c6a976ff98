"""The docs' generated parts: component tables, the recipe table, each family's
capabilities and conformance checks, and the plugin API reference, all written from
the live registry and the code's docstrings; and the articles' experiments, from the
reports ``zoo experiment NAME --out docs/experiments`` wrote.

A generated part sits in the page's source between ``<!-- zoo:KIND [ARG] -->`` and
``<!-- /zoo -->``, so the tables read the same on GitHub as on the built site. The
mkdocs hook rewrites them at every build; ``python docs/hooks.py`` rewrites the
sources (run it after changing a component, a capability or a docstring), and
``python docs/hooks.py --check`` (a test runs it) fails when a source is stale.
The API reference (``api``) is written at build time only: its signatures are
rendered by the installed pydantic and pluggy, which a fresh install may update.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

DOCS = Path(__file__).parent
BLOCK = re.compile(r"(<!-- zoo:(\w+)(?: ([\w.-]+))? -->\n)(.*?)(<!-- /zoo -->)", re.S)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def components(family: str | None = None) -> str:
    """A table of one family's components, or a section per family."""
    import zoo

    families = [family] if family else [f.name for f in zoo.list_families()]
    out = []
    for name in families:
        members = zoo.list_components(name)
        table = ["| name | plugin | capabilities | description |", "|---|---|---|---|"]
        table += [f"| `{c.name}` | {c.plugin} | {_cell(c.capability_summary())} | "
                  f"{_cell(c.description)} |" for c in members]
        if family:
            return "\n".join(table)
        summary = next(f.summary for f in zoo.list_families() if f.name == name)
        hook = next(f.hook for f in zoo.list_families() if f.name == name)
        out.append(f"## {name}\n\n{summary}\n")
        out.append("\n".join(table) if members else
                   f"*No built-in member yet; plugins add them through `{hook}`.*")
        out.append("")
    return "\n".join(out).rstrip()


def recipes(_: str | None = None) -> str:
    """The named recipes with their architecture, plugin and parameter count."""
    import zoo
    from zoo.recipe import recipe_plugin

    rows = ["| recipe | architecture | plugin | parameters | description |",
            "|---|---|---|---|---|"]
    for name in zoo.list_recipes():
        recipe = zoo.get_recipe(name)
        params = zoo.footprint(zoo.resolve(recipe)).parameters
        rows.append(f"| `{name}` | {recipe.architecture.name} | {recipe_plugin(name)} | "
                    f"{params:,} | {_cell(recipe.description)} |")
    return "\n".join(rows)


def capabilities(family: str) -> str:
    """Each capability of a family: its type, its default and what it means."""
    from zoo.families import FAMILIES

    model = FAMILIES[family].capabilities
    rows = ["| capability | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else f"`{field.default!r}`"
        kind = getattr(field.annotation, "__name__", None) or str(field.annotation)
        rows.append(f"| `{name}` | `{_cell(kind.replace('typing.', ''))}` | {default} | "
                    f"{_cell(field.description or '')} |")
    return "\n".join(rows)


def checks(family: str) -> str:
    """The conformance kit's checks of a family: when each applies and what it holds."""
    import zoo.testing

    rows = ["| check | applies when | what it holds |", "|---|---|---|"]
    for check in zoo.testing.iter_checks(family):
        when = f"it claims `{check.claim}`" if check.claim else "always"
        rows.append(f"| `{check.name}` | {when} | {_cell(check.doc)} |")
    return "\n".join(rows)


def api(module_name: str) -> str:
    """A reference of a module's ``__all__``: each name's signature and docstring."""
    import importlib

    module = importlib.import_module(module_name)
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        where = getattr(obj, "__module__", module_name)
        doc = inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            try:
                signature = f"class {name}{inspect.signature(obj)}"
            except (TypeError, ValueError):
                signature = f"class {name}"
        elif callable(obj):
            signature = f"{name}{inspect.signature(obj)}"
        else:
            continue
        out += [f"### `{name}`", "", "```python", signature.replace("'", ""), "```", "",
                f"*from `{where}`*", "", doc, ""]
    return "\n".join(out).rstrip()


def experiment(name: str) -> str:
    """The report ``zoo experiment NAME --out docs/experiments`` wrote, and its figure."""
    report = DOCS / "experiments" / f"{name}.md"
    if not report.exists():
        return (f"*Not run yet: `zoo experiment {name} --out docs/experiments`, then "
                "`python docs/hooks.py`.*")
    text = report.read_text(encoding="utf-8").rstrip()
    return f"{text}\n\n![zoo experiment {name}](experiments/{name}.png)"


KINDS = {"components": components, "recipes": recipes, "capabilities": capabilities,
         "checks": checks, "api": api, "experiment": experiment}
BUILD_ONLY = {"api"}
"""Kinds written only into the built site; the source holds a note."""


def refresh(markdown: str, *, build: bool = True) -> str:
    """The page with every generated block written anew (``build``: for the site)."""
    def fill(match: re.Match) -> str:
        kind, arg = match.group(2), match.group(3)
        if kind in BUILD_ONLY and not build:
            body = (f"*Generated from the docstrings of `{arg}` when the site is built "
                    "(`mkdocs build`).*")
        else:
            body = KINDS[kind](arg)
        return f"{match.group(1)}{body}\n{match.group(5)}"
    return BLOCK.sub(fill, markdown)


def on_page_markdown(markdown, page, config, files):
    """mkdocs hook: the generated blocks as the code says now."""
    return refresh(markdown)


def main(argv: list[str]) -> int:
    """Rewrite the docs' generated blocks (``--check``: only say which are stale)."""
    stale = []
    for path in sorted(DOCS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        new = refresh(text, build=False)
        if new != text:
            stale.append(str(path.relative_to(DOCS.parent)))
            if "--check" not in argv:
                path.write_text(new, encoding="utf-8")
    if stale and "--check" in argv:
        print("stale generated blocks in " + ", ".join(stale) + "; run: python docs/hooks.py",
              file=sys.stderr)
        return 1
    print("rewrote " + ", ".join(stale) if stale else "every generated block is current")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
