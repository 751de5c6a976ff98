"""The layer order of docs/architecture.md, enforced: every import in zoo/ and plugins/
(at the top of a file or inside a function) goes down the written order, and the
plugins import only the plugin API the same page names."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path


ROOT = Path(__file__).parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, e.g. "zoo.training.loop"
    target: str  # the imported zoo module, e.g. "zoo.builder" (or "zoo" for the package)
    names: tuple[str, ...]  # for ``from zoo import a, b``: ("a", "b")
    where: str  # file:line


def module_name(path: Path) -> str:
    """zoo/training/loop.py -> zoo.training.loop; plugins/norm/x.py -> zoo.plugins.norm.x"""
    rel = path.relative_to(ROOT)
    parts = ["zoo", "plugins", *rel.parts[1:]] if rel.parts[0] == "plugins" else list(rel.parts)
    parts[-1] = parts[-1].removesuffix(".py")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files() -> dict[str, Path]:
    files = [p for folder in ("zoo", "plugins") for p in (ROOT / folder).rglob("*.py")]
    return {module_name(p): p for p in files}


def imports_of(path: Path, modules: dict[str, Path], name: str | None = None) -> list[Import]:
    """Every import of a zoo module in ``path`` (read as module ``name``), wherever it
    stands (ast.walk sees the bodies of functions and classes too), and
    ``importlib.import_module("zoo...")`` with a written-out name."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []

    def add(target: str, names: tuple[str, ...], line: int) -> None:
        if target == "zoo" or target.startswith("zoo."):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            found.append(Import(name, target, names, f"{shown}:{line}"))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    add(sub, (), node.lineno)
                else:
                    add(base, (alias.name,), node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(node.args[0].value, (), node.lineno)
    return sorted(found, key=lambda i: int(i.where.rsplit(":", 1)[1]))


def _section(title: str) -> list[str]:
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def written_layers() -> dict[str, tuple[int, int]]:
    """module -> (layer, position in its row), from the table under '## The layers'."""
    order = {}
    table = [line for line in _section("## The layers") if line.startswith("|")]
    rows = [line for line in table[1:] if not re.fullmatch(r"[|\-: ]+", line)]  # no header
    for layer, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")]
        for position, module in enumerate(re.findall(r"`([\w.]+)`", cells[1])):
            full = "zoo" if module == "zoo" else f"zoo.{module}"
            assert full not in order, f"{module} is written twice in {ARCHITECTURE.name}"
            order[full] = (layer + 1, position + 1)  # as the page counts them
    return order


def plugin_api() -> dict[str, set[str] | None]:
    """module -> the names a plugin may import from it (None: any), from '## The plugin API'."""
    api: dict[str, set[str] | None] = {}
    for line in _section("## The plugin API"):
        match = re.match(r"- `(zoo[\w.]*)`(?: \(only ((?:`\w+`(?:, )?)+)\))?", line)
        if match:
            only = match.group(2)
            api[match.group(1)] = set(re.findall(r"`(\w+)`", only)) if only else None
    return api


MODULES = python_files()
CORE = sorted(m for m in MODULES if not m.startswith("zoo.plugins"))
PLUGINS = sorted(m for m in MODULES if m.startswith("zoo.plugins"))


def _exempt(module: str) -> bool:
    """A package's ``__init__`` that imports nothing (``zoo.training``) needs no place."""
    path = MODULES[module]
    return path.name == "__init__.py" and not imports_of(path, MODULES) and module != "zoo"


def test_every_core_module_has_one_place_and_every_place_a_module():
    order = written_layers()
    unplaced = [m for m in CORE if m not in order and not _exempt(m)]
    assert not unplaced, (f"{unplaced} are in no layer of docs/architecture.md: add each to "
                          "the row it belongs to, on purpose")
    stale = [m for m in order if m not in MODULES]
    assert not stale, f"docs/architecture.md names modules that do not exist: {stale}"


def upward(module: str, imports: list[Import], order: dict[str, tuple[int, int]]) -> list[str]:
    """The imports of ``module`` that go up the order (or to a later module of its row)."""
    found = []
    for imp in imports:
        if imp.target == module or imp.target not in order:
            continue  # itself, or an empty package __init__
        if order[imp.target] >= order[module]:
            found.append(f"{imp.where}: {module} {order[module]} imports {imp.target} "
                         f"{order[imp.target]}")
    return found


def test_every_core_import_goes_down_the_written_order():
    order = written_layers()
    wrong = [line for module in CORE if module in order
             for line in upward(module, imports_of(MODULES[module], MODULES), order)]
    assert not wrong, ("imports that go up (or sideways to a later module of the same row) "
                       "of the order in docs/architecture.md, as (layer, position):\n"
                       + "\n".join(wrong))


def test_plugins_import_only_the_plugin_api_and_their_own_package():
    api = plugin_api()
    assert api == {"zoo": {"hookimpl"}, "zoo.plugin_api": None,
                   "zoo.native": {"NativeLibrary", "PRODUCTS"}}
    wrong = []
    for module in PLUGINS:
        own = ".".join(module.split(".")[:3])  # zoo.plugins.attention
        for imp in imports_of(MODULES[module], MODULES):
            if imp.target == own or imp.target.startswith(own + "."):
                continue
            allowed = api.get(imp.target, set())
            if allowed is None or (imp.names and set(imp.names) <= allowed):
                continue
            wrong.append(f"{imp.where}: {module} imports {imp.target}"
                         + (f" ({', '.join(imp.names)})" if imp.names else ""))
    assert not wrong, "plugins importing past the plugin API of docs/architecture.md:\n" + \
        "\n".join(wrong)


def test_the_walk_sees_relative_imports_and_imports_inside_functions():
    found = {(i.target, i.names) for i in imports_of(ROOT / "zoo" / "training" / "runs.py",
                                                     MODULES)}
    assert ("zoo.artifact", ()) in found  # from .. import artifact
    assert ("zoo.training.checkpoint", ("latest_checkpoint",)) in found  # from .checkpoint
    targets = {i.target for i in imports_of(ROOT / "zoo" / "cli.py", MODULES)}
    assert {"zoo.training.loop", "zoo.saving", "zoo.plots"} <= targets  # only inside functions


UPWARD = """\
from ..saving import save_pretrained
from .loop import train
def later():
    from .. import cli
    import importlib
    importlib.import_module("zoo.plots")
from zoo import build
from ..files import atomic_write_text
"""


def test_an_upward_import_is_reported_with_its_line(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(UPWARD)
    imports = imports_of(probe, MODULES, name="zoo.training.checkpoint")
    wrong = upward("zoo.training.checkpoint", imports, written_layers())
    assert [line.split(": ")[0].rsplit(":", 1)[1] for line in wrong] == ["1", "2", "4", "6", "7"]
    assert "imports zoo.saving" in wrong[0] and "imports zoo.plots" in wrong[3]
