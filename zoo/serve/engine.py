"""The one thread that runs ``zoo serve``'s models: every request's work is a
:class:`Ticket` in its model's :class:`Lane`, and the thread takes turns over the lanes.

A language model's turn lets waiting replies join its running batch (continuous
batching, :class:`zoo.decoding.batch.RunningBatch`), runs one step of every running
reply, and hands each ticket its pieces; a reply whose client went away or whose time
ran out leaves at the next step. Other work (embeddings, reranking, translation, image
classification, beam search) runs between steps: the embedding requests waiting for a
model run as one call, batched by length as :func:`zoo.embed` batches.

One thread runs them all, so the cores are never shared by two models' products; its
threads follow the cores other processes leave free, as a decoding's do
(:func:`zoo.hardware.threads_for_a_call`), chosen again every :data:`THREADS_EVERY`
seconds. Tickets hear back
through their ``emit`` (called from this thread: the server hands it to its event loop).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..decoding.batch import Piece, Reply, RunningBatch
from ..decoding.text import own_tokenizer
from ..derived import fixed_weights
from ..embedding import embed
from ..errors import RecipeError, ZooError
from ..hardware import threads_for_a_call
from ..kinds import Kind, kind_of, said
from .metrics import Metrics
from .schemas import Limits

log = logging.getLogger("zoo.serve")


def _libc():
    """glibc, for ``malloc_trim``; None elsewhere (macOS, musl)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _libc()

MAPPED_FROM = 1 << 20
"""Bytes: glibc maps allocations this large and larger on their own (a server's caches
of keys and values, a batch's logits), so that freeing one gives it back."""


KERNELS_KEPT = 64
"""The kernels oneDNN keeps made for the shapes it has seen (its primitive cache; 1,024
unless told): a prompt of each new length makes new ones."""


def steady_allocator() -> None:
    """Keep a long-running server's memory from creeping (called before its models
    load or run): glibc's threshold for mapping an allocation on its own is fixed at
    :data:`MAPPED_FROM` (left alone, it rises after each large free, and the batches'
    ever-changing shapes then scatter their buffers through the heap), the engine gives
    free pages back every :data:`TRIM_EVERY` seconds, and oneDNN keeps the kernels of
    :data:`KERNELS_KEPT` shapes, not 1,024 (oneDNN reads the number at its first
    kernel). Each prompt length a server reads made kernels that stayed: from the 150th
    to the 600th of prompts of 5 to 300 tokens (zoo.generate, one new token each), 140
    MB more were in use with oneDNN's default and 70 MB with this (glibc's count of the
    bytes in use; no tensor of Python's was left). A ten-minute mixed soak on a 2-core
    EPYC grew 12.3% before, 6.8% with it (``benchmarks/serve_load.py --soak 600``).
    ``MALLOC_MMAP_THRESHOLD_`` and ``ONEDNN_PRIMITIVE_CACHE_CAPACITY`` set by the user
    are left as they are."""
    if _LIBC is not None and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        _LIBC.mallopt(-3, MAPPED_FROM)  # M_MMAP_THRESHOLD
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(KERNELS_KEPT))

TRIM_EVERY = 5.0
"""Seconds between two returns of the allocator's free pages to the system."""
THREADS_EVERY = 0.25
"""Seconds between two looks at the cores other processes leave free (the threads of
the turns in between): often enough to follow a neighbour, seldom enough that torch's
threads are not set again at every step."""


class QueueFull(Exception):
    """A model's queue holds :attr:`Limits.queue` requests already."""

    def __init__(self, model: str, retry_after: int) -> None:
        super().__init__(f"the queue of model {model!r} is full; try again in "
                         f"{retry_after} s")
        self.retry_after = retry_after


class TimedOut(Exception):
    """A request took longer than :attr:`Limits.seconds`."""


@dataclass(eq=False)
class Ticket:
    """One request's work for the engine.

    ``kind`` is ``"generate"`` (``replies`` joins the model's running batch),
    ``"embed"`` (``texts``: batched with the embedding requests waiting beside it; the
    result is the vectors and the texts' token count) or ``"call"`` (``work(model)``
    runs between steps). ``emit`` hears ``("prepared", Prepared)``,
    ``("pieces", [(choice, Piece), ...])``, ``("done", None)``, ``("result", value)``
    or ``("error", exception)``, from the engine's thread."""

    model: str
    kind: str
    emit: Callable[[tuple[str, Any]], None]
    replies: list[Reply] = field(default_factory=list)
    prepare: Callable[[Any], Any] | None = None
    """For ``"generate"``: ``prepare(model)`` gives the request's
    :class:`~zoo.serve.replies.Prepared` (run in the engine's thread, which then tells
    the ticket ``("prepared", it)``)."""
    texts: list[str] = field(default_factory=list)
    work: Callable[[Any], Any] | None = None
    seconds: float = 300.0
    arrived: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    """Set by the server when the client went away: the work stops at the next step."""
    first_token: float | None = None
    ended: bool = False

    @property
    def deadline(self) -> float:
        """When the request's time runs out (``time.monotonic()``)."""
        return self.arrived + self.seconds

    def end(self, event: tuple[str, Any]) -> None:
        """Hand the ticket its last event (once)."""
        if not self.ended:
            self.ended = True
            self.emit(event)


class Lane:
    """One model's tickets: those waiting, and the replies decoding in its batch."""

    def __init__(self, name: str, model) -> None:
        self.name, self.model = name, model
        self.waiting: deque[Ticket] = deque()
        self.batch = RunningBatch(model) if kind_of(model) is Kind.LANGUAGE_MODEL else None
        self.running: dict[int, tuple[Ticket, int]] = {}
        """id(reply) -> its ticket and its choice index."""

    def busy(self) -> bool:
        """Whether anything waits or runs."""
        return bool(self.waiting) or bool(self.batch and len(self.batch))

    def forget_left(self) -> None:
        """Forget the replies that left the batch."""
        live = {id(r) for r in self.batch.replies}
        self.running = {k: v for k, v in self.running.items() if k in live}

    def fail(self, exc: BaseException, others: list[Ticket] = ()) -> None:
        """End every running ticket (and ``others``) with ``exc``; a fresh batch."""
        tickets = {id(t): t for t, _ in self.running.values()}
        tickets.update((id(t), t) for t in others)
        for ticket in tickets.values():
            ticket.end(("error", exc))
        if self.batch is not None:
            self.batch, self.running = RunningBatch(self.model), {}


class Engine:
    """The thread that runs every lane's work; :meth:`submit` from any thread."""

    def __init__(self, models: dict[str, Any], limits: Limits, metrics: Metrics) -> None:
        self.limits, self.metrics = limits, metrics
        self.lanes = {name: Lane(name, model) for name, model in models.items()}
        self._cond = threading.Condition()
        self._stopping = False
        self._trimmed = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="zoo-serve-engine",
                                        daemon=True)

    def start(self) -> None:
        """Start the thread."""
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is running and waiting (within ``timeout`` seconds), then end."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def submit(self, ticket: Ticket) -> None:
        """Queue ``ticket`` for its model; :class:`QueueFull` when the queue is full."""
        lane = self.lanes[ticket.model]
        with self._cond:
            if len(lane.waiting) >= self.limits.queue:
                raise QueueFull(ticket.model, retry_after=max(1, len(lane.waiting) // 16))
            lane.waiting.append(ticket)
            self.metrics.set("zoo_queue_length", len(lane.waiting), model=lane.name)
            self._cond.notify()

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        with contextlib.ExitStack() as fixed:
            for lane in self.lanes.values():
                fixed.enter_context(fixed_weights(lane.model))
            while True:
                with self._cond:
                    while not self._stopping and not any(
                            lane.busy() for lane in self.lanes.values()):
                        self._cond.wait()
                    if self._stopping and not any(lane.busy() for lane in self.lanes.values()):
                        return
                self._trim_now_and_then()
                with threads_for_a_call():  # the free cores, looked at again now and then
                    until = time.monotonic() + THREADS_EVERY
                    while time.monotonic() < until and any(
                            lane.busy() for lane in self.lanes.values()):
                        for lane in self.lanes.values():
                            if lane.busy():
                                self._guarded_turn(lane)

    def _trim_now_and_then(self) -> None:
        """Every :data:`TRIM_EVERY` seconds, give the C allocator's free pages back to
        the system (glibc's ``malloc_trim``): batches of changing shapes leave free
        memory scattered in its heaps, which the process would otherwise keep."""
        now = time.monotonic()
        if now - self._trimmed < TRIM_EVERY:
            return
        self._trimmed = now
        if _LIBC is not None:
            _LIBC.malloc_trim(0)

    @property
    def alive(self) -> bool:
        """Whether the thread runs (``/health`` says so)."""
        return self._thread.is_alive()

    def _guarded_turn(self, lane: Lane) -> None:
        """A turn; whatever it raises ends the lane's tickets with it, never the thread."""
        try:
            self._turn(lane)
        except Exception as exc:  # noqa: BLE001 - the tickets hear it; the engine goes on
            log.exception("a turn of %s failed", lane.name)
            with self._cond:
                waiting, lane.waiting = list(lane.waiting), deque()
            lane.fail(exc, waiting)

    def _turn(self, lane: Lane) -> None:
        """One turn of a lane: drop what is cancelled or late, let waiting replies join,
        one step, then one piece of other work."""
        now = time.monotonic()
        if lane.batch is not None and len(lane.batch):
            self._drop_gone(lane, now)
        joining, other = self._take(lane, now)
        if joining or (lane.batch is not None and len(lane.batch)):
            self._decode(lane, joining)
        if other:
            self._other(lane, other)

    def _take(self, lane: Lane, now: float) -> tuple[list[Ticket], list[Ticket]]:
        """The generation tickets that join the batch now (each prepared first, in this
        thread), and the other work of this turn (every embedding request waiting, or
        one other ticket); the rest wait, in their order."""
        with self._cond:
            taken, lane.waiting = list(lane.waiting), deque()
        joining, other, back = [], [], []
        rows = len(lane.batch) if lane.batch is not None else 0
        for ticket in taken:
            if ticket.cancelled:
                continue
            if now > ticket.deadline:
                ticket.end(("error", TimedOut("the request waited past its time")))
                continue
            if ticket.prepare is not None and not self._prepare(lane, ticket):
                continue
            if ticket.kind == "generate":
                fits = rows + len(ticket.replies) <= self.limits.rows or not rows
                if fits and lane.batch.admits():
                    joining.append(ticket)
                    rows += len(ticket.replies)
                    continue
            elif ticket.kind == "embed" and all(t.kind == "embed" for t in other):
                other.append(ticket)
                continue
            elif not other:
                other.append(ticket)
                continue
            back.append(ticket)
        with self._cond:
            lane.waiting.extendleft(reversed(back))
            self.metrics.set("zoo_queue_length", len(lane.waiting), model=lane.name)
        return joining, other

    def _prepare(self, lane: Lane, ticket: Ticket) -> bool:
        """Run a generation ticket's ``prepare`` (its template and tokens, read here, where
        every call of the model's tokenizer is made) and tell the ticket; False when it
        failed (the ticket heard why)."""
        prepare, ticket.prepare = ticket.prepare, None
        try:
            prepared = prepare(lane.model)  # a model that does not generate says so
            if lane.batch is None:
                raise RecipeError(f"model {lane.name!r} is {said(kind_of(lane.model))}; "
                                  "it does not generate text")
        except Exception as exc:  # noqa: BLE001 - the request hears it
            if not isinstance(exc, ZooError):
                log.exception("preparing a request to %s failed", lane.name)
            ticket.end(("error", exc))
            return False
        ticket.emit(("prepared", prepared))
        if prepared.beams:  # beam search runs as one call
            ticket.kind, ticket.work = "call", prepared.beam_search
        else:
            ticket.replies = prepared.replies
        return True

    def _drop_gone(self, lane: Lane, now: float) -> None:
        for reply in lane.batch.replies:
            ticket, _ = lane.running[id(reply)]
            if ticket.cancelled or now > ticket.deadline:
                reply.cancelled = True
                if not ticket.cancelled:
                    ticket.end(("error", TimedOut("the reply took longer than its time")))
        lane.batch.cancel_done()
        lane.forget_left()
        self.metrics.set("zoo_running_rows", len(lane.batch), model=lane.name)

    def _decode(self, lane: Lane, joining: list[Ticket]) -> None:
        """Add ``joining`` to the lane's batch, step it, hand out the pieces."""
        for ticket in joining:
            for i, reply in enumerate(ticket.replies):
                lane.running[id(reply)] = (ticket, i)
        try:
            pieces = lane.batch.add([r for t in joining for r in t.replies])
            if len(lane.batch):
                self.metrics.observe("zoo_batch_rows", len(lane.batch), model=lane.name)
                pieces += lane.batch.step()
        except Exception as exc:  # noqa: BLE001 - every ticket of the batch hears it
            log.exception("decoding %s failed", lane.name)
            lane.fail(exc)
            return
        self.metrics.set("zoo_running_rows", len(lane.batch), model=lane.name)
        self._hand_out(lane, pieces)

    def _hand_out(self, lane: Lane, pieces: list[Piece]) -> None:
        by_ticket: dict[int, tuple[Ticket, list]] = {}
        for piece in pieces:
            ticket, choice = lane.running[id(piece.reply)]
            by_ticket.setdefault(id(ticket), (ticket, []))[1].append((choice, piece))
        now = time.monotonic()
        self.metrics.add("zoo_generated_tokens_total", len(pieces), model=lane.name)
        for ticket, given in by_ticket.values():
            if ticket.ended:
                continue
            if ticket.first_token is None:
                ticket.first_token = now
                self.metrics.observe("zoo_time_to_first_token_seconds",
                                     now - ticket.arrived, model=lane.name)
            ticket.emit(("pieces", given))
            if all(r.done for r in ticket.replies):
                ticket.end(("done", None))
        lane.forget_left()

    def _other(self, lane: Lane, tickets: list[Ticket]) -> None:
        """Run embedding requests as one call, or one other ticket's work."""
        try:
            if tickets[0].kind == "embed":
                texts = [text for t in tickets for text in t.texts]
                vectors = embed(lane.model, texts)
                counts = [len(ids) for ids in own_tokenizer(lane.model)(texts)["input_ids"]]
                start = 0
                for ticket in tickets:
                    end = start + len(ticket.texts)
                    ticket.end(("result", (vectors[start:end], sum(counts[start:end]))))
                    start = end
                self.metrics.observe("zoo_batch_rows", len(texts), model=lane.name)
            else:
                tickets[0].end(("result", tickets[0].work(lane.model)))
        except Exception as exc:  # noqa: BLE001 - the request hears it
            if not isinstance(exc, ZooError):
                log.exception("a request to %s failed", lane.name)
            for ticket in tickets:
                ticket.end(("error", exc))
