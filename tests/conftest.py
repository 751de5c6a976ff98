"""Shared fixtures: a clean registry per test that changes it, and the fixture
plugin packages installed (really, with pip) into a temporary folder."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Tests run in two worker processes side by side (pyproject's -n 2), each on cores
    # of its own (worker i takes every n-th core), with OpenMP threads that sleep soon:
    # a test that asks for a thread per core (zoo.train does) then gets its worker's
    # cores, and neither worker slows the other down (docs/training.md, "Training
    # beside another run"). Subprocesses inherit the cores and the settings.
    _index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
    _count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _cpus = sorted(os.sched_getaffinity(0))
    _mine = {c for i, c in enumerate(_cpus) if i % _count == _index % _count} or set(_cpus)
    os.sched_setaffinity(0, _mine)
    os.environ.setdefault("OMP_NUM_THREADS", str(len(_mine)))
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")

import pytest  # noqa: E402
import torch  # noqa: E402

from zoo.registry import registry

FIXTURES = Path(__file__).parent / "fixtures"
EARLIER = Path(__file__).parent / "plugins_of_earlier_releases"
"""Plugins written against earlier releases of zoo, from the docs of their day, and never
edited since (``tests/plugins_of_earlier_releases/README.md``)."""


def _expected_seconds(item) -> float:
    """A slow test's ``@pytest.mark.slow(seconds=N)`` (30 when it names none); 0 for the
    others."""
    mark = item.get_closest_marker("slow")
    return 0.0 if mark is None else float(mark.kwargs.get("seconds", 30))


def _longest_first(items) -> None:
    """The longest tests first, so that the two workers end together rather than one
    finishing a minutes-long training alone at the end."""
    items.sort(key=lambda item: -_expected_seconds(item))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def fresh_registry():
    """A registry reloaded from the entry points before and after the test."""
    registry.reset()
    yield registry.plugins
    registry.reset()


def pip_install(target: Path, *packages: str, folder: Path = FIXTURES) -> Path:
    """Fixture packages (of ``folder``), really installed by pip into ``target``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), *(str(folder / p) for p in packages)],
        check=True,
    )
    return target


def earlier_packages() -> list[str]:
    """The corpus of plugins of earlier releases: every package folder in it."""
    return sorted(p.name for p in EARLIER.iterdir() if (p / "pyproject.toml").is_file())


@pytest.fixture(scope="session")
def earlier_site(tmp_path_factory) -> Path:
    """Every plugin of the corpus of earlier releases, pip-installed together into one
    folder, as a user who installed them over the months has them."""
    return pip_install(tmp_path_factory.mktemp("earlier-site"), *earlier_packages(),
                       folder=EARLIER)


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory) -> Path:
    """The two fixture plugin packages, pip-installed into a folder of their own."""
    return pip_install(tmp_path_factory.mktemp("site"), "zoo-plugin-example",
                       "zoo-plugin-broken")


@pytest.fixture(scope="session")
def old_plugin_site(tmp_path_factory) -> Path:
    """A plugin of last month whose ``geglu`` a later built-in took, in a folder of its own."""
    return pip_install(tmp_path_factory.mktemp("old-site"), "zoo-plugin-old", folder=EARLIER)


@pytest.fixture(scope="session")
def firsts_site(tmp_path_factory) -> Path:
    """A plugin written against zoo's first plugin API, in a folder of its own."""
    return pip_install(tmp_path_factory.mktemp("firsts-site"), "zoo-plugin-firsts",
                       folder=EARLIER)


@pytest.fixture(scope="session")
def neox_site(tmp_path_factory) -> Path:
    """A plugin of this release's contract, GPT-NeoX (a format, a parallel block, a rule),
    written from the docs alone, in a folder of its own."""
    return pip_install(tmp_path_factory.mktemp("neox-site"), "zoo-plugin-neox")


@pytest.fixture(scope="session")
def nonconforming_site(tmp_path_factory) -> Path:
    """The plugin that claims a KV cache it does not honour, in a folder of its own."""
    return pip_install(tmp_path_factory.mktemp("bad-site"), "zoo-plugin-nonconforming")


@contextlib.contextmanager
def plugins_from(site: Path, monkeypatch):
    """The plugin packages installed in ``site`` importable in this process, the registry
    reloaded with them; all undone after."""
    monkeypatch.syspath_prepend(str(site))
    registry.reset()
    try:
        yield site
    finally:
        monkeypatch.undo()
        for name in [m for m in sys.modules if m.startswith("zoo_plugin_")]:
            del sys.modules[name]
        registry.reset()


@pytest.fixture
def with_plugins(plugin_site, monkeypatch):
    """The fixture plugins importable in this process, the registry reloaded."""
    with plugins_from(plugin_site, monkeypatch):
        yield plugin_site


def run_zoo(*args: str, env: dict[str, str] | None = None, pythonpath: Path | None = None,
            input: str | None = None, timeout: float | None = None):
    """Run the installed ``zoo`` command line (``python -m zoo``) in a process of its own
    (``input``: its standard input; past ``timeout`` seconds it is killed and
    ``subprocess.TimeoutExpired`` raised): forked from one that has imported torch already
    (:func:`_forked`) where ``env`` and ``pythonpath`` leave what that import read as it
    was, else a fresh interpreter."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    if pythonpath is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(pythonpath), full_env.get("PYTHONPATH")) if p
        )
    return _run(["-m", "zoo", *args], full_env, input, timeout)


def run_python(code: str, *args: str, env: dict[str, str] | None = None,
               timeout: float | None = None, cwd: Path | None = None):
    """``python -c code args`` in a process of its own (in folder ``cwd``), as
    :func:`run_zoo` runs the command line."""
    return _run(["-c", code, *args], {**os.environ, **(env or {})}, None, timeout, cwd)


def _run(argv: list[str], env: dict[str, str], input: str | None, timeout: float | None,
         cwd: Path | None = None):
    if _FORK and _read_at_import(env) == _forkserver_env():
        return _forked(argv, env, input, timeout, cwd)
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env,
                          input=input, timeout=timeout, cwd=cwd)


_FORK = os.environ.get("ZOO_TESTS_FORK", "1") != "0" and sys.platform == "linux"
"""Runs of the command line forked from a process that imported torch (``ZOO_TESTS_FORK=0``:
each in a fresh interpreter)."""

_AT_IMPORT = ("OMP_", "GOMP_", "KMP_", "MKL_", "DNNL_", "ONEDNN_", "OPENBLAS", "ATEN_",
              "TORCH", "PYTORCH", "CUDA", "NVIDIA", "LD_", "PYTHON", "MALLOC", "TMP")
"""How the names of the variables that ``import torch`` (or a C library it loads) may read
begin: a run that sets any of them otherwise than the fork server had needs a fresh
interpreter."""


def _read_at_import(environ) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.upper().startswith(_AT_IMPORT)}


_CHILD = """
import atexit, os, runpy, sys
os.environ.clear()
os.environ.update(run["env"])
os.chdir(run["cwd"])
for stream in (sys.stdout, sys.stderr):
    stream.flush()
for fd, name, flags in ((0, "in", os.O_RDONLY), (1, "out", os.O_WRONLY),
                        (2, "err", os.O_WRONLY)):
    opened = os.open(run[name], flags)
    os.dup2(opened, fd)
    os.close(opened)
sys.stdin = open(0, closefd=False)
sys.path[:] = run["path"]
sys.argv = run["argv"]
try:
    if run["code"] is None:
        runpy.run_module("zoo", run_name="__main__", alter_sys=True)
    else:
        exec(compile(run["code"], "<string>", "exec"), {"__name__": "__main__"})
finally:
    atexit._run_exitfuncs()
"""
"""What a forked run does: the call's environment, folder, streams and ``sys.path``, then
``python -m zoo`` or ``python -c code`` as the interpreter runs them, exit handlers
included."""


@functools.cache
def _fork_server():
    """The standard library's fork server, started now with torch imported, and the
    variables its import read."""
    import multiprocessing
    import multiprocessing.forkserver

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch"])
    multiprocessing.forkserver.ensure_running()
    return context, _read_at_import(os.environ)


def _forkserver_env() -> dict[str, str]:
    return _fork_server()[1]


@functools.cache
def _fresh_path() -> tuple[str, ...]:
    """A fresh interpreter's ``sys.path`` past its first entry (the working folder)."""
    said = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps("
                           "sys.path[1:]))"], capture_output=True, text=True, check=True)
    return tuple(json.loads(said.stdout))


def _forked(argv: list[str], env: dict[str, str], input: str | None,
            timeout: float | None, cwd: Path | None):
    """``python *argv`` (``-m zoo ...`` or ``-c code ...``) in a child of a process that
    imported torch once (the standard library's fork server): the 2-4 s of that import,
    paid by each of some hundred runs in the tests, are paid once a worker. The child
    runs as a fresh interpreter does, from the call's environment, folder, standard
    input and ``sys.path``; its output is captured in files."""
    import tempfile

    context = _fork_server()[0]
    with tempfile.TemporaryDirectory(prefix="zoo-run-") as folder:
        run = {name: str(Path(folder) / name) for name in ("in", "out", "err")}
        Path(run["in"]).write_text(input or "")
        for name in ("out", "err"):
            Path(run[name]).touch()
        module, where = argv[0] == "-m", str(cwd or os.getcwd())
        run.update(env=env, cwd=where, code=None if module else argv[1],
                   path=[where if module else "", *_fresh_path()],
                   argv=["zoo", *argv[2:]] if module else ["-c", *argv[2:]])
        child = context.Process(target=exec, args=(_CHILD, {"__name__": "__zoo_run__",
                                                             "run": run}))
        child.start()
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join()
        out, err = (Path(run[name]).read_text(errors="replace") for name in ("out", "err"))
        command = [sys.executable, *argv]
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout, out, err)
        return subprocess.CompletedProcess(command, child.exitcode, out, err)


def pytest_sessionstart(session):
    """Build (or find) zoo's native libraries before any test runs, as ``zoo native
    build`` does, in each worker (they take turns on its lock): no command builds them by
    itself, and the tests of the native paths need them."""
    from zoo import native
    from zoo.registry import registry

    registry.ensure_loaded()  # as zoo native build: the plugins declare their libraries
    native.build()


def pytest_collection_modifyitems(config, items):
    _longest_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk("300k")``: a real file system of that size (a tmpfs) mounted for this
    test, unmounted after it; the test is skipped where mounting needs a root it lacks."""
    import shutil
    import subprocess

    mounted = []

    def mount(size: str) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a small tmpfs needs root")
        path = tmp_path / f"disk-{len(mounted)}"
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture(scope="session")
def lm_folders(tmp_path_factory):
    """Each published decoder variant (tests/language_models.py) saved once by transformers:
    {variant: (transformers model, folder)}."""
    from .language_models import PUBLISHED, save_language_model

    root = tmp_path_factory.mktemp("language-models")
    return {v: (save_language_model(v, root / v), root / v) for v in PUBLISHED}


@pytest.fixture(scope="session")
def with_tokenizer(tmp_path_factory):
    """A GPT-2 and its own byte-level BPE tokenizer: (transformers model, tokenizer, folder)."""
    from .language_models import gpt2_with_tokenizer

    folder = tmp_path_factory.mktemp("gpt2-text") / "gpt2"
    return (*gpt2_with_tokenizer(folder), folder)
