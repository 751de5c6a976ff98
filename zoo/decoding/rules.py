"""What the settings do to the next token's scores, each step: the decoding rules, a
family of their own (``rule``) that plugins extend.

A rule is a small class (:class:`Rule`) built from the generation settings it reads;
the built-ins (``zoo.plugins.rules``) are transformers' logits processors and warpers,
in the same order and with the same arithmetic, so an imported model decodes and
samples as it does there (``tests/test_decoding.py`` holds each equal to transformers'
own on the same logits). A rule with the ``sampling`` capability filters the
distribution a sample is drawn from and acts only with ``do_sample``; the others act on
every decoding. :class:`Rules` is what one decoding call applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict

from ..errors import RecipeError
from .settings import GenerationSettings, rule_readers, standing_rules

NEVER = float("-inf")


@dataclass(frozen=True)
class Span:
    """The lengths of one decoding call, each counting the sequences' first tokens."""

    start: int
    """The tokens every sequence begins with (the start token, or a prompt)."""
    max_length: int
    """The longest a sequence may grow."""
    min_length: int
    """No end token in a sequence shorter than this."""


class Rule:
    """Base of the ``rule`` family: one rule of generation, applied to each step's
    scores. A subclass declares the generation settings it reads as its ``Settings``
    (zoo's own names, such as ``top_p``, or new ones: ``zoo.generate`` then takes those
    by name too), is built as ``cls(settings, span=span)`` for a decoding call when
    :meth:`wanted` holds, and is called at each step."""

    class Settings(BaseModel):
        """The generation settings the rule reads, with the defaults that switch it off."""

        model_config = ConfigDict(extra="forbid")

    example: dict[str, Any] | None = None
    """Settings by name that switch the rule on (``{"min_p": 0.1}``): the conformance
    kit calls the rule with them (``zoo.testing.check_component("rule", NAME)``)."""
    reference: Any = None
    """Optionally a function ``(tokens, scores, settings) -> scores`` written from the
    rule's paper or from transformers' processor: the kit holds the rule's scores to it."""

    def __init__(self, settings: BaseModel, span: Span) -> None:
        self.settings, self.span = settings, span

    @classmethod
    def wanted(cls, settings: BaseModel, span: Span) -> bool:
        """Whether this call needs the rule; by default when a setting it reads differs
        from its default."""
        return any(getattr(settings, key) != field.get_default(call_default_factory=True)
                   for key, field in type(settings).model_fields.items())

    def __call__(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """The scores (N, V) of the next token after the rule, for the sequences
        ``tokens`` (N, T) so far; a forbidden token scores -inf. ``scores`` is the
        call's own copy: a rule may change it in place and return it."""
        raise NotImplementedError(f"{type(self).__name__} does not say what it does "
                                  "(__call__)")


def build_rules(values: dict[str, Any], span: Span, *, sampling: bool,
                names: tuple[str, ...] | None = None) -> list[Rule]:
    """The registered rules of one stage (``sampling``: the filters; ``names``: only
    these) that ``values`` (the generation settings by name) switch on, in their
    order."""
    chosen = []
    for component in standing_rules():
        if component.capabilities.sampling != sampling or (names and component.name
                                                           not in names):
            continue
        model = component.settings_model
        mine = {k: values[k] for k in (model.model_fields if model else ()) if k in values}
        settings = component.validate_settings(mine)
        if component.load().wanted(settings, span):
            chosen.append((component.capabilities.order, component.name,
                           component.build(settings, span=span)))
    return [rule for _, _, rule in sorted(chosen, key=lambda c: c[:2])]


ENGINE = frozenset({"start_id", "eos_ids", "pad_id", "max_length", "max_new_tokens",
                    "source_length_limit",
                    "num_beams", "length_penalty", "length_penalty_form", "early_stopping",
                    "do_sample", "seed", "rule_settings"})
"""The settings the searches read themselves; every other one is a rule's."""


def check_followed(settings: GenerationSettings) -> None:
    """Refuse settings that ask for a rule no installed rule follows (zoo's own rules
    plugin failed to load, say): a decoding would otherwise leave it out silently."""
    read = set(rule_readers())
    fields = GenerationSettings.model_fields
    unread = [k for k, f in fields.items() if k not in ENGINE | read
              and getattr(settings, k) != f.get_default(call_default_factory=True)]
    if unread:
        raise RecipeError(f"no installed decoding rule follows the generation settings "
                          f"{unread}: zoo's rules (family 'rule') did not load; `zoo plugins` "
                          "says why")


class Rules:
    """The rules of ``settings`` for sequences that begin with ``start`` tokens (the
    start token, or a prompt; after sources of ``source`` tokens), applied to the scores (N, V) of their next token."""

    def __init__(self, settings: GenerationSettings, start: int,
                 source: int | None = None) -> None:
        self.settings = settings
        self.start = start
        self.max_length = settings.length_limit(start, source)
        self.min_length = settings.min_length_for(start)
        span = Span(start, self.max_length, self.min_length)
        check_followed(settings)
        values = {**settings.model_dump(exclude={"rule_settings"}), **settings.rule_settings}
        self.rules = build_rules(values, span, sampling=False)
        self.filters = build_rules(values, span, sampling=True) if settings.do_sample else []
        self._checked = False

    def process(self, tokens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` (N, V) after the rules that act on every decoding, for the
        sequences ``tokens`` (N, T) so far (transformers' processors: the repetition
        penalty, no repeated n-gram, forbidden tokens, no end before the minimum length,
        a forced first and a forced last token, ``renormalize``)."""
        if not self._checked:
            check_vocabulary(self.settings, scores.shape[-1])
            self._checked = True
        scores = scores.clone()
        for rule in self.rules:
            scores = rule(tokens, scores)
        return scores

    def warp(self, scores: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """The filters of sampling on ``scores`` (N, V), in transformers' order:
        temperature, top-k, top-p, min-p, typical, epsilon, eta, and plugins' filters
        where their order puts them; a filtered token's score is -inf."""
        if self.filters:
            scores = scores.clone()
        for rule in self.filters:
            scores = rule(tokens, scores)
        return scores


def check_vocabulary(settings: GenerationSettings, vocab: int) -> None:
    """Refuse settings that name a token past the model's vocabulary."""
    ids = [settings.start_id, settings.pad_id, *settings.eos_ids, *settings.forbidden_ids,
           *(i for i in (settings.forced_bos_id, settings.forced_eos_id) if i is not None)]
    bad = [i for i in ids if i >= vocab]
    if bad:
        raise RecipeError(f"generation settings name token ids {bad}, past the model's "
                          f"vocabulary of {vocab}: the settings belong to another model")


def filter_logits(logits: torch.Tensor, *, top_k: int | None = None, top_p: float | None = None,
                  min_p: float | None = None) -> torch.Tensor:
    """Keep the ``top_k`` most likely tokens, then the smallest set whose probability
    reaches ``top_p``, then those at least ``min_p`` times as likely as the most likely
    one; the rest score -inf. The most likely token is always kept. (The registered
    ``top-k``, ``top-p`` and ``min-p`` rules, on their own.)"""
    values = {"top_k": top_k, "top_p": 1.0 if top_p is None else top_p, "min_p": min_p}
    rules = build_rules(values, Span(0, 0, 0), sampling=True,
                        names=("top-k", "top-p", "min-p"))
    if rules:
        logits = logits.clone()  # the rules write in place: the caller's logits stay
    for rule in rules:
        logits = rule(None, logits)
    return logits
