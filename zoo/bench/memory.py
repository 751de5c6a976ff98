"""Peak memory of a block of code, on CUDA (the allocator's statistics) or on the
CPU (the process's resident-set high-water mark, reset before the block).

On Linux the CPU figure comes from ``/proc/self/status`` (VmHWM), reset by
writing 5 to ``/proc/self/clear_refs``; large allocations are made to go
straight to ``mmap`` so that freed tensors leave the resident set at once and
one measurement does not hide inside the previous one's freed heap.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from pathlib import Path

import torch

_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in {_STATUS}")


def cpu_supported() -> bool:
    """True where the CPU's peak memory can be read (Linux's /proc clear_refs)."""
    return sys.platform.startswith("linux") and _STATUS.exists() and _CLEAR_REFS.exists()


class PeakMemory:
    """``with PeakMemory(device) as m: ...`` then ``m.peak``: the most bytes held at
    once inside the block beyond what was held when it began."""

    def __init__(self, device: str | torch.device = "cpu", *, restore: bool = False) -> None:
        """``restore``: afterwards, let large allocations reuse the heap again (glibc's
        largest dynamic threshold), so that code timed later does not pay for mmap and
        page faults on every large tensor."""
        self.device = torch.device(device)
        self.peak: int | None = None
        self._restore = restore
        if self.device.type == "cpu" and cpu_supported():
            libc = _libc()
            if libc is not None:
                libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)  # >= 1 MiB: mmap, returned on free
                self._trim = libc.malloc_trim
            else:
                self._trim = None

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        elif cpu_supported():
            if self._trim is not None:
                self._trim(0)
            _CLEAR_REFS.write_text("5")
            self._base = _status_kib("VmRSS") * 1024
        else:
            self._base = None
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self._base
        elif self._base is not None:
            self.peak = max(0, _status_kib("VmHWM") * 1024 - self._base)
        if self._restore and self.device.type == "cpu" and cpu_supported():
            libc = _libc()
            if libc is not None:
                libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
