"""Continuous batching: the replies to separate requests decoded together, one step of
every running reply at a time, a new reply joining between two steps and a finished
one leaving (Yu et al. 2022, "Orca", iteration-level scheduling).

A :class:`Reply` is one prompt's decoding: its own settings, rules, sampler and text, so
that what it gives equals what :func:`zoo.complete` or :func:`zoo.chat` gives for the
same prompt alone (the same rules on the same scores, the same draws from a generator
seeded by its own ``seed``). A :class:`RunningBatch` holds the replies of one language
model: :meth:`RunningBatch.add` reads new prompts together (padded on the left, as a
batch of prompts is) and joins their caches to the running rows
(:meth:`zoo.cache.LanguageModelCache.join`); :meth:`RunningBatch.step` gives every
running reply its next token in one call of the model; finished and cancelled replies
leave at once. A model whose cache cannot join (a recurrent state, no cache at all, or
positions that count padding) decodes one group at a time: a new reply waits until the
group it would join has ended.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..attention import MultiHeadAttention
from ..cache import LanguageModelCache
from ..kinds import StaticDecoding
from .rules import Rules
from .search import next_tokens
from .settings import GenerationSettings
from .steps import PromptSteps
from .text import TextPieces


@dataclass(frozen=True)
class Piece:
    """What one step gave one reply: its new ``text`` (never half a character), the
    ``token`` chosen, its log-probability and the most likely tokens' (with
    ``Reply.logprobs``), and ``finish`` ("stop": its end token or a stop string;
    "length": its length limit) when it is the reply's last."""

    reply: Reply | None
    text: str
    token: int
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] = ()
    finish: str | None = None


class Reply:
    """One prompt's reply, decoded step by step in a :class:`RunningBatch`.

    ``ids`` (1, L) is the prompt, ``settings`` its generation settings (one sequence:
    ``num_beams`` 1), ``text`` the :class:`~zoo.decoding.text.TextPieces` that turns its
    tokens into text and says where it ends. ``logprobs``: None for none, else the
    number of most likely tokens to give with each chosen one's log-probability (from
    the model's distribution, before the rules)."""

    def __init__(self, ids: torch.Tensor, settings: GenerationSettings, text: TextPieces, *,
                 logprobs: int | None = None) -> None:
        if settings.num_beams != 1:
            raise ValueError("a reply in a running batch is one sequence (num_beams=1)")
        self.ids, self.settings, self.text, self.logprobs = ids, settings, text, logprobs
        self.tokens = ids
        self.rules = Rules(settings, start=ids.shape[1])
        self.generator = (torch.Generator(device=ids.device).manual_seed(settings.seed)
                          if settings.do_sample and settings.seed is not None else None)
        self.cancelled = False
        """Set from any thread: the reply leaves the batch at its next step."""
        self.finish: str | None = None

    @property
    def new_tokens(self) -> int:
        """How many tokens the reply holds so far."""
        return self.tokens.shape[1] - self.ids.shape[1]

    @property
    def done(self) -> bool:
        """Finished, or cancelled."""
        return self.finish is not None or self.cancelled

    def take(self, logits: torch.Tensor) -> Piece:
        """Choose the next token from the model's ``logits`` (1, V), as the engine's
        search does for one row (:func:`zoo.decoding.search.one_per_row`)."""
        token = int(next_tokens(self.rules, self.tokens, logits, self.generator)[0])
        self.tokens = torch.cat([self.tokens, self.tokens.new_tensor([[token]])], dim=1)
        logprob, top = self._logprobs(logits, token)
        text = self.text.add(token)
        if self.text.done:
            self.finish = "stop"
        elif self.tokens.shape[1] >= self.rules.max_length:
            self.finish = "length"
            text += self.text.rest()  # the length limit: what was held back
        return Piece(self, text, token, logprob, top, self.finish)

    def _logprobs(self, logits: torch.Tensor, token: int):
        if self.logprobs is None:
            return None, ()
        logp = logits[0].log_softmax(-1)
        top = ()
        if self.logprobs:
            values, ids = logp.topk(min(self.logprobs, logp.shape[0]))
            top = tuple(zip(ids.tolist(), values.tolist()))
        return float(logp[token]), top


NATIVE_STEPS = 256
"""The most steps the native step's buffers are made for at once: a reply allowed
thousands of tokens does not hold buffers for all of them from its start."""
SHORTEST_WASTE = 32
"""The fewest positions of padding in front of every row worth reading the rows again
without."""


class RunningBatch:
    """The replies of one language ``model`` decoded together (continuous batching):
    :meth:`add` new ones between steps, :meth:`step` all of them once; a reply leaves
    as soon as it is done. Call it without autograd, with the model's weights fixed.

    The rows are padded on the left to one length, as a batch of prompts is, so that a
    position means the same in every row (rotary keys are turned by it): a new prompt no
    longer than the running rows is read padded to their length and its cache joins
    theirs; a longer one has them read again with it, padded to its length. Once the
    padding that finished rows leave in front of every row is at least ``waste`` of the
    rows' length (and :data:`SHORTEST_WASTE` positions), the rows are read again without
    it."""

    def __init__(self, model, *, waste: float = 0.5) -> None:
        self.model, self.waste = model, waste
        self.replies: list[Reply] = []
        self.steps: PromptSteps | None = None
        self.tokens: torch.Tensor | None = None
        """(N, T) every row's tokens so far, padded on the left; the last column holds
        each row's newest token, which the model has not read yet."""
        self.padding: torch.Tensor | None = None
        """(N, T) True at that padding."""
        self.joins = True
        """Whether a new reply may join running ones (else it waits for them to end)."""
        self.reads = 0
        """How many times running rows were read again (a longer prompt, or padding)."""
        self.shifts = 0
        """How many times running rows were padded on the left for a longer prompt."""
        self.static = None
        """The native step over the running rows, while they stay the same (None: the
        steps run in Python)."""
        self.native = True
        """Whether the model may have a native step (False once it showed it has none)."""

    def __len__(self) -> int:
        return len(self.replies)

    def admits(self) -> bool:
        """Whether :meth:`add` takes new replies now."""
        return not self.replies or self.joins

    def add(self, replies: list[Reply]) -> list[Piece]:
        """Read the prompts of ``replies`` and give each its first token; they then run
        with the others. Returns each one's first piece."""
        if not replies:
            return []
        if not self.admits():
            raise ValueError("this batch's model decodes one group at a time; wait until "
                             "the running replies end")
        self._in_python()
        pad = replies[0].settings.pad_id
        ids, mask = _padded([r.ids for r in replies], max(r.ids.shape[1] for r in replies),
                            pad)
        old = len(self.replies)
        if not old:
            logits = self._read(ids, mask)
        elif ids.shape[1] <= self.tokens.shape[1] - 1:
            logits = self._join(*_widen(ids, mask, self.tokens.shape[1] - 1, pad))
        elif self._shifted(ids.shape[1] - (self.tokens.shape[1] - 1), pad):
            logits = self._join(ids, mask)
        else:  # the running rows are read again, padded to the new prompts' length
            rows, held = _widen(self.tokens[:, :-1], self.padding[:, :-1], ids.shape[1], pad)
            newest = self.tokens[:, -1:]
            logits = self._read(torch.cat([rows, ids]), torch.cat([held, mask]))[old:]
            self.tokens[:old, -1:] = newest
            self.reads += 1
        self.replies += replies
        pieces = [r.take(logits[i:i + 1]) for i, r in enumerate(replies)]
        self.tokens[old:, -1] = torch.tensor([p.token for p in pieces], device=self.tokens.device)
        self._leave()
        return pieces

    def step(self) -> list[Piece]:
        """Every running reply's next token, from one call of the model."""
        if not self.replies:
            return []
        logits = self._logits()
        pieces = [r.take(logits[i:i + 1]) for i, r in enumerate(self.replies)]
        self.tokens = torch.cat([self.tokens, torch.tensor([[p.token] for p in pieces], device=self.tokens.device)],
                                dim=1)
        self.padding = torch.nn.functional.pad(self.padding, (0, 1), value=False)
        self._leave()
        return pieces

    def cancel_done(self) -> None:
        """Let cancelled replies leave now (between steps)."""
        self._leave()

    # -- the steps -------------------------------------------------------------------------------
    def _logits(self) -> torch.Tensor:
        """The running rows' next-token logits: in the native step while the rows stay
        the same, else in Python."""
        if self.static is None and self.native:
            self.static = self._static()
        if self.static is not None and self.static.filled >= self.static.length:
            self._in_python()  # its buffers are full: the next ones from here
            self.static = self._static()
        if self.static is not None:
            return self.static(self.tokens[:, -1:])[:, -1].float()
        return self.steps(self.tokens)

    def _static(self):
        """The model's static steps over the running rows' cache (zoo's native step),
        with buffers for the steps the rows may still take (:data:`NATIVE_STEPS` at a
        time), or None where the model has none for them."""
        cache = self.steps.cache if self.steps is not None else None
        if not isinstance(self.model, StaticDecoding) or not _joinable(cache):
            self.native = False
            return None
        left = max(r.rules.max_length - r.tokens.shape[1] for r in self.replies)
        static = self.model.static_decoder(cache, length=max(1, min(NATIVE_STEPS, left)))
        if static is None or not callable(getattr(static, "cache", None)):
            return None  # these rows stay in Python; other rows may not
        return static

    def _in_python(self) -> None:
        """Go on from the native step's buffers in a cache (the rows are about to
        change)."""
        if self.static is not None:
            self.steps.cache = self.static.cache()
            self.static = None

    # -- the rows --------------------------------------------------------------------------------
    def _read(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Read ``ids`` (N, L) (padded where ``mask``) as the running rows, in a fresh
        cache; their next token's logits. A column is kept for each row's next token."""
        self.steps = PromptSteps(self.model, ids, mask if bool(mask.any()) else None)
        logits = self.steps(ids)
        if self.steps.cache is not None:  # the cache holds the padding from now on
            self.steps.mask = None
        self.tokens = torch.nn.functional.pad(ids, (0, 1))
        self.padding = torch.nn.functional.pad(mask, (0, 1), value=False)
        self.joins = _joinable(self.steps.cache)
        return logits

    def _join(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Read new prompts ``ids``, as long as the running rows' cache, and join it."""
        steps = PromptSteps(self.model, ids, mask if bool(mask.any()) else None)
        logits = steps(ids)
        self.steps.cache.join(steps.cache)
        self.tokens = torch.cat([self.tokens, torch.nn.functional.pad(ids, (0, 1))])
        self.padding = torch.cat([self.padding,
                                  torch.nn.functional.pad(mask, (0, 1), value=False)])
        return logits

    def _shifted(self, delta: int, pad: int) -> bool:
        """Pad the running rows on the left by ``delta`` positions, their keys moved
        there (:meth:`zoo.cache.LanguageModelCache.shift`), so that a prompt that much
        longer joins without reading them again; False (nothing done) where the model's
        attention cannot say how its keys move."""
        cache = self.steps.cache
        if not self.joins or not _joinable(cache):
            return False
        attentions = [m for m in self.model.modules()
                      if isinstance(m, MultiHeadAttention) and not m.cross]
        if len(attentions) != len(cache) or any(
                a.position_kind not in MultiHeadAttention.SHIFTABLE for a in attentions):
            return False
        cache.shift(delta, [a.shifted_keys for a in attentions])
        self.tokens, self.padding = _widen(self.tokens, self.padding,
                                           self.tokens.shape[1] + delta, pad)
        self.shifts += 1
        return True

    def _leave(self) -> None:
        keep = [i for i, r in enumerate(self.replies) if not r.done]
        if len(keep) == len(self.replies):
            return
        if not keep:
            self.replies, self.steps, self.tokens, self.padding = [], None, None, None
            self.joins, self.static = True, None
            return
        self._in_python()
        index = torch.tensor(keep, device=self.tokens.device)
        self.steps.reorder(index)
        self.tokens, self.padding = self.tokens[index], self.padding[index]
        self.replies = [self.replies[i] for i in keep]
        self._compact()

    def _compact(self) -> None:
        """Read the rows again without the padding in front of all of them, once it is
        :attr:`waste` of their length."""
        width = self.tokens.shape[1]
        real = (~self.padding).any(0).nonzero()
        lead = int(real[0]) if real.numel() else 0
        if not self.joins or lead < max(SHORTEST_WASTE, self.waste * width):
            return
        newest = self.tokens[:, -1:]
        self._read(self.tokens[:, lead:-1], self.padding[:, lead:-1])
        self.tokens[:, -1:] = newest
        self.reads += 1


def _padded(prompts: list[torch.Tensor], width: int, pad: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts (1, L_i) as one (N, width) batch padded on the left, and its padding
    mask (True at padding)."""
    ids = torch.cat([torch.nn.functional.pad(p, (width - p.shape[1], 0), value=pad)
                     for p in prompts])
    mask = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    for i, p in enumerate(prompts):
        mask[i, :width - p.shape[1]] = True
    return ids, mask


def _widen(ids: torch.Tensor, mask: torch.Tensor, width: int, pad: int
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch ``ids`` (N, L) and its ``mask`` padded further on the left, to
    ``width``."""
    more = width - ids.shape[1]
    return (torch.nn.functional.pad(ids, (more, 0), value=pad),
            torch.nn.functional.pad(mask, (more, 0), value=True))


def _joinable(cache) -> bool:
    """Whether rows read apart may join ``cache``: keys and values of every layer."""
    return isinstance(cache, LanguageModelCache) and cache.joinable
