"""The conformance kit's checks of the decoding-rule family: off at its defaults, scores
of the right shape that are finite or -inf and equal the reference the rule names,
bad values refused by name, and a place among the rules that exists."""

from __future__ import annotations

from typing import Any

import torch

from ..decoding.rules import Span
from ..errors import RecipeError
from ..registry import Component, registry
from .contract import Failed, Skip, check, close

N, T, V = 3, 5, 40
"""Sequences, tokens so far and vocabulary of the scores a rule is called on."""
SPAN = Span(start=T - 2, max_length=T + 1, min_length=T + 3)
"""The call's lengths: two tokens generated, the next the last (a forced end acts), all
short of the minimum length (a minimum length acts)."""


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, V, (N, T), generator=generator)
    scores = torch.randn(N, V, generator=generator) * 3
    return tokens, scores


def _switched_on(component: Component, settings: Any) -> Any:
    """The settings the check calls the rule with: those given to the kit, else the
    rule's ``example`` (a class attribute: settings by name that switch it on)."""
    if settings is not None and settings.model_dump() != component.validate_settings(
            {}).model_dump():
        return settings
    example = getattr(component.load(), "example", None)
    if example is None:
        raise Skip("the rule gives no example settings (the class attribute example) and "
                   "none were given to the kit")
    return component.validate_settings(dict(example))


@check("rule")
def _rule_off_by_default(component, settings):
    """At its settings' defaults a rule is not wanted (``wanted`` is False): zoo builds a
    rule only for the calls that ask for it."""
    model = component.settings_model
    if model is None:
        raise Failed("the rule declares no Settings (the generation settings it reads)")
    defaults = component.validate_settings({})
    if component.load().wanted(defaults, SPAN):
        raise Failed(f"wanted() is True at the defaults {defaults.model_dump()}")


@check("rule")
def _rule_scores(component, settings):
    """Switched on (by the settings given, else the rule's ``example``), ``rule(tokens,
    scores)`` returns (N, V) scores of the input's dtype, each finite or -inf, the same
    for the same input; where the rule names a ``reference`` (a function ``(tokens,
    scores, settings) -> scores`` written from its paper or transformers' processor),
    equal to it."""
    settings = _switched_on(component, settings)
    span = SPAN
    if not component.load().wanted(settings, span):
        raise Failed(f"wanted() is False for the settings that switch it on "
                     f"({settings.model_dump()})")
    tokens, scores = _inputs()
    out = component.build(settings, span=span)(tokens.clone(), scores.clone())
    if not isinstance(out, torch.Tensor) or out.shape != (N, V) or out.dtype != scores.dtype:
        raise Failed(f"returned {type(out).__name__} "
                     f"{tuple(getattr(out, 'shape', ()))}, expected {scores.dtype} {(N, V)}")
    if bool(torch.isnan(out).any()) or bool((out == float("inf")).any()):
        raise Failed("returned NaN or +inf scores (a forbidden token scores -inf)")
    again = component.build(settings, span=span)(tokens.clone(), scores.clone())
    close(again.nan_to_num(neginf=-1e9), out.nan_to_num(neginf=-1e9), "a second call")
    reference = getattr(component.load(), "reference", None)
    if reference is not None:
        expected = reference(tokens.clone(), scores.clone(), settings)
        if not torch.equal(torch.isinf(out), torch.isinf(expected)):
            raise Failed("forbids other tokens than its reference")
        close(out.masked_fill(torch.isinf(out), 0), expected.masked_fill(
            torch.isinf(expected), 0), "scores against its reference")


@check("rule")
def _rule_refuses_bad_values(component, settings):
    """Each setting the rule reads refuses a value of the wrong type, by name (one
    :class:`~zoo.RecipeError` naming the setting), before a decoding starts."""
    model = component.settings_model
    for key in (model.model_fields if model is not None else ()):
        try:
            component.validate_settings({key: {"not": "a setting's value"}})
        except RecipeError as exc:
            if key not in str(exc):
                raise Failed(f"refused {key}={{...}} without naming it: {exc}") from None
        else:
            raise Failed(f"took a mapping as {key!r}")


@check("rule")
def _rule_place(component, settings):
    """Its ``order`` places it among the rules of its stage (ties run by name); each rule
    it ``replaces`` is a registered rule other than itself, of its own stage (a processor
    standing in for a sampling filter, or the reverse, would switch the replaced rule
    off where it acted), that no other rule replaces too."""
    caps = component.capabilities
    rules = list({id(c): c for c in (*registry.qualified("rule"),
                                     *registry.list("rule"))}.values())
    by_name = {n: c for c in rules for n in (c.name, c.qualified_name)}
    for name in caps.replaces:
        if name in (component.name, component.qualified_name):
            raise Failed("replaces itself")
        if name not in by_name:
            raise Failed(f"replaces {name!r}, which no installed plugin registers "
                         f"(rules: {sorted(registry.names('rule'))})")
        replaced = by_name[name]
        if replaced.capabilities.sampling != caps.sampling:
            stage = "only when sampling" if replaced.capabilities.sampling else "in every decoding"
            raise Failed(f"replaces {name!r}, which acts {stage}, but declares "
                         f"sampling={caps.sampling}: declare sampling="
                         f"{replaced.capabilities.sampling} to act where it acted")
        others = [c.qualified_name for c in rules if c is not component
                  and name in c.capabilities.replaces]
        if others:
            raise Failed(f"replaces {name!r}, which {', '.join(others)} replaces too: one "
                         "rule stands in for a rule")
