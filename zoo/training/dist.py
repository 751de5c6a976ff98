"""The processes of one training job under torchrun: set-up with a deadline, the same run
folder on every process and after every restart, and failures said in one error.

``torchrun --max-restarts N`` restarts every worker when one dies. Its agent keeps one
key-value store for the whole job, so each restart sets up its process group under a
prefix of its own (``TORCHELASTIC_RESTART_COUNT``), never meeting the addresses the
dead round left there; and the run folder the first round chose is kept in that store,
so a restarted job finds it and resumes from its last checkpoint.

Every wait is bounded: process-group set-up and each collective give up after
``ZOO_DIST_TIMEOUT`` seconds (default :data:`TIMEOUT`).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch

from ..env_settings import setting
from ..errors import TrainingError

TIMEOUT = 300.0
"""Seconds a process waits for the others (set-up, a collective) before it gives up."""
BEAT = 1.0
"""Seconds between two heartbeats of a process (how the survivors tell who died)."""
RUN_DIR_KEY = "zoo/run_dir"


def timeout() -> float:
    """``ZOO_DIST_TIMEOUT`` seconds, or :data:`TIMEOUT`."""
    return float(setting("ZOO_DIST_TIMEOUT"))


def restart_count() -> int:
    """How many times torchrun has restarted this job's workers (0: the first round)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


class Dist:
    """torchrun's environment, or a single process."""

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.dist = dist
        self.store = None
        self._beating = False
        if self.world > 1 and not dist.is_initialized():
            self._init(device)

    def _init(self, device: torch.device) -> None:
        dist, wait = self.dist, timedelta(seconds=timeout())
        backend = "nccl" if device.type == "cuda" else "gloo"
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        try:
            if host is None or port is None:  # not torchrun's environment: torch's own way
                dist.init_process_group(backend, timeout=wait)
                return
            agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
            self.store = dist.TCPStore(host, int(port), is_master=self.rank == 0 and not agent,
                                       timeout=wait, wait_for_workers=False)
            round_store = dist.PrefixStore(f"zoo/restart-{restart_count()}/", self.store)
            dist.init_process_group(backend, store=round_store, rank=self.rank,
                                    world_size=self.world, timeout=wait)
        except Exception as exc:
            raise TrainingError(
                f"rank {self.rank} of {self.world}: the processes of this torchrun job did not "
                f"all meet within ZOO_DIST_TIMEOUT={wait.total_seconds():g} s ({_short(exc)}). "
                "A process may have died or not started; nothing was trained in this round. "
                "Start the job again (it resumes from the last checkpoint with --resume).") \
                from None
        self._start_heartbeat()

    # -- heartbeats: who is alive ---------------------------------------------------------------
    def _start_heartbeat(self) -> None:
        if self.store is None:
            return
        self._beating = True
        key = f"zoo/restart-{restart_count()}/beat/{self.rank}"

        def beat() -> None:
            while self._beating:
                try:
                    self.store.set(key, str(time.time()))
                except Exception:
                    return
                time.sleep(BEAT)

        threading.Thread(target=beat, name="zoo-heartbeat", daemon=True).start()

    def silent_ranks(self) -> list[int]:
        """The other ranks whose heartbeat stopped (waited for long enough to tell)."""
        if self.store is None:
            return []
        time.sleep(3 * BEAT)
        now, silent = time.time(), []
        for rank in range(self.world):
            if rank == self.rank:
                continue
            try:
                last = float(self.store.get(f"zoo/restart-{restart_count()}/beat/{rank}"))
            except Exception:
                last = 0.0
            if now - last > 2.5 * BEAT:
                silent.append(rank)
        return silent

    def close(self) -> None:
        """Stop the heartbeat (the job is over, or failing)."""
        self._beating = False

    # -- what the loop asks ---------------------------------------------------------------------
    @property
    def main(self) -> bool:
        """True on the process that writes the run's files (rank 0)."""
        return self.rank == 0

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the processes."""
        if self.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        self.dist.all_reduce(t)
        return float(t) / self.world

    def max(self, values: list[float]) -> list[float]:
        """The largest of each of ``values`` over the processes (one collective)."""
        if self.world == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def barrier(self) -> None:
        """Wait for every process."""
        if self.world > 1:
            self.dist.barrier()

    def same_folder(self, path: Path) -> Path:
        """The main process's choice of ``path``, on every process, and after a restart
        the first round's (kept in torchrun's store), so that the job resumes there."""
        if self.world == 1:
            return path
        if self.store is not None and restart_count() > 0:
            try:
                if self.store.check([RUN_DIR_KEY]):
                    return Path(self.store.get(RUN_DIR_KEY).decode())
            except Exception:
                pass
        names = [str(path)]
        self.dist.broadcast_object_list(names, src=0)
        if self.main and self.store is not None:
            self.store.set(RUN_DIR_KEY, names[0])
        return Path(names[0])

    def failure(self, exc: BaseException, run_dir: Path, last: Path | None) -> TrainingError:
        """A collective that failed because another process died or hung, as one error:
        which ranks went silent, the last checkpoint, and the command that resumes."""
        self.close()
        silent = self.silent_ranks()
        who = (f"rank {', '.join(map(str, silent))} stopped" if silent else
               "another process stopped or stopped answering")
        kept = (f"The last checkpoint is {last} (step {int(last.name.removeprefix('step-'))})"
                if last is not None else "No checkpoint was saved yet")
        return TrainingError(
            f"rank {self.rank} of {self.world}: {who} ({_short(exc)}). {kept}. Resume with: "
            f"torchrun --nproc_per_node {self.world} -m zoo train --resume {run_dir} (with "
            "torchrun --max-restarts N the job resumes by itself).")


    def stop_on_sigterm(self, run_dir: Path, last_checkpoint) -> None:
        """When torchrun's agent stops this process (another one failed, and no restart is
        left), say so in one line, naming who went silent, the last checkpoint and the
        command that resumes, then exit: checkpoints are written atomically, so nothing
        is lost by stopping at once."""
        if self.world == 1 or threading.current_thread() is not threading.main_thread():
            return

        def handle(signum, frame) -> None:
            error = self.failure(RuntimeError("torchrun stopped this process"), run_dir,
                                 last_checkpoint(run_dir))
            sys.stderr.write(f"\nzoo: error: {error}\n")
            sys.stderr.flush()
            os._exit(128 + signum)

        signal.signal(signal.SIGTERM, handle)


_DISTRIBUTED_FAILURE = re.compile(
    r"gloo|nccl|Connection (reset|closed|refused)|Broken pipe|timed out|Timeout|"
    r"ProcessGroup|DistBackendError", re.I)


def is_distributed_failure(exc: BaseException) -> bool:
    """True for the errors a collective raises when a peer died or hung."""
    name = type(exc).__name__
    return name in ("DistBackendError", "DistNetworkError", "DistStoreError") or (
        isinstance(exc, RuntimeError) and bool(_DISTRIBUTED_FAILURE.search(str(exc))))


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = re.sub(r"\[/[^\]]*\]\s*", "", text)  # the C++ source paths
    return f"{type(exc).__name__}: {text[:200]}"
