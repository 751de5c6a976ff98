"""The docs build strictly, and their generated lists come from the registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import zoo

from .conftest import run_python

ROOT = Path(__file__).parents[1]


def test_mkdocs_build_strict(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    components = (tmp_path / "components" / "index.html").read_text()
    for family in ("attention", "kernel", "norm"):
        for c in zoo.list_components(family):
            assert f"<code>{c.name}</code>" in components
    recipes = (tmp_path / "recipes" / "index.html").read_text()
    for name in zoo.list_recipes():
        assert f"<code>{name}</code>" in recipes
    assert "63,082,496" in recipes


def test_every_public_class_and_function_of_the_core_has_a_docstring():
    import ast

    missing = []
    for path in sorted((ROOT / "zoo").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        if path.name != "__main__.py" and not ast.get_docstring(tree):
            missing.append(f"{where}: the module")
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            members = [node] + [m for m in node.body if isinstance(node, ast.ClassDef)
                                and isinstance(m, ast.FunctionDef) and not m.name.startswith("_")]
            missing += [f"{where}:{m.lineno} {m.name}" for m in members if not ast.get_docstring(m)]
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_the_promises_page_names_tests_that_exist():
    import re

    page = (ROOT / "docs" / "promises.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(test_\w+)`", page))
    defined = {m for path in (ROOT / "tests").glob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", path.read_text(), re.M)}
    assert len(named) > 30 and not named - defined, sorted(named - defined)


def test_the_generated_tables_in_the_sources_are_current():
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "hooks.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_every_architecture_component_and_setting_has_its_generated_table():
    # the tables are written from the registry (and kept current by the test above): a
    # registered architecture, component family or block without its table is missing
    import zoo

    recipes = (ROOT / "docs" / "recipes.md").read_text(encoding="utf-8")
    components = (ROOT / "docs" / "components.md").read_text(encoding="utf-8")
    for arch in zoo.list_components("architecture"):
        assert f"<!-- zoo:architecture {arch.name} -->" in recipes, arch.name
    for family in zoo.list_families():
        settled = [c for c in zoo.list_components(family.name) if c.settings_model is not None
                   and c.settings_model.model_fields and family.name != "architecture"]
        if settled:
            assert f"<!-- zoo:settings {family.name} -->" in components, family.name
    for family in ("block", "ffn"):
        assert f"<!-- zoo:layer_names {family} -->" in components, family
    # the settings the plugin authors asked about, each with its meaning
    for name, setting in [("ffn", "approximate"), ("positional", "fraction")]:
        rows = [line for line in components.splitlines() if line.startswith(f"| `{setting}`")]
        assert rows and all(line.rstrip(" |").split("|")[-1].strip() for line in rows), setting
    assert "`fc1.weight` (16, 8)" in components


def _examples() -> list:
    import re

    found = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        blocks = re.findall(r"```python\n(# runs as a test.*?)```", path.read_text(), re.S)
        found += [pytest.param(code, id=f"{path.stem}-{i}") for i, code in enumerate(blocks)]
    return found



@pytest.mark.parametrize("code", _examples())
def test_every_worked_example_in_the_docs_runs(code, tmp_path):
    done = run_python(code, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "passed" in done.stdout or "torch.Size" in done.stdout or done.stdout.strip()


def test_every_family_has_a_contract_page_with_an_example():
    import re

    pages = {p.stem: p.read_text() for p in (ROOT / "docs" / "contract").glob("*.md")}
    for family in ("attention", "kernel", "positional", "norm", "ffn", "block",
                   "architecture", "task", "loss"):
        page = next(text for text in pages.values()
                    if f"<!-- zoo:capabilities {family} -->" in text)
        assert re.search(r"```python\n# runs as a test", page), family


def test_every_benchmark_script_is_listed_with_the_docs_that_quote_it():
    """benchmarks/README.md states the rule against zoo bench and lists every script;
    each doc it names for a script runs or cites that script."""
    import re

    listed = dict(re.findall(r"^\| `([\w.]+)` \| [^|]+ \| (.+) \|$",
                             (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8"),
                             re.M))
    scripts = {p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh")}
    assert set(listed) == scripts
    unquoted = [(name, doc) for name, docs in listed.items()
                for doc in re.findall(r"`([\w/.-]+\.md)`", docs)
                if f"benchmarks/{name}" not in (ROOT / doc).read_text(encoding="utf-8")]
    assert not unquoted, unquoted


def test_the_articles_are_cited_by_title_never_by_a_path_of_ours():
    import re

    cited = re.compile(r"shared/seeds|seeds/00\d|article 00\d")
    where = [p for d in ("docs", "zoo", "plugins") for p in (ROOT / d).rglob("*")
             if p.suffix in (".md", ".py", ".json", ".yaml")] + [ROOT / "README.md"]
    found = [f"{p.relative_to(ROOT)}: {m.group()}" for p in where
             for m in cited.finditer(p.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_committed_api_reference_names_every_public_name():
    import zoo.plugin_api
    import zoo.testing

    page = (ROOT / "docs" / "plugin-api.md").read_text(encoding="utf-8")
    for module in (zoo.plugin_api, zoo.testing):
        for name in module.__all__:
            if callable(getattr(module, name)):
                assert f"### `{name}`" in page, name
    assert "Generated from the docstrings" not in page  # the text itself, not a placeholder
    assert "`_attend(q, k, v, *, offset, key_padding_mask, attn_mask)" in page
