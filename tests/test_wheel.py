"""The wheel a user installs holds all zoo needs: installed apart from this checkout,
it builds a model, finds its native libraries' every source and header (the same build
as the checkout's: its folder is keyed on them) and decodes through them, giving the
checkout's tokens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zoo
from zoo import native

ROOT = Path(__file__).parents[1]

SCRIPT = """
import json, sys, torch, zoo
from zoo import native
from zoo.plugins.architectures.static_decoder import StaticDecoder
torch.manual_seed(0)
model = zoo.build("transformer-tiny", vocab_size=32).eval()
src = torch.randint(3, 32, (2, 7), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    memory = model.encode(src)
    step = model.static_decoder(memory, model.padding_mask(src), groups=1, length=8)
print(json.dumps({"zoo": zoo.__file__, "status": native.status(),
                  "native_step": isinstance(step, StaticDecoder) and step.native is not None,
                  "tokens": model.generate(src, max_new_tokens=8).tolist()}))
"""


def _checkout_tokens() -> list[list[int]]:
    torch.manual_seed(0)
    model = zoo.build("transformer-tiny", vocab_size=32).eval()
    src = torch.randint(3, 32, (2, 7), generator=torch.Generator().manual_seed(1))
    return model.generate(src, max_new_tokens=8).tolist()


@pytest.mark.skipif(not native.available(), reason="zoo's native libraries do not run here")
def test_the_wheel_installed_apart_decodes_through_the_native_libraries(tmp_path):
    source = tmp_path / "source"
    for part in ("zoo", "plugins", "recipes"):
        shutil.copytree(ROOT / part, source / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"),
                            str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("zoo_transformers-*.whl")
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                                "--no-index", "-q", "--target", str(site), str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["zoo"]).is_relative_to(site)  # the wheel's zoo, not this checkout
    assert found["status"]["missing"] == []
    assert found["status"]["state"] == "loaded"
    assert found["status"]["folder"] == native.status()["folder"]  # the same sources
    assert found["native_step"]
    assert found["tokens"] == _checkout_tokens()


def test_every_package_folder_is_in_the_wheel():
    """Each folder of zoo's packages (an ``__init__.py`` under zoo/, plugins/, recipes/)
    is listed in pyproject.toml's packages, as setuptools builds the wheel from that list
    alone: a package left out is missing from every user's install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    roots = {"zoo": "zoo", "plugins": "zoo.plugins", "recipes": "zoo.recipes"}
    found = {".".join([roots[init.relative_to(ROOT).parts[0]],
                       *init.relative_to(ROOT).parts[1:-1]])
             for top in roots for init in (ROOT / top).rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found - listed == set(), sorted(found - listed)
