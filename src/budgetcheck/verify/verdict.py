"""The verdict a user acts on, from the stages' results, and what ``--require`` lets exit 0.

*proved*: the allocation rule is proved and every explored run's charges conformed to it, so the
proof covers the code that runs. *verified to a bound*: nothing was found by the stages that ran,
up to the stated w and horizon (no rule, the rule's conformance was not checked, or the charges
departed from the rule: then the proof does not cover the code, which is a gap in the proof, not
a privacy violation; issue 43). *violated*: a stage found a window over ε, a refused spend, a read
or a leak. *inconclusive*: a stage could not decide (a nondeterministic mechanism, an unknown
proof, a failure to run).

A mechanism that *vouches* for a sensitivity (``ledger.measure``: the library cannot derive it) is
never *proved*: its budget may be, its noise is not. Only the statistical audit checks such
releases, so without a passing audit stage it is *inconclusive*; with one, *verified to a bound*.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from budgetcheck.ledger.errors import InvalidArgument


class Verdict(enum.StrEnum):
    """Every verdict of verify's stages and of the prover, in one type (a ``str``: tables and JSON
    print its value, and it compares equal to it).

    A stage ends PASS, FAIL, INCONCLUSIVE or NOT_PROVED (no allocation rule to prove). The prover,
    for one rule and w (:func:`budgetcheck.proving.prove_rule`), ends PROVED, REFUTED or UNKNOWN;
    :meth:`as_stage` reads a prover's verdict as the proof stage's.
    """

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    NOT_PROVED = "not proved"
    PROVED = "proved"
    REFUTED = "refuted"
    UNKNOWN = "unknown"

    def as_stage(self) -> Verdict:
        """The stage verdict of this one: proved passes, refuted fails, unknown is inconclusive."""
        return _AS_STAGE.get(self, self)


_AS_STAGE = {Verdict.PROVED: Verdict.PASS, Verdict.REFUTED: Verdict.FAIL, Verdict.UNKNOWN: Verdict.INCONCLUSIVE}
PASS, FAIL, NOT_PROVED, INCONCLUSIVE = Verdict.PASS, Verdict.FAIL, Verdict.NOT_PROVED, Verdict.INCONCLUSIVE
EXIT_OK, EXIT_VIOLATION, EXIT_INCONCLUSIVE = 0, 1, 3
REQUIREMENTS = ("bounded", "proof")


class Outcome(enum.Enum):
    """One mechanism's verdict, as the table, JSON and JUnit outputs print it."""

    PROVED = "proved"
    BOUNDED = "verified to a bound"
    VIOLATED = "violated"
    INCONCLUSIVE = "inconclusive"

    @property
    def legacy(self) -> str:
        """The stage-style verdict: fail, inconclusive, or pass (proved or bounded)."""
        return {Outcome.VIOLATED: FAIL, Outcome.INCONCLUSIVE: INCONCLUSIVE}.get(self, PASS)


def outcome(stages: Iterable[tuple[str, str]], *, violated: bool = False, vouched: bool = False) -> Outcome:
    """The verdict from (stage name, stage verdict) pairs (see the module docstring); ``vouched``:
    some release's sensitivity was the mechanism's word."""
    by_stage = dict(stages)
    verdicts = set(by_stage.values())
    if violated or FAIL in verdicts:
        return Outcome.VIOLATED
    if INCONCLUSIVE in verdicts:
        return Outcome.INCONCLUSIVE
    if vouched:
        return Outcome.BOUNDED if by_stage.get("statistical audit") == PASS else Outcome.INCONCLUSIVE
    if by_stage.get("proof") == PASS and by_stage.get("rule conformance") == PASS:
        return Outcome.PROVED
    if PASS in (by_stage.get("exploration"), by_stage.get("ledger replay")):
        return Outcome.BOUNDED
    return Outcome.INCONCLUSIVE  # nothing ran that covers the mechanism's code


def meets(verdict: Outcome, require: str) -> bool:
    """Whether ``verdict`` satisfies ``--require`` (``proof``: proved; ``bounded``: proved or bounded)."""
    if require not in REQUIREMENTS:
        raise InvalidArgument(f"require={require!r} must be one of {REQUIREMENTS}")
    return verdict is Outcome.PROVED or (require == "bounded" and verdict is Outcome.BOUNDED)


def exit_code(verdicts: Iterable[Outcome], require: str = "bounded") -> int:
    """0 if every verdict meets ``require``; 1 if any is violated; else 3 (inconclusive or short of it)."""
    found = list(verdicts)
    if Outcome.VIOLATED in found:
        return EXIT_VIOLATION
    return EXIT_OK if all(meets(v, require) for v in found) else EXIT_INCONCLUSIVE
