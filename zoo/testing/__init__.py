"""The conformance kit: the contract checks zoo runs on its own components, for yours.

As scikit-learn's ``check_estimator`` is for estimators, :func:`check_component`
runs on a registered component every check of its family's contract, as far as
its declared capabilities claim (an attention that claims ``kv_cache`` must decode
step by step exactly as it computes the whole sequence; one that does not claim it
is not asked to)::

    import zoo.testing
    zoo.testing.check_component("attention", "multi-query")   # raises on a breach

In a pytest suite, one test per check::

    @zoo.testing.parametrize("attention", "multi-query")
    def test_multi_query_conforms(check):
        check()

A failing check raises :class:`ConformanceError`, naming the check, the capability
it holds the component to, and the difference it found. The kit builds what it
needs from its own reference parts (a kernel written from the formula, reference
positions, a reference attention for blocks), so a check never depends on another
plugin being installed.

The contract and its comparisons are in :mod:`zoo.testing.contract`, the reference parts
in :mod:`zoo.testing.references`, and each family's checks in a module of its own
(:mod:`zoo.testing.attention_checks`, ...).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from ..errors import RecipeError
from ..registry import Component, registry
from . import (
    architecture_checks,
    attention_checks,
    block_checks,
    format_checks,
    kernel_checks,
    loss_checks,
    position_wise_checks,
    positional_checks,
    rule_checks,
    task_checks,
)
from .contract import CHECKS, Check, ConformanceError, Failed, Skip
from .references import reference_kernel

CHECK_MODULES = (attention_checks, kernel_checks, positional_checks, position_wise_checks,
                 loss_checks, block_checks, architecture_checks, task_checks, format_checks,
                 rule_checks)
"""The modules whose checks importing this one registers in :data:`CHECKS`."""


# -- running them -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One check on one component: call it to run it (raises :class:`ConformanceError`)."""

    check: Check
    component: Component
    settings: Any = None

    def __call__(self) -> str:
        """Run the check: ``"passed"``, ``"skipped: why"``; a breach raises."""
        if not self.check.applies(self.component):
            return f"skipped: does not claim {self.check.claim}"
        try:
            self.check.run(self.component, self.settings)
        except Skip as why:
            return f"skipped: {why}"
        except Failed as failure:
            raise self._breach(str(failure)) from None
        except ConformanceError:
            raise
        except Exception as exc:  # a check that cannot even run is a breach too
            raise self._breach(f"raised {type(exc).__name__}: {exc}") from exc
        return "passed"

    def _breach(self, what: str) -> ConformanceError:
        claim = f" (it claims {self.check.claim})" if self.check.claim else ""
        return ConformanceError(
            f"{self.component.family} {self.component.name!r} from plugin "
            f"{self.component.plugin!r} fails check {self.check.name!r}{claim}: {what}. "
            f"The contract: {self.check.doc}")

    def __str__(self) -> str:
        return f"{self.component.family}:{self.component.name}:{self.check.name}"


def cases(family: str, name: str, *, settings: dict[str, Any] | BaseModel | None = None
          ) -> list[Case]:
    """Every check of ``family`` on component ``name`` (those that do not apply skip).

    ``settings`` (a mapping, or an instance of the component's ``Settings``) is
    validated here, once: a misspelt or invalid setting raises :class:`zoo.RecipeError`
    naming it, before any check runs (it is the call that is wrong, not the
    component)."""
    component = registry.get(family, name)
    try:
        validated = component.validate_settings(settings)
    except RecipeError as exc:
        raise RecipeError(f"zoo.testing: the settings= given for {family} {name!r} are not "
                          f"valid, so no check ran: {exc}") from None
    return [Case(check, component, validated) for check in CHECKS.get(family, [])]


def check_component(family: str, name: str, *,
                    settings: dict[str, Any] | BaseModel | None = None) -> dict[str, str]:
    """Run every check of the family's contract on a registered component; returns each
    check's outcome (``passed`` or why it was skipped). A breach raises
    :class:`ConformanceError` naming the check, the capability and the difference."""
    return {case.check.name: case() for case in cases(family, name, settings=settings)}


class _PytestCase:
    """A case as a pytest test calls it: a check that cannot run here is skipped."""

    def __init__(self, case: Case) -> None:
        self.case = case

    def __call__(self) -> None:
        import pytest

        outcome = self.case()
        if outcome.startswith("skipped"):
            pytest.skip(outcome.removeprefix("skipped: "))

    def __repr__(self) -> str:
        return str(self.case)


def parametrize(family: str, name: str, *,
                settings: dict[str, Any] | BaseModel | None = None) -> Any:
    """``pytest.mark.parametrize("check", ...)``: one test per check of the component,
    each called as ``check()`` (a check that does not apply, or cannot run on this
    machine, is skipped)."""
    import pytest

    def param(case: Case) -> Any:
        if not case.check.applies(case.component):
            return pytest.param(_PytestCase(case), id=case.check.name, marks=pytest.mark.skip(
                reason=f"does not claim {case.check.claim}"))
        return pytest.param(_PytestCase(case), id=case.check.name)

    return pytest.mark.parametrize("check", [param(c) for c in cases(family, name,
                                                                       settings=settings)])


def iter_checks(family: str | None = None) -> Iterator[Check]:
    """The checks of one family (or of all), for the docs."""
    for fam, checks in CHECKS.items():
        if family is None or fam == family:
            yield from checks


__all__ = ["ConformanceError", "Check", "Case", "CHECKS", "check_component", "cases",
           "parametrize", "reference_kernel", "iter_checks"]
