"""zoo's native kernels: C++ in ``zoo/csrc``, compiled on first use against the
installed torch into one library kept on disk, registered as ``torch.ops.zoo.*``.

- ``packed_linear`` (``zoo/csrc/packed_linear.cpp``): ``x W^T + b`` for up to a few
  dozen rows of ``x`` (a decoding step: one row, or one per beam and sentence; a
  sentence's encoder), with ``W`` packed once by ``pack_linear_weight`` into panels of
  16 outputs, multiplied in registers six rows at a time. Measured on a 2-core AMD
  EPYC with AVX2 on the products of transformer-base's decoding step, against
  oneDNN's packed product: 3.1 times faster at one row (the weights read at the
  memory's rate), 2.0 at four, 1.6 at sixteen, 1.2 at 64, level from about 320 rows
  (``docs/bench.md``). :class:`zoo.ops.Linear` calls it in CPU inference, with the
  packed weight kept beside its own.
- ``skinny_linear`` (``zoo/csrc/skinny_linear.cpp``): the same product on the weight
  as it is (no packed copy), for a few rows; what ``Linear`` calls inside
  ``torch.compile``, where a packed copy cannot be kept (1.5 to 1.9 times oneDNN at
  one to four rows, 1.1 at sixteen).
- ``decoder_layers`` (``zoo/csrc/decoder_layers.cpp``): a whole decoding step through
  a plain decoder's layers, the static decoder's step without its Python
  (``plugins/architectures/static_decoder.py`` decides when it may run).

- **Where they are kept:** ``$ZOO_KERNEL_CACHE``, or ``$XDG_CACHE_HOME/zoo/kernels``
  (``~/.cache/zoo/kernels``), one folder per source, torch version and compiler,
  with the compiler's output in ``build.log``. Deleting the folder clears them; the
  next use compiles again (about a minute on 2 cores, once).
- **Turning it off:** ``ZOO_NATIVE=0``; zoo then decodes through oneDNN and Python as
  before.
- **Without a compiler**, or when compiling fails, zoo warns once (naming the cause and
  the log) and falls back; a failed build is remembered in its folder, so later
  processes do not try again until the folder is deleted, the sources change or the
  compiler does (its ``--version`` is part of the folder's key).
- **Ahead of time:** ``zoo native build`` compiles them (or says where they are) and
  ``zoo env`` reports them (:func:`status`), without compiling.

The kernels need AVX2 and FMA; on other CPUs, and when PyTorch is told to dispatch
below AVX2 (``ATEN_CPU_CAPABILITY=default``), they are not used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "packed_linear.cpp", CSRC / "skinny_linear.cpp", CSRC / "step_ops.cpp",
           CSRC / "decoder_layers.cpp")
"""The C++ sources of the library: ``zoo::packed_linear``, ``zoo::skinny_linear`` and
``zoo::decoder_layers``."""

UNPACKED_ROWS = 16
"""The most rows ``skinny_linear`` (the kernel for unpacked weights) is given inside
``torch.compile``: measured 1.1 times oneDNN at sixteen rows, slower from 32."""

_lock = threading.Lock()
_loaded: bool | None = None


def enabled() -> bool:
    """False when ``ZOO_NATIVE`` is set to 0 (or false, no, off)."""
    return os.environ.get("ZOO_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_root() -> Path:
    """The folder under which compiled kernels are kept."""
    if os.environ.get("ZOO_KERNEL_CACHE"):
        return Path(os.environ["ZOO_KERNEL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "zoo" / "kernels"


def _compiler() -> str | None:
    return (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
            or shutil.which("clang++"))


def _command(torch, cxx: str, out: Path, sources=SOURCES) -> list[str]:
    root = Path(torch.__file__).parent
    include, libdir = str(root / "include"), str(root / "lib")  # ATen, c10, library.h; libtorch_cpu
    abi = int(torch.compiled_with_cxx11_abi())
    return [cxx, "-O3", "-std=c++20", "-fPIC", "-shared", "-fopenmp",
            f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-isystem", include, *map(str, sources),
            "-o", str(out),
            f"-L{libdir}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{libdir}"]


HEADERS = ("packed_linear.h", "product_common.h", "skinny_linear.h", "step_ops.h")
"""The headers the sources include: they ship beside them (``pyproject.toml``'s package
data), and a test builds the wheel and loads the kernels from it."""


def _compiler_version(cxx: str) -> str:
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.splitlines()[0] if done.stdout else ""


def build_folder(torch, cxx: str) -> Path:
    """The folder of this build: these sources and headers, this torch, this compiler
    (its path, flags and version)."""
    key = hashlib.sha256()
    for source in (*SOURCES, *(CSRC / h for h in HEADERS)):
        key.update(source.name.encode() + b"\0")
        key.update(source.read_bytes() if source.is_file() else b"(missing)")
    # the sources by name: a wheel's copy and a checkout's share one build
    key.update("\0".join(_command(torch, cxx, Path("out"), [s.name for s in SOURCES])).encode())
    key.update(_compiler_version(cxx).encode())
    key.update(torch.__version__.encode())
    return cache_root() / f"zoo_kernels-{key.hexdigest()[:16]}"


def status() -> dict:
    """Where zoo's kernels stand here, without compiling anything: ``state`` is
    ``loaded`` (in this process), ``built`` (compiled, not yet loaded), ``not built``,
    ``failed`` (see ``log``), ``off`` (ZOO_NATIVE=0), ``unsupported`` (not Linux with
    AVX2) or ``no compiler``; with the ``folder`` they are kept in."""
    import torch

    out: dict = {"state": None, "folder": None, "log": None,
                 "missing": [str(p.name) for p in (*SOURCES, *(CSRC / h for h in HEADERS))
                             if not p.is_file()]}
    cxx = _compiler()
    if not enabled():
        out["state"] = "off"
    elif not (sys.platform.startswith("linux") and torch.backends.cpu.get_cpu_capability()
              in ("AVX2", "AVX512")):
        out["state"] = "unsupported"
    elif cxx is None:
        out["state"] = "no compiler"
    else:
        folder = build_folder(torch, cxx)
        out["folder"] = str(folder)
        if (folder / "zoo_kernels.so").exists():
            out["state"] = "loaded" if _loaded else "built"
        elif (folder / "FAILED").exists():
            out["state"], out["log"] = "failed", str(folder / "build.log")
        else:
            out["state"] = "not built"
    return out


def _build(torch, cxx: str, folder: Path) -> Path:
    """Compile into ``folder`` (once, across processes) and return the library's path."""
    from filelock import FileLock

    library, failed = folder / "zoo_kernels.so", folder / "FAILED"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock"), timeout=600):
        if library.exists() or failed.exists():
            return library
        print(f"zoo: compiling its native kernels for torch {torch.__version__} "
              f"(once, about a minute; kept in {folder})", file=sys.stderr)
        tmp = folder / f".zoo_kernels.{os.getpid()}.so"
        done = subprocess.run(_command(torch, cxx, tmp), capture_output=True, text=True)
        (folder / "build.log").write_text(" ".join(_command(torch, cxx, library)) + "\n\n"
                                          + done.stdout + done.stderr, encoding="utf-8")
        if done.returncode != 0:
            tmp.unlink(missing_ok=True)
            failed.write_text(f"exit status {done.returncode}\n", encoding="utf-8")
        else:
            os.replace(tmp, library)
    return library


def _fallback(why: str) -> bool:
    warnings.warn(f"zoo's native kernels are off: {why}. Decoding runs through oneDNN and "
                  "Python instead (slower at one sentence); set ZOO_NATIVE=0 to silence this.",
                  RuntimeWarning, stacklevel=3)
    return False


def _load() -> bool:
    import torch

    if not (sys.platform.startswith("linux") and torch.backends.cpu.get_cpu_capability()
            in ("AVX2", "AVX512")):
        return False
    default_rows()  # now, outside any traced function: inside one it cannot be read
    cxx = _compiler()
    if cxx is None:
        return _fallback("no C++ compiler was found (tried $CXX, c++, g++, clang++); "
                         "install g++ to have it")
    try:
        folder = build_folder(torch, cxx)
        library = _build(torch, cxx, folder)
    except Exception as exc:  # an unwritable cache, a lock held too long
        return _fallback(f"it could not be built in {cache_root()} ({exc}); set "
                         "ZOO_KERNEL_CACHE to a writable folder")
    if not library.exists():
        return _fallback(f"compiling it failed (see {folder / 'build.log'}; delete {folder} "
                         "to try again)")
    try:
        torch.ops.load_library(str(library))
    except Exception as exc:
        return _fallback(f"{library} did not load ({exc}); delete {folder} to rebuild it")
    if not torch.ops.zoo.cpu_has_avx2_fma():
        return False

    @torch.library.register_fake("zoo::skinny_linear")
    def _(x, weight, bias):  # its shape, for torch.compile
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake("zoo::packed_linear")
    def _(x, packed, bias, n_out):
        return x.new_empty((*x.shape[:-1], n_out))

    return True


_ROWS: int | None = None


def default_rows() -> int:
    """The most rows :class:`zoo.ops.Linear` gives the kernel by default: 128 where
    PyTorch dispatches AVX2 (measured 1.15 to 1.3 times oneDNN at 128 rows, level from
    about 320), 4 on AVX-512, where oneDNN's products are twice as wide and only the
    products bound by reading the weights (a few rows) can gain; that figure is not
    measured."""
    global _ROWS
    if _ROWS is None:
        import torch

        if torch.compiler.is_compiling():  # asked outside a traced function first
            return 0
        _ROWS = 128 if torch.backends.cpu.get_cpu_capability() == "AVX2" else 4
    return _ROWS


def available() -> bool:
    """True when zoo's kernels (``torch.ops.zoo.packed_linear``, ``skinny_linear``,
    ``decoder_layers``) can be called here: enabled, an AVX2 CPU, and the library
    compiled (now, on first call, or earlier) and loaded."""
    global _loaded
    if _loaded is None:
        import torch

        if torch.compiler.is_compiling():  # loaded outside a traced function only
            return False
        with _lock:
            if _loaded is None:
                _loaded = enabled() and _load()
    return _loaded
