"""The docs' generated parts: component tables, the recipe table, each family's
capabilities and conformance checks, and the plugin API reference, all written from
the live registry and the code's docstrings; and the articles' experiments, from the
reports ``zoo experiment NAME --out docs/experiments`` wrote.

A generated part sits in the page's source between ``<!-- zoo:KIND [ARG] -->`` and
``<!-- /zoo -->``, so the tables read the same on GitHub as on the built site. The
mkdocs hook rewrites them at every build; ``python docs/hooks.py`` rewrites the
sources (run it after changing a component, a capability or a docstring), and
``python docs/hooks.py --check`` (a test runs it) fails when a source is stale.
The API reference (``api``) renders a pydantic model's fields itself (pydantic's
own signatures change between releases), so it too is committed and checked.
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


PLUGIN_AUTHORS_MEET = ["Recipe", "ComponentRef", "Component", "build", "resolve", "get_recipe",
                       "list_recipes", "register_component", "register_plugin", "get_component",
                       "list_components", "list_families", "list_plugins"]
"""The names of ``zoo`` itself that a plugin author meets (``api zoo``)."""
HOOKS_OF = {"MultiHeadAttention": ["_attend", "_dense", "_attend_grouped", "forward"],
            "InsideAttention": ["forward", "content_query"]}
"""Underscored methods that are part of a class's contract: a subclass writes or calls them."""


def _signature(obj, name: str) -> str:
    try:
        text = f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        text = f"{name}(...)"
    return text.replace("'\"", "").replace("\"'", "")


def _fields(model) -> list[str]:
    """A pydantic model's fields as a table: stable across pydantic releases (its own
    ``__init__`` signature is not)."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field_name, field in model.model_fields.items():
        default = "required" if field.is_required() else (
            f"`{field.default_factory()!r}`" if field.default_factory is not None
            else f"`{field.default!r}`")
        annotation = field.annotation
        kind = annotation.__name__ if isinstance(annotation, type) else str(annotation)
        rows.append(f"| `{field_name}` | `{_cell(kind.replace('typing.', ''))}` | {default} | "
                    f"{_cell(field.description or _attribute_doc(model, field_name))} |")
    return rows


def _attribute_doc(cls, attribute: str) -> str:
    """The string literal under ``attribute: ...`` in the class body (its docstring)."""
    import ast
    import textwrap

    for klass in cls.__mro__:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for first, second in zip(body, body[1:]):
            target = (first.target if isinstance(first, ast.AnnAssign) else
                      first.targets[0] if isinstance(first, ast.Assign) else None)
            if (isinstance(target, ast.Name) and target.id == attribute
                    and isinstance(second, ast.Expr) and isinstance(second.value, ast.Constant)
                    and isinstance(second.value.value, str)):
                return inspect.cleandoc(second.value.value)
    return ""


def _members(cls) -> list[str]:
    """A class's public methods, properties and documented class attributes, and the
    underscored methods that belong to its contract."""
    out = []
    names = [n for n in cls.__dict__ if not n.startswith("_")] + HOOKS_OF.get(cls.__name__, [])
    for member in dict.fromkeys(names):
        value = inspect.getattr_static(cls, member)
        if isinstance(value, property):
            out += [f"- **`{member}`** (property): {_cell(inspect.getdoc(value) or '')}"]
        elif inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod)):
            func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
            doc = _cell(inspect.getdoc(func) or "")
            signature = _signature(func, member).replace("(self, ", "(").replace("(self)", "()")
            out += [f"- **`{signature}`**" + (f": {doc}" if doc else "")]
        elif not callable(value) and not isinstance(value, type) and member != "model_config":
            doc = _attribute_doc(cls, member)
            if doc:
                out += [f"- **`{member} = {value!r}`**: {_cell(doc)}"]
    return out


def _entry(name: str, obj, module_name: str) -> list[str]:
    from pydantic import BaseModel

    where = getattr(obj, "__module__", module_name)
    doc = inspect.getdoc(obj) or ""
    if not where.startswith("zoo"):  # another project's object: its signature is not ours
        return [f"### `{name}`", "", f"*from `{where}`* ({type(obj).__name__}). "
                f"{_cell(doc.splitlines()[0] if doc else '')}", ""]
    if inspect.isclass(obj):
        bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
        head = f"class {name}({bases})" if bases else f"class {name}"
        if issubclass(obj, BaseModel):
            return [f"### `{name}`", "", "```python", head, "```", "", f"*from `{where}`*", "",
                    doc, "", *_fields(obj), "", *_members(obj), ""]
        if issubclass(obj, BaseException):
            body = []
        else:
            init = _signature(obj.__init__, "__init__").replace("(self, ", "(").replace(
                "(self)", "()")
            head += "\n    " + init
            body = _members(obj)
        return [f"### `{name}`", "", "```python", head, "```", "", f"*from `{where}`*", "",
                doc, "", *body, ""]
    if callable(obj):
        return [f"### `{name}`", "", "```python", _signature(obj, name), "```", "",
                f"*from `{where}`*", "", doc, ""]
    return []


def api(module_name: str) -> str:
    """A reference of a module's public names: each one's signature and docstring, a
    pydantic model's fields, a class's methods and the hooks of its contract. For
    ``zoo``, the names a plugin author meets (:data:`PLUGIN_AUTHORS_MEET`)."""
    import importlib

    module = importlib.import_module(module_name)
    names = PLUGIN_AUTHORS_MEET if module_name == "zoo" else module.__all__
    out = []
    for name in names:
        out += _entry(name, getattr(module, name), module_name)
    return "\n".join(line.rstrip() for line in out).rstrip()


def architecture(name: str) -> str:
    """An architecture's slots (family, default, what it needs) and its settings (type,
    default, meaning), from its class: what a recipe fills and may leave out."""
    import zoo

    component = zoo.get_component("architecture", name)
    cls = component.load()
    rows = ["| slot | family | default | needs |", "|---|---|---|---|"]
    for slot, spec in getattr(cls, "slots", {}).items():
        needs = ", ".join(f"{k}={v}" for k, v in spec.requires.items())
        needs = f"{needs} ({spec.why})" if needs and spec.why else needs
        default = f"`{spec.default}`" if spec.default else "required"
        rows.append(f"| `{slot}` | {spec.family} | {default} | {_cell(needs) or '-'} |")
    settings = component.settings_model
    return "\n".join(["**Slots**", "", *rows, "", "**Settings** (`architecture.settings`)", "",
                      *(_fields(settings) if settings else ["*none*"])])


def weights(recipe: str) -> str:
    """The tensor names a model of ``recipe`` loads (layer numbers as ``{i}``), with their
    shapes there: what a format's ``weights()`` maps to."""
    import zoo
    from zoo.artifact import weights_to_save

    model = zoo.build(recipe)
    rows, seen = ["| zoo's tensor | shape in `" + recipe + "` |", "|---|---|"], set()
    for key, value in weights_to_save(model).items():
        name = re.sub(r"\.\d+\.", ".{i}.", key)
        if name not in seen:
            seen.add(name)
            rows.append(f"| `{name}` | {tuple(value.shape)} |")
    return "\n".join(rows)


def settings(family: str) -> str:
    """Each member of a family with its settings (the fields of its ``Settings``: type,
    default, meaning), as a recipe's ``{"name": ..., "settings": {...}}`` takes them."""
    import zoo

    out = []
    for c in zoo.list_components(family):
        model = c.settings_model
        out += [f"#### `{c.name}`", "", _cell(c.description), ""]
        out += [*_fields(model), ""] if model is not None and model.model_fields else [
            "*No settings.*", ""]
    return "\n".join(out).rstrip()


LAYER = {"d_model": 8, "d_ff": 16, "n_heads": 2}
"""The small layer whose tensors :func:`layer_names` lists (names do not depend on size)."""


def layer_names(family: str) -> str:
    """The state-dict names inside each built-in member of ``ffn`` or ``block`` (a block
    built with vanilla attention, layernorm and the relu network): what a format's
    ``weights()`` maps a layer's tensors to, under the stack's ``layers.{i}.``."""
    import zoo
    from functools import partial

    rows = ["| component | tensors (shapes at d_model 8, d_ff 16, 2 heads) |", "|---|---|"]
    attention = zoo.get_component("attention", "vanilla")
    kernel = zoo.get_component("kernel", "sdpa").load()
    for c in zoo.list_components(family):
        if c.plugin not in ("ffn", "blocks"):
            continue
        if family == "ffn":
            module = c.build(None, d_model=LAYER["d_model"], d_ff=LAYER["d_ff"])
        else:
            module = c.build(None, d_model=LAYER["d_model"], dropout=0.0, norm_first=True,
                             make_attention=partial(attention.build, None,
                                                    d_model=LAYER["d_model"],
                                                    n_heads=LAYER["n_heads"], kernel=kernel),
                             make_norm=partial(zoo.get_component("norm", "layernorm").build,
                                               None, dim=LAYER["d_model"]),
                             make_ffn=partial(zoo.get_component("ffn", "relu").build, None,
                                              d_model=LAYER["d_model"], d_ff=LAYER["d_ff"]))
        names = ", ".join(f"`{k}` {tuple(v.shape)}" for k, v in module.state_dict().items())
        rows.append(f"| `{c.name}` | {names or '*none*'} |")
    return "\n".join(rows)


def bookkeeping(which: str | None = None) -> str:
    """transformers' config keys that change nothing a model computes, in any family
    (``generation``: the generation keys of older configs, which zoo reads as generation
    settings and ``Options.done`` passes)."""
    from zoo.format_base import BOOKKEEPING, GENERATION_KEYS

    keys = GENERATION_KEYS if which == "generation" else BOOKKEEPING
    return ", ".join(f"`{k}`" for k in sorted(keys))


def experiment(name: str) -> str:
    """The report ``zoo experiment NAME --out docs/experiments`` wrote, and its figure."""
    report = DOCS / "experiments" / f"{name}.md"
    if not report.exists():
        return (f"*Not run yet: `zoo experiment {name} --out docs/experiments`, then "
                "`python docs/hooks.py`.*")
    text = report.read_text(encoding="utf-8").rstrip()
    return f"{text}\n\n![zoo experiment {name}](experiments/{name}.png)"


KINDS = {"components": components, "recipes": recipes, "capabilities": capabilities,
         "checks": checks, "api": api, "architecture": architecture, "experiment": experiment,
         "weights": weights, "settings": settings, "layer_names": layer_names,
         "bookkeeping": bookkeeping}


def refresh(markdown: str, *, build: bool = True) -> str:
    """The page with every generated block written anew (``build``: for the site; the
    sources and the site get the same text)."""
    def fill(match: re.Match) -> str:
        kind, arg = match.group(2), match.group(3)
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
