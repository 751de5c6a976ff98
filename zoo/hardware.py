"""What this machine can do, in one place: the CPU (PyTorch's vector capability,
bf16 and AMX matrix units, the cores and the threads in use) and the CUDA devices
(name, compute capability, memory, bf16). ``zoo bench``, ``zoo train`` and
``zoo env`` ask :func:`detect` rather than probing for themselves.

Why bf16 matters: on a CPU without bf16 units (AVX2, or AVX-512 without
AVX512-BF16 or AMX) PyTorch emulates bf16 matrix products. Measured on a 2-core
AMD EPYC with AVX2, a bf16 matmul ran at 0.8 GFLOP/s against fp32's 99: bf16
there is two orders of magnitude slower, not faster.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CPU:
    """The processor as PyTorch sees it."""

    name: str
    """Its model name (``/proc/cpuinfo``), or the platform's word for it."""
    capability: str
    """PyTorch's vector capability: ``AVX512``, ``AVX2``, ``DEFAULT``, ``SVE256``, ..."""
    bf16: bool
    """bf16 dot-product units: AVX512-BF16 or AMX on x86, the BF16 extension on Arm."""
    amx: bool
    """Intel AMX tile units (bf16 and int8 matrix products)."""
    cores: int
    """Logical CPUs this process may run on."""
    threads: int
    """Threads torch uses for intra-op parallelism."""
    flags: tuple[str, ...] = field(default=(), repr=False)
    """The CPU flags zoo looked at, as the system reports them."""
    vnni: bool = False
    """int8 dot products that sum into int32 (AVX512-VNNI or AVX-VNNI): int8 products
    of full 8-bit activations cannot saturate (``zoo.quantize``)."""
    vendor: str = ""
    """Who made it, as the system says (``GenuineIntel``, ``AuthenticAMD``; empty where it
    does not): zoo's measured defaults differ between them (``zoo.native.default_rows``)."""


@dataclass(frozen=True)
class GPU:
    """One CUDA device."""

    index: int
    name: str
    capability: tuple[int, int]
    """Compute capability (9, 0 for a Hopper H100/H200)."""
    memory_gib: float
    bf16: bool


@dataclass(frozen=True)
class Hardware:
    """The CPU and the CUDA devices."""

    cpu: CPU
    gpus: tuple[GPU, ...] = ()

    def has_bf16(self, device: Any = "cpu") -> bool:
        """True when ``device`` multiplies bf16 matrices in hardware."""
        kind, index = _device(device)
        if kind == "cuda":
            return any(g.bf16 for g in self.gpus if index is None or g.index == index)
        return self.cpu.bf16

    def why_no_bf16(self, device: Any = "cpu") -> str:
        """One line saying why ``device`` has no bf16 units (empty when it has them)."""
        if self.has_bf16(device):
            return ""
        kind, _ = _device(device)
        if kind == "cuda":
            return "no CUDA device here with bf16 (compute capability 8.0 or newer)"
        return (f"no bf16 units on this CPU ({self.cpu.name}, {self.cpu.capability}: no "
                "AVX512-BF16 or AMX), so PyTorch emulates bf16 matrix products, about two "
                "orders of magnitude slower than fp32")

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for ``zoo env --json``."""
        return asdict(self)


def _device(device: Any) -> tuple[str, int | None]:
    text = str(device or "cpu")
    kind, _, index = text.partition(":")
    return kind, int(index) if index.isdigit() else None


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _torch_cpu_says(name: str) -> bool:
    """One of torch.cpu's feature probes (private, so absent ones count as False)."""
    import torch

    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:
        return False


def _onednn_allows_amx() -> bool:
    """False where oneDNN is told to dispatch below AMX (``ONEDNN_MAX_CPU_ISA`` or
    ``DNNL_MAX_CPU_ISA``, as ``zoo bench --isa no-amx`` sets): torch's bf16 products and
    attention then run without the tiles, and zoo counts none."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
           or "ALL").upper()
    return cap == "ALL" or "AMX" in cap


def detect_cpu() -> CPU:
    """The CPU, read from PyTorch and ``/proc/cpuinfo``."""
    import torch

    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    arm = platform.machine().lower() in ("aarch64", "arm64")
    amx = ("amx_bf16" in flags or _torch_cpu_says("_is_amx_tile_supported")) and \
        _onednn_allows_amx()
    capability = torch.backends.cpu.get_cpu_capability()
    bf16 = amx or ("avx512_bf16" in flags) or _torch_cpu_says("_is_avx512_bf16_supported") or (
        arm and "bf16" in flags)
    # units PyTorch does not dispatch to (ATEN_CPU_CAPABILITY=avx2 on an AVX512-BF16 CPU, as
    # zoo bench --isa avx2 sets) are not used: its bf16 products are emulated there
    bf16 = bf16 and (arm or capability.startswith("AVX512"))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    name = info.get("model name") or info.get("Model") or platform.processor() or \
        platform.machine()
    vnni = "avx512_vnni" in flags or "avx_vnni" in flags or "avx512vnni" in flags
    looked_at = sorted(f for f in flags if "bf16" in f or "vnni" in f
                       or f.startswith(("amx", "avx512f", "avx2")))
    return CPU(name=name, capability=capability, bf16=bf16,
               amx=amx, cores=cores, threads=torch.get_num_threads(), flags=tuple(looked_at),
               vnni=vnni, vendor=info.get("vendor_id", ""))


def detect_gpus() -> tuple[GPU, ...]:
    """The CUDA devices (none where CUDA is not available)."""
    import torch

    if not torch.cuda.is_available():
        return ()
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        capability = (props.major, props.minor)
        gpus.append(GPU(index=index, name=props.name, capability=capability,
                        memory_gib=round(props.total_memory / 2**30, 1),
                        bf16=capability >= (8, 0)))
    return tuple(gpus)


def cpu_busy(interval: float = 0.5) -> float:
    """Fraction of the machine's CPU time spent busy over ``interval`` (from /proc/stat;
    0.0 where there is none)."""
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle
    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    total = total1 - total0
    return 0.0 if total <= 0 else 1.0 - (idle1 - idle0) / total


BUSY_CORE = 0.75
"""How much of a core other processes must keep busy for it to count as taken."""


def cores_busy(interval: float = 0.25) -> float:
    """How many of the machine's cores other processes keep busy, measured for
    ``interval`` seconds (:func:`cpu_busy` times the cores)."""
    return cpu_busy(interval) * (os.cpu_count() or 1)


def _running_now() -> tuple[int, int]:
    """(threads of the whole machine running or ready to run, this process's running
    threads), as the kernel says at this moment: the running count of /proc/loadavg (the
    kernel's ``nr_running``, which /proc/stat's ``procs_running`` also gives, in a file of
    a few bytes instead of one with every interrupt's count), and the state of each of
    this process's threads."""
    with open("/proc/loadavg", "rb") as f:
        machine = int(f.read().split()[3].split(b"/")[0])
    own = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # a thread that ended meanwhile
            continue
        own += stat[stat.rindex(b")") + 2] == ord("R")
    return machine, own


def others_running(reads: int = 3) -> int:
    """How many threads of other processes are running or ready to run now: the machine's
    runnable threads less this process's own, the most of ``reads`` reads one after the
    other (a busy neighbour is seen at once; 0 where the kernel does not say). About 30
    µs a read."""
    most = 0
    try:
        for _ in range(reads):
            machine, own = _running_now()
            most = max(most, machine - own)
    except (OSError, ValueError, IndexError):
        return 0
    return most


RECHECK_S = 0.1
"""How long :func:`threads_for_a_call` trusts its last count of others' threads: reading
the kernel's counts (a file a thread) between two calls costs 0.6 to 0.9 ms, and, while it
runs, torch's idle threads stop spinning and must be woken at the next call's first
parallel region: measured on a 2-core AVX2 EPYC, one sentence of all-MiniLM-L6-v2 to embed
took 9.8 to 11.8 ms with a count at each call and 6.9 to 7.3 with none. A busy neighbour is
still seen within a tenth of a second."""
_LAST_COUNT = [float("-inf"), 0]  # (when, how many)


def others_running_lately() -> int:
    """:func:`others_running`, read again at most every :data:`RECHECK_S` seconds."""
    now = time.monotonic()
    if now - _LAST_COUNT[0] >= RECHECK_S:
        _LAST_COUNT[1] = others_running()
        _LAST_COUNT[0] = time.monotonic()
    return int(_LAST_COUNT[1])


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


ADAPT_SETTING = "ZOO_ADAPT_THREADS"
"""Set to 0 to keep torch's threads as they are at every call."""


SHORT_CALL = 300
"""Characters of text at most in an int8 model's call that runs on one thread
(:func:`threads_for_a_call` with ``short``): a sentence or two to embed."""


@contextlib.contextmanager
def threads_for_a_call(*, short: bool = False):
    """Torch's intra-op threads, for the ``with`` block (a decoding, a batch of
    embeddings), no more than the cores that other processes leave free now, and at least
    one; put back after. Threads that share a core with a busy neighbour wait for it at
    every one of a decoding's thousands of parallel regions: on a 2-core Xeon, one busy
    process beside a 2-thread decode made it 10 to 27 times slower, where one thread
    loses only the second core (benchmarks/decode_beside_a_neighbour.py). Alone on the
    machine, nothing changes.

    A ``short`` call (a sentence or two for an int8 model to embed: :data:`SHORT_CALL`)
    runs on one thread: a second thread saves it a millisecond, but after a pause it must
    first be woken, and on a virtual machine the host gives an idle core back slowly.
    Measured on a 2-core Xeon (benchmarks/calls_after_idle.py), one int8 sentence of
    all-MiniLM-L6-v2 after 50 ms of idle took 13.8 ms on two threads and 4.5 on one; back
    to back, 2.1 and 2.4. An fp32 or bf16 sentence (7 to 10 ms on one thread) still gains
    from the second: in `zoo bench embed`'s turns, fp32 on one thread gave 103 sentences/s
    where two gave 145.
    ``ZOO_ADAPT_THREADS=0`` keeps the threads as they are."""
    import torch

    wanted = torch.get_num_threads()
    if wanted <= 1 or os.environ.get(ADAPT_SETTING, "1").strip().lower() in (
            "0", "false", "no", "off"):
        yield wanted
        return
    chosen = 1 if short else max(1, min(wanted, usable_cores() - others_running_lately()))
    if chosen == wanted:
        yield wanted
        return
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(wanted)


@functools.lru_cache(maxsize=1)
def detect() -> Hardware:
    """This machine (read once per process)."""
    return Hardware(cpu=detect_cpu(), gpus=detect_gpus())


# -- memory -----------------------------------------------------------------------------------
def memory_available(device: Any = None) -> int:
    """Bytes this process can still allocate on the device a model is built on. On the
    CPU, the least of: the memory the kernel counts as available (``MemAvailable``, else
    the machine's RAM), the room left under the process's cgroup limit
    (``memory.max`` less ``memory.current``; cgroup v1's ``limit_in_bytes`` less
    ``usage_in_bytes``) and under its address-space limit (``RLIMIT_AS`` less its
    current size). On CUDA, the device's free memory plus what torch's allocator holds
    unused."""
    import torch

    device = torch.device(device or "cpu")
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return min(room for _, room in memory_limits())


def memory_limits() -> list[tuple[str, int]]:
    """The CPU memory limits that hold for this process, each as (name, bytes still free
    under it): the machine's available memory always, and a cgroup or ``RLIMIT_AS`` limit
    where one is set."""
    meminfo = _read_numbers("/proc/meminfo", "MemAvailable:")
    ram = meminfo * 1024 if meminfo is not None else (
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    limits = [("available memory", ram)]
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_numbers(limit_file), _read_numbers(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:  # v1's "no limit"
            limits.append(("the cgroup's memory limit", max(0, limit - usage)))
            break
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        soft = -1
    if soft not in (-1, getattr(resource, "RLIM_INFINITY", -1)):
        size = _read_numbers("/proc/self/status", "VmSize:")
        used = size * 1024 if size is not None else 0
        limits.append(("the address-space limit (ulimit -v)", max(0, soft - used)))
    return limits


def _read_numbers(path: str, key: str | None = None) -> int | None:
    """The first number of the file at ``path`` (of its line starting with ``key``), or
    None where the file or the number is not there ("max" included)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if key is None or line.startswith(key):
            words = line.removeprefix(key or "").split()
            return int(words[0]) if words and words[0].isdigit() else None
    return None
