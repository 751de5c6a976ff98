"""The docs build strictly, and their generated lists come from the registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import zoo

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
