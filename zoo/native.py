"""zoo's native code: C++ compiled against the installed torch into libraries kept on
disk, registered as ``torch.ops.zoo.*``, and built only when asked.

- ``packed_linear`` (``zoo/csrc/packed_linear.cpp``): ``x W^T + b`` for up to a few
  dozen rows of ``x`` (a decoding step: one row, or one per beam and sentence; a
  sentence's encoder), with ``W`` packed once by ``pack_linear_weight`` into panels of
  16 outputs, multiplied in registers six rows at a time. Measured on a 2-core AMD
  EPYC with AVX2 on the products of transformer-base's decoding step, against
  oneDNN's packed product: 3.1 times faster at one row (the weights read at the
  memory's rate), 2.0 at four, 1.6 at sixteen, 1.2 at 64, level from about 320 rows
  (``docs/bench.md``). :class:`zoo.ops.Linear` calls it in CPU inference, with the
  packed weight kept beside its own.
- ``pack_int8_weight`` (``zoo/csrc/int8_linear.cpp``): an int8 weight and its per-row
  scales (:mod:`zoo.quantization`) packed in the same panels, which ``packed_linear``
  multiplies reading a quarter of fp32's bytes (the activations stay fp32).
- ``pack_int4_weight`` (``zoo/csrc/int4_linear.cpp``): a weight in 4-bit groups of 32
  with float16 scales (:class:`zoo.quantization.Int4Linear`, llama.cpp's q4_0) packed in
  panels of 16 outputs, which ``packed_linear`` multiplies reading 4.5 bits a weight,
  by integer dot products with the activations rounded to int8 in groups of 32 as it goes
  (llama.cpp's q8_0).
- ``skinny_linear`` (``zoo/csrc/skinny_linear.cpp``): the same product on the weight
  as it is (no packed copy), for a few rows; what ``Linear`` calls inside
  ``torch.compile``, where a packed copy cannot be kept.

- ``fingerprint`` (``zoo/csrc/fingerprint.cpp``): a 64-bit digest of a tensor's bytes
  at the memory's rate, by which :mod:`zoo.derived` checks packed copies of weights;
  ``fingerprints``, the digest of each of a list of tensors in one call.
- ``top_k`` (``zoo/csrc/top_k.cpp``): the k largest of each row of a float32 matrix,
  sorted, in one pass, for a search's few k (a beam search's step: 8 of 32,000 scores in
  about a seventh of the 53 microseconds ``torch.topk`` took).
- Packed weights (``zoo/csrc/weight_memory.cpp``) lie one after another in slabs of 32 MiB
  that Linux is asked to back with 2 MiB pages (``madvise``): a call after a pause reads
  its weights from memory, and in 4 KiB pages each 4 KiB is a translation to look up (on
  a virtual machine, through two page tables). ``ZOO_HUGE_PAGES=0`` keeps torch's memory.

These are :data:`PRODUCTS`, zoo's own library. A plugin's C++ is a
:class:`NativeLibrary` of its own, declared beside its only caller and linked against
the products when it calls them, and registers its operators in an op namespace of
its own (the static decoder's whole decoding step,
``plugins/architectures/csrc/decoder_layers.cpp``, is one: ``torch.ops.zoo_decoder``).

- **Built when asked, never inside a command:** ``zoo native build`` (or
  :func:`build`) compiles every library with ``torch.utils.cpp_extension`` and ninja:
  one object per source, in parallel, and only the sources that changed since the
  last build (24 s for all on 2 cores, where one serial compiler call took 39 s).
  Until then zoo warns once that they are not built and decodes through oneDNN and
  Python. ``ZOO_NATIVE=build`` lets the first use compile them instead.
- **Where they are kept:** ``$ZOO_NATIVE_CACHE``, or ``$XDG_CACHE_HOME/zoo/native``
  (``~/.cache/zoo/native``), one folder per library, torch version and compiler
  (its path and ``--version``), with the compiler's output in ``build.log``. A
  library names those it needs by file name, not by path, so a copied or moved cache
  works; its size and SHA-256 are recorded at the build and checked before it is
  loaded, and one that does not match (cut short by a full disk or a kill, or
  replaced) is not loaded but built again by ``zoo native build``, from those of its
  objects that are still the ones built (recorded the same way) and, by ninja's rule
  of files' times, newer than their sources (not so after a fresh clone beside an
  earlier build of the same sources: all are compiled again then).
- **Failures** are said once, naming the log; a failed build is not loaded and is
  tried again by the next ``zoo native build``, or after a change of compiler (a new
  folder) or of its sources. A build that another process holds is waited for with
  a message naming it, and a compiler that hangs is stopped, both after
  ``$ZOO_NATIVE_BUILD_TIMEOUT`` seconds (900).
- **Turning it off:** ``ZOO_NATIVE=0``.

The libraries need AVX2 and FMA; on other CPUs, and when PyTorch is told to dispatch
below AVX2 (``ATEN_CPU_CAPABILITY=default``), they are not used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable

from .env_settings import setting
from .native_cache import KEPT_BUILDS, cache_root, prune_builds  # noqa: F401
from .native_record import matches, outputs_to_redo, read_record, write_record

CSRC = Path(__file__).with_name("csrc")
"""zoo's C++ sources, and the headers a plugin's library includes to call them."""

UNPACKED_ROWS = 16
"""The most rows ``skinny_linear`` (the product on unpacked weights) is given inside
``torch.compile``: measured 1.1 times oneDNN at sixteen rows, slower from 32."""

FLAGS = ("-O3", "-std=c++20", "-fopenmp")
"""The compiler's flags beside those of ``torch.utils.cpp_extension``."""

_libraries: list["NativeLibrary"] = []
_warned = False
_lock = threading.RLock()


def enabled() -> bool:
    """False when ``ZOO_NATIVE`` is set to 0 (or false, no, off)."""
    return os.environ.get("ZOO_NATIVE", "1").strip().lower() not in ("0", "false", "no", "off")


def _compiler() -> str | None:
    return (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
            or shutil.which("clang++"))


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    """The compiler's first ``--version`` line, asked once a process per path."""
    try:
        done = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.splitlines()[0] if done.stdout else ""


def _supported(torch) -> bool:
    return (sys.platform.startswith("linux")
            and torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"))


def _timeout() -> float:
    return float(setting("ZOO_NATIVE_BUILD_TIMEOUT"))


def _off(quiet: bool, why: str) -> bool:
    """False, saying why once a process unless ``quiet``."""
    global _warned
    if not quiet and not _warned:
        _warned = True
        warnings.warn(f"zoo's native libraries are off: {why}. Decoding runs through oneDNN "
                      "and Python instead (slower at one sentence); set ZOO_NATIVE=0 to "
                      "silence this.", RuntimeWarning, stacklevel=_callers_level())
    return False


INSIDE = (str(Path(__file__).resolve().parent),
          str(Path(__file__).resolve().parent.parent / "plugins"))
"""zoo's files and its built-in plugins' (beside it in a checkout)."""


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside zoo, its plugins and torch, counted
    from the caller of this function's caller: a warning names the user's line, however
    deep inside zoo it was raised. (torch's folder is read only where torch is imported:
    this module imports none.)"""
    torch = sys.modules.get("torch")
    inside = INSIDE + ((str(Path(torch.__file__).resolve().parent),) if torch else ())
    level, frame = 2, sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(inside):
        level, frame = level + 1, frame.f_back
    return level


class NativeLibrary:
    """C++ sources compiled into one library that registers operators (zoo's own in
    ``torch.ops.zoo``, a plugin's in a namespace of its own): ``needs`` are libraries whose functions it calls (it is linked against
    them, their headers are on its include path, and it loads only where they do);
    ``on_load`` runs once it is loaded (fake implementations for ``torch.compile``, a check of
    the CPU; it returns False to refuse). Declared once, at import, by the module
    that calls it; ``zoo native build`` builds every one declared (``declare=False``
    leaves it out)."""

    def __init__(self, name: str, sources, headers=(), *, needs=(),
                 on_load: Callable[[], bool] | None = None, declare: bool = True) -> None:
        self.name = name
        self.sources = tuple(Path(s) for s in sources)
        self.headers = tuple(Path(h) for h in headers)
        self.needs = tuple(needs)
        self.on_load = on_load
        self._loaded: bool | None = None
        self._loaded_from: Path | None = None
        """The library file this process loaded: another build of it (other sources)
        is never loaded beside it (two registrations of its operators abort torch)."""
        self._failed_here: str | None = None  # the sources a build in this process failed on
        if declare:  # False: built only by its own build() (a test's, a script's)
            _libraries.append(self)

    def __repr__(self) -> str:
        return f"NativeLibrary({self.name!r})"

    # -- where and what ---------------------------------------------------------------------
    def include_dirs(self) -> list[str]:
        """The folders of its sources and of those of the libraries it needs."""
        dirs = [str(s.parent) for s in self.sources]
        for need in self.needs:
            dirs += need.include_dirs()
        return list(dict.fromkeys(dirs))

    def sources_key(self) -> str:
        """A digest of the sources and headers (by name and content) and of the
        libraries it needs: a wheel's copy and a checkout's have the same."""
        key = hashlib.sha256()
        for path in (*self.sources, *self.headers):
            key.update(path.name.encode() + b"\0")
            key.update(path.read_bytes() if path.is_file() else b"(missing)")
        for need in self.needs:
            key.update(need.sources_key().encode())
        return key.hexdigest()

    def folder(self, torch, cxx: str) -> Path:
        """This library's build folder for these sources (:meth:`sources_key`), this torch
        and this compiler (its path and ``--version``): two installations of zoo with
        other sources (two versions in two environments, a checkout beside a wheel) each
        build and keep their own, where one folder for all had each find the other's
        library stale and build it again, the other's decoding falling back meanwhile."""
        key = hashlib.sha256("\0".join((self.name, self.sources_key(), torch.__version__,
                                        cxx, _compiler_version(cxx), *FLAGS)).encode())
        return cache_root() / f"{self.name}-{key.hexdigest()[:16]}"

    def prune(self, keep: Path, kept: int | None = None) -> None:
        """This library's build folders but ``keep`` and the most recent others removed
        (:func:`zoo.native_cache.prune_builds`)."""
        prune_builds(self.name, keep, self.file, kept)

    def file(self, folder: Path) -> Path:
        """The compiled library in ``folder``."""
        return folder / f"{self.name}.so"

    def _state(self, folder: Path) -> str:
        stamp, failed = folder / "SOURCES", folder / "FAILED"
        current = self.sources_key()
        built = read_record(stamp)
        if built is not None and built.get("sources") == current:
            if not matches(self.file(folder), built):
                return "damaged"
            return "loaded" if self._loaded and self._loaded_from in (
                None, self.file(folder)) else "built"
        if failed.is_file() and failed.read_text() == current:
            return "failed"
        return "stale" if self.file(folder).exists() else "not built"

    def status(self) -> dict:
        """Where this library stands, without compiling: ``state`` is ``loaded`` (in
        this process), ``built``, ``stale`` (built from other sources), ``damaged`` (the
        file is not the one built: cut short by a full disk or a kill, or replaced),
        ``not built``, ``failed`` (see ``log``), ``off`` (ZOO_NATIVE=0), ``unsupported``
        (not Linux with AVX2) or ``no compiler``; with its ``folder``."""
        import torch

        out: dict = {"name": self.name, "state": None, "folder": None, "log": None,
                     "missing": [p.name for p in (*self.sources, *self.headers)
                                 if not p.is_file()]}
        cxx = _compiler()
        if not enabled():
            out["state"] = "off"
        elif not _supported(torch):
            out["state"] = "unsupported"
        elif cxx is None:
            out["state"] = "no compiler"
        else:
            folder = self.folder(torch, cxx)
            out["folder"], out["state"] = str(folder), self._state(folder)
            if out["state"] == "failed":
                out["log"] = str(folder / "build.log")
        return out

    # -- build ------------------------------------------------------------------------------
    def build(self, say: Callable[[str], None] | None = None) -> bool:
        """Compile this library (and those it needs) unless it is built from these
        sources, then load it; True when it runs here. ``say`` (stderr by default)
        hears what happens."""
        import torch
        from filelock import FileLock, Timeout

        say = say or (lambda text: print(f"zoo: {text}", file=sys.stderr))
        cxx = _compiler()
        if not enabled() or not _supported(torch):
            return False
        if cxx is None:
            say("no C++ compiler was found (tried $CXX, c++, g++, clang++); install g++")
            return False
        if not all(need.build(say) for need in self.needs):
            return False
        if self._failed_here == self.sources_key():  # said once: not compiled twice a call
            return False
        folder = self.folder(torch, cxx)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            lock = FileLock(str(folder / ".lock"))
            try:
                lock.acquire(timeout=2)
            except Timeout:
                holder = (folder / ".builder").read_text() if (folder / ".builder").is_file() \
                    else "another process"
                say(f"waiting for {holder}, which is building {self.name} in {folder} "
                    f"(at most {_timeout():.0f} s, ZOO_NATIVE_BUILD_TIMEOUT)")
                lock.acquire(timeout=_timeout())
        except Timeout:
            say(f"gave up waiting for the build of {self.name} in {folder}; stop the "
                "process that holds it, or set ZOO_NATIVE_CACHE to another folder")
            return False
        except OSError as exc:
            say(f"{self.name} cannot be built in {cache_root()} ({exc}); set "
                "ZOO_NATIVE_CACHE to a writable folder")
            return False
        try:
            state = self._state(folder)
            if state not in ("built", "loaded"):
                self._compile(torch, cxx, folder, say, damaged=state == "damaged")
        finally:
            lock.release()
        if self._state(folder) == "built":
            self.prune(folder)
        if self._loaded_from is not None and self._loaded_from != self.file(folder):
            say(f"{self.name} was loaded from {self._loaded_from} before its sources changed; "
                "this process keeps it, the next one loads the new build")
            return bool(self._loaded)
        self._loaded = None
        if self.available(quiet=True):
            return True
        self._failed_here = self.sources_key()
        return False

    def _compile(self, torch, cxx: str, folder: Path, say, *, damaged: bool) -> None:
        try:
            self._run_compiler(torch, cxx, folder, say, damaged)
        except OSError as exc:  # a full disk, a folder made read-only meanwhile
            where = f" ({exc.filename})" if exc.filename else ""
            say(f"compiling {self.name} in {folder} failed: {exc.strerror or exc}{where}; free "
                "some space there or mend that path, or set ZOO_NATIVE_CACHE to another folder")

    def _run_compiler(self, torch, cxx: str, folder: Path, say, damaged: bool) -> None:
        record = read_record(folder / "SOURCES")
        (folder / "SOURCES").unlink(missing_ok=True)
        library = self.file(folder)  # linked again, never trusted as it was
        if library.is_dir() and not library.is_symlink():
            shutil.rmtree(library)  # a folder in its place, inside zoo's own cache folder
        library.unlink(missing_ok=True)
        if damaged:  # objects that are not the ones built are compiled again
            for stale in outputs_to_redo(folder, record):
                stale.unlink(missing_ok=True)
            say(f"{library} is not the library that was built (cut short or replaced); "
                "building it again")
        (folder / ".builder").write_text(f"process {os.getpid()}", encoding="utf-8")
        say(f"compiling {self.name} for torch {torch.__version__} (once; kept in {folder})")
        spec = {"name": self.name, "sources": [str(s) for s in self.sources],
                "include": self.include_dirs(), "folder": str(folder),
                "needs": [str(n.file(n.folder(torch, cxx))) for n in self.needs]}
        env = {**os.environ, "CXX": cxx, "PATH": os.pathsep.join(
            (str(Path(sys.executable).parent), os.environ.get("PATH", "")))}  # pip's ninja
        child = subprocess.Popen(
            [sys.executable, "-c", "from zoo.native import compile_spec; compile_spec()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, start_new_session=True)
        try:
            output, _ = child.communicate(json.dumps(spec), timeout=_timeout())
            why = f"exit status {child.returncode}" if child.returncode else ""
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, _ = child.communicate()
            why = f"stopped after {_timeout():.0f} s (ZOO_NATIVE_BUILD_TIMEOUT)"
        if not why and not library.is_file():
            why = f"no {library.name} was made"
        (folder / "build.log").write_text(output or "", encoding="utf-8")
        if why:
            (folder / "FAILED").write_text(self.sources_key(), encoding="utf-8")
            say(f"compiling {self.name} failed: {why}; see {folder / 'build.log'}")
            return
        (folder / "FAILED").unlink(missing_ok=True)
        write_record(folder / "SOURCES", self.sources_key(), library)

    # -- load -------------------------------------------------------------------------------
    def available(self, *, quiet: bool = False) -> bool:
        """True when this library's operators can be called here: enabled, an AVX2
        CPU, built from these sources (by ``zoo native build``) and loaded now. It
        never compiles, unless ``ZOO_NATIVE=build``; when it is not built it warns once
        and is False."""
        if self._loaded is None:
            import torch

            if torch.compiler.is_compiling():  # loaded outside a traced function only
                return False
            with _lock:
                if self._loaded is None:
                    self._loaded = self._load(torch, quiet)
        return self._loaded

    def _load(self, torch, quiet: bool) -> bool:
        if not enabled() or not _supported(torch):
            return False
        if not all(need.available(quiet=quiet) for need in self.needs):
            return False
        cxx = _compiler()
        if cxx is None:
            return _off(quiet, "no C++ compiler was found (tried $CXX, c++, g++, clang++); "
                        "install g++ and run zoo native build")
        if os.environ.get("ZOO_NATIVE", "").strip().lower() == "build" and not quiet:
            return self.build()
        try:
            folder = self.folder(torch, cxx)
            state = self._state(folder)
        except OSError as exc:
            return _off(quiet, f"{cache_root()} cannot be read ({exc})")
        if state == "failed":
            return _off(quiet, f"compiling {self.name} failed (see {folder / 'build.log'}); "
                        "zoo native build tries again")
        if state == "damaged":
            return _off(quiet, f"{self.file(folder)} is not the library that was built (cut "
                        "short by a full disk or a kill, or replaced); `zoo native build` "
                        "builds it again")
        if state not in ("built", "loaded"):
            return _off(quiet, f"{self.name} is {state} for this installation; `zoo native "
                        "build` compiles it, once (about half a minute on 2 cores)")
        try:
            torch.ops.load_library(str(self.file(folder)))
            self._loaded_from = self.file(folder)
            return self.on_load() if self.on_load is not None else True
        except Exception as exc:  # a library that loads but is not this one's build
            return _off(quiet, f"{self.file(folder)} did not load ({type(exc).__name__}: "
                        f"{exc}); `zoo native build` builds it again")


def compile_spec() -> None:
    """Compile the library a build process describes on standard input (JSON), with
    ``torch.utils.cpp_extension`` and ninja; run by :meth:`NativeLibrary.build` in a
    child process it can stop."""
    import torch
    from torch.utils.cpp_extension import load

    spec = json.load(sys.stdin)
    for need in spec["needs"]:  # loaded first: the new library finds them by name (soname)
        torch.ops.load_library(need)
    soname = f"-Wl,-soname,{spec['name']}.so"
    load(spec["name"], spec["sources"], extra_cflags=list(FLAGS),
         extra_ldflags=["-fopenmp", soname, *spec["needs"]], extra_include_paths=spec["include"],
         build_directory=spec["folder"], is_python_module=False, verbose=True)


def _products_loaded() -> bool:
    import torch

    _ROWS.clear()  # what was said before the products loaded did not know their kernels
    default_rows(), default_rows(int8=True)  # now, outside any traced function: not inside
    if not torch.ops.zoo.cpu_has_avx2_fma():
        return False

    @torch.library.register_fake("zoo::skinny_linear")
    def _(x, weight, bias):  # its shape, for torch.compile
        return x.new_empty((*x.shape[:-1], weight.shape[0]))

    @torch.library.register_fake("zoo::packed_linear")
    def _(x, packed, bias, n_out):
        return x.new_empty((*x.shape[:-1], n_out))

    return True


PRODUCTS = NativeLibrary(
    "zoo_products",
    [CSRC / "packed_linear.cpp", CSRC / "int8_linear.cpp", CSRC / "int4_linear.cpp",
     CSRC / "skinny_linear.cpp",
     CSRC / "fingerprint.cpp", CSRC / "top_k.cpp", CSRC / "weight_memory.cpp"],
    [CSRC / "packed_linear.h", CSRC / "int8_linear.h", CSRC / "int4_linear.h",
     CSRC / "int8_kernel.h",
     CSRC / "int8_kernel512.h", CSRC / "int8_amx.h",
     CSRC / "product_common.h",
     CSRC / "skinny_linear.h", CSRC / "weight_memory.h"],
    on_load=_products_loaded)
"""zoo's products for few rows: ``zoo::packed_linear``, ``zoo::pack_linear_weight``,
``zoo::skinny_linear``; a plugin's library that calls them lists it in ``needs`` and
includes ``packed_linear.h`` and ``product_common.h``."""


def libraries() -> list[NativeLibrary]:
    """Every declared library: zoo's, and those of the plugins loaded so far (``zoo
    native build`` loads every installed plugin first)."""
    return list(_libraries)


def build(say: Callable[[str], None] | None = None) -> bool:
    """Build (or find) every declared library; True when all run here."""
    return all([library.build(say) for library in libraries()])


def status() -> dict:
    """Where zoo's native code stands here, without compiling: the products' ``state``
    and ``folder``, the first failure's ``log``, any file this installation lacks
    (``missing``), and each library's own report (``libraries``). ``state`` is
    ``loaded`` or ``built`` only when every library is."""
    each = [library.status() for library in libraries()]
    states = [s["state"] for s in each]
    order = ("failed", "damaged", "no compiler", "not built", "stale", "off", "unsupported")
    state = next((s for s in order if s in states), None) or (
        "loaded" if all(s == "loaded" for s in states) else "built")
    failed = next((s for s in each if s["log"]), None)
    return {"state": state, "folder": each[0]["folder"], "log": failed and failed["log"],
            "missing": [m for s in each for m in s["missing"]], "libraries": each}


_ROWS: dict[bool, int] = {}


def default_rows(int8: bool = False) -> int:
    """The most rows :class:`zoo.ops.Linear` (``int8``: :class:`zoo.quantization.
    QuantizedLinear`) gives zoo's native product by default, from
    ``python benchmarks/few_row_products.py [--int8]`` on 2-core AMD EPYCs:

    - fp32: 128. On AVX2, 1.15 to 1.3 times oneDNN's packed product at 128 rows, level
      from about 320; on AVX-512 (Zen 4, whose 512-bit operations take two 256-bit
      halves, with the AVX2 kernel), 1.5 times at 128 and 1.2 at 512. On a 2-core Xeon of
      the Sapphire Rapids class, with the AVX-512 kernel: 1.35x at 1 row, 1.6 to 1.8x at
      4 to 20, 1.2 to 1.3x at 64, 1.05 to 1.09x at 128.
    - int8: 128 where PyTorch dispatches AVX2; 4 on AMD's AVX-512 (measured with VNNI on
      256-bit vectors: from 16 rows FBGEMM's 512-bit product is faster, zoo's 0.84 to 0.90
      times it there, 0.7 at 64); 128 on an Intel CPU with AVX-512, where zoo's int8 kernel
      runs on 512-bit vectors: on the Xeon 1.4x FBGEMM's at 1 to 4 rows, 1.3 to 1.45x at 16
      to 32, 1.23 to 1.34x at 64 to 192 (on 256-bit vectors it was 1.02x at 32 and 0.95x at
      64, and the limit 32); 8192 where zoo's int8 products run on AMX's tiles
      (``torch.ops.zoo.int8_isa()``), on the Xeon 1.9 to 2.2x FBGEMM's from 32 to 1,024
      rows, 1.6x at 2,048 and 4,096, 1.4x at 8,192 (an encoder's batch of 32 to 64
      texts)."""
    if int8 not in _ROWS:
        import torch

        if torch.compiler.is_compiling():  # asked outside a traced function first
            return 0
        avx2 = torch.backends.cpu.get_cpu_capability() == "AVX2"
        if not int8 or avx2:
            _ROWS[int8] = 128
        else:
            from .hardware import detect

            if hasattr(torch.ops.zoo, "int8_on_amx") and torch.ops.zoo.int8_on_amx():
                _ROWS[int8] = 8192
            else:
                _ROWS[int8] = 128 if detect().cpu.vendor == "GenuineIntel" else 4
    return _ROWS[int8]


def available() -> bool:
    """True when zoo's products (``torch.ops.zoo.packed_linear``, ``skinny_linear``)
    can be called here: enabled, an AVX2 CPU, and built (``zoo native build``) and
    loaded. Never compiles (unless ``ZOO_NATIVE=build``)."""
    return PRODUCTS.available()
