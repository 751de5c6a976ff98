"""Copies derived from weights (packed for a product, joined, quantised), kept only while
they are proven to match the weights they were made from.

torch counts in-place changes of a tensor in its version counter, but not every write
goes through it: ``weight.data.mul_(3)``, ``weight.data[0] = 100``, a NumPy view of the
weight and another tensor sharing its storage all change the numbers and leave the
version as it was. A copy keyed only on the storage and the version would then give
results of the old weight. So each copy also keeps a fingerprint of its sources' bytes
(:func:`fingerprint`), and is used only once that fingerprint has been read again:

- **inside** :func:`fixed_weights` (which every decoding call enters for its model), a
  copy is checked at its first use and trusted for the rest of the block: the weights of
  the model are promised not to change while it decodes (its key/value caches would not
  be valid either);
- **outside** it, at every use. :class:`zoo.ops.Linear` does not keep copies there at
  all (it multiplies by the weight as it is); int8 layers, whose kernels need a packed
  weight, check it at each call.

Reading the fingerprint costs one read of the weights at about the memory's rate: 8 ms
for transformer-base's 63 million on the 2-core CPU this project runs on
(``torch.ops.zoo.fingerprint``), about a twentieth of one sentence's greedy decoding; a
caller that decodes many times keeps one block open around them all and pays it once.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import torch
from torch import nn

from . import native

PRIVATE = object()
"""The mark of a module whose weights are a private copy that nothing else writes (a
decoder's joined q|k|v): its derived copies are trusted everywhere."""

_local = threading.local()
_SLOT = "_zoo_derived"


class _Kept:
    """What a module keeps of this module's: its mark (the block that fixed its weights
    last, or PRIVATE) and its derived copies by name. Copies and pickles of the module get
    an empty one: a model's copy never carries packed weights (nor a mark)."""

    __slots__ = ("mark", "copies")

    def __init__(self) -> None:
        self.mark = None
        self.copies: dict = {}

    def __reduce__(self):
        return (_Kept, ())

    def __deepcopy__(self, memo) -> "_Kept":
        return _Kept()


def _kept(module: nn.Module) -> _Kept:
    kept = module.__dict__.get(_SLOT)
    if kept is None:
        kept = module.__dict__[_SLOT] = _Kept()
    return kept


def _mark(module: nn.Module):
    kept = module.__dict__.get(_SLOT)
    return None if kept is None else kept.mark


def _active() -> list:
    scopes = getattr(_local, "scopes", None)
    if scopes is None:
        scopes = _local.scopes = []
    return scopes


def _holds(mark) -> bool:
    """True when ``mark`` promises fixed weights here: PRIVATE, or a block open in this
    thread."""
    return mark is PRIVATE or (mark is not None and mark in _active())


def trusted(module: nn.Module) -> bool:
    """True when ``module``'s weights are promised fixed here: it belongs to a model of an
    open :func:`fixed_weights` block of this thread, or it is marked :data:`PRIVATE`."""
    return _holds(_mark(module))


@contextlib.contextmanager
def fixed_weights(model: nn.Module) -> Iterator[None]:
    """A block in which ``model``'s weights do not change: derived copies of them are
    checked once (at their first use in the block) instead of at every use. Nested
    blocks over the same model cost nothing more. Decoding enters one for its model;
    enter one yourself around many calls to check the weights once for them all. Its
    modules' classes and settings (a norm's eps) are taken as fixed too: a native plan of
    its layers made in the block is kept for the block's calls; change them between
    blocks."""
    if _holds(_mark(model)):  # inside a block over it already: nothing to mark
        yield
        return
    scope = object()
    marked = []
    for module in model.modules():
        kept = _kept(module)
        previous = kept.mark
        if _holds(previous):
            continue
        kept.mark = scope
        marked.append((kept, previous))
    _active().append(scope)
    try:
        yield
    finally:
        _active().remove(scope)
        for kept, previous in marked:
            if kept.mark is scope:
                kept.mark = previous


def private_copy(module: nn.Module) -> nn.Module:
    """Mark ``module`` as holding weights of its own that nothing else writes (a copy
    joined from other weights, made by :func:`derived`): its own derived copies are
    trusted everywhere. Returns it."""
    _kept(module).mark = PRIVATE
    return module


def fingerprint(tensor: torch.Tensor) -> int:
    """A 64-bit digest of the tensor's bytes that changes when any of them does
    (``torch.ops.zoo.fingerprint`` where zoo's native products are built). Without
    them, sums of blocks of 61 words weighted by the block's place: a change within one
    block that keeps its sum (two words swapped) goes unseen there."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if native.available():
        return int(torch.ops.zoo.fingerprint(t))
    raw = t.reshape(-1).view(torch.uint8)
    whole = raw.numel() // 244 * 244
    blocks = raw[:whole].view(torch.int32).view(-1, 61).sum(1, dtype=torch.int64)
    place = torch.arange(1, blocks.numel() + 1, dtype=torch.int64)
    tail = raw[whole:].to(torch.int64)
    return hash((int((blocks * place).sum()), int(blocks.sum()), tuple(tail.tolist()),
                 raw.numel()))


def _key(sources: tuple) -> tuple:
    return tuple(None if t is None else (t.data_ptr(), t._version, t.dtype, tuple(t.shape))
                 for t in sources)


def fingerprints(tensors: list[torch.Tensor]) -> list[int]:
    """:func:`fingerprint` of each tensor: CPU tensors all in one native call
    (``torch.ops.zoo.fingerprints``) where zoo's native products are built, which for a
    model's hundred tensors saves a hundred calls of a few microseconds each."""
    if native.available() and all(t.device.type == "cpu" and t.is_contiguous()
                                  for t in tensors):
        return list(torch.ops.zoo.fingerprints(tensors))
    return [fingerprint(t) for t in tensors]


def _prints(sources: tuple) -> tuple:
    prints = iter(fingerprints([t for t in sources if t is not None]))
    return tuple(None if t is None else next(prints) for t in sources)


def derived(module: nn.Module, name: str, sources: tuple, make: Callable, tag=None):
    """``make()``, kept beside ``module`` as its copy ``name`` while it matches ``sources``
    (the tensors it is made from, None for an absent one) and ``tag``: the same storages
    and versions, and the same bytes, read again at its first use in a
    :func:`fixed_weights` block over ``module`` (once), or at every use outside one."""
    key = (_key(sources), tag)
    copies = _kept(module).copies
    kept = copies.get(name)
    if kept is not None and kept[0] == key:
        if _holds(kept[3]):
            return kept[2]
        prints = _prints(sources)
        if prints == kept[1]:
            copies[name] = (key, prints, kept[2], _checked_in(module))
            return kept[2]
    else:
        prints = _prints(sources)
    value = make()
    copies[name] = (key, prints, value, _checked_in(module))
    return value


def held(module: nn.Module, name: str):
    """``module``'s copy ``name`` where it was checked in a block that still holds here (or
    is PRIVATE), else None: a copy whose sources are costly to gather again (a whole
    model's) taken without gathering them, as the block promises they do not change. Its
    owner still sees what torch counts (a plan's tensors' versions), or calls
    :func:`derived` with the sources."""
    holder = module.__dict__.get(_SLOT)
    kept = None if holder is None else holder.copies.get(name)
    return kept[2] if kept is not None and _holds(kept[3]) else None


def _checked_in(module: nn.Module):
    """The scope in which a check of ``module``'s copies holds: its open block, PRIVATE,
    or None (outside a block: checked again at the next use)."""
    mark = _mark(module)
    return mark if _holds(mark) else None


def forget(module: nn.Module, *names: str) -> None:
    """Drop ``module``'s derived copies ``names`` (they are made again when needed)."""
    holder = module.__dict__.get(_SLOT)
    for name in names if holder is not None else ():
        holder.copies.pop(name, None)


def kept(module: nn.Module) -> tuple[str, ...]:
    """The names of the derived copies kept for ``module`` now."""
    holder = module.__dict__.get(_SLOT)
    return tuple(holder.copies) if holder is not None else ()
