"""`budgetcheck verify`, stage (a): ledger replay on generated streams with a brute-force recheck.

Each Hypothesis example runs the mechanism through a fresh ledger, then re-checks every window of
every run from the ledger's records with the independent auditor (:mod:`budgetcheck._audit`). A
mechanism fails when the auditor finds a window over ε, when it asked the ledger for more than a
window allows (a refused spend, even if it caught the error), when it touched a secret, or when it
crashed. Failures are shrunk by Hypothesis to a minimal case and reported as a reproducible call.
"""

from __future__ import annotations

import importlib
import traceback
from fractions import Fraction

import attrs
import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed

from budgetcheck._audit import audit_windows
from budgetcheck._errors import BudgetExceeded, InvalidArgument, SecretAccess
from budgetcheck._mechanism import StreamMechanism, execute
from budgetcheck.strategies import VerificationCase, cases


@attrs.frozen
class Counterexample:
    """A minimal failing input and what went wrong, replayable with :meth:`call`."""

    reason: str
    detail: str
    case: VerificationCase

    def call(self, reference: str) -> str:
        """Python that reproduces the failure."""
        data = np.round(self.case.data, 6).tolist()
        return (
            f"budgetcheck.execute(budgetcheck.load_mechanism({reference!r}), {data!r}, "
            f"epsilon={self.case.epsilon!r}, w={self.case.w}, runs={self.case.runs}, seed={self.case.seed})"
        )


@attrs.frozen
class VerifyResult:
    """The verdict for one mechanism."""

    mechanism: str
    reference: str
    examples: int
    runs: int
    worst_ratio: float
    counterexample: Counterexample | None

    @property
    def passed(self) -> bool:
        return self.counterexample is None

    def to_json(self) -> dict[str, object]:
        report: dict[str, object] = {
            "mechanism": self.mechanism,
            "reference": self.reference,
            "stage": "ledger-replay",
            "examples": self.examples,
            "runs": self.runs,
            "worst_window_over_epsilon": self.worst_ratio,
            "verdict": "pass" if self.passed else "fail",
        }
        if self.counterexample is not None:
            ce = self.counterexample
            report["counterexample"] = {
                "reason": ce.reason,
                "detail": ce.detail,
                "epsilon": ce.case.epsilon,
                "w": ce.case.w,
                "runs": ce.case.runs,
                "seed": ce.case.seed,
                "stream": ce.case.data.tolist(),
                "call": ce.call(self.reference),
            }
        return report


class _Violation(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def load_mechanism(reference: str) -> StreamMechanism:
    """A built-in name ('BD') or 'module:attr' (a mechanism, or a callable returning one)."""
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
        try:
            target: object = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidArgument(f"mechanism={reference!r} cannot be loaded: {exc}") from exc
    else:
        from mechanisms import BUILTIN

        if reference not in BUILTIN:
            raise InvalidArgument(f"mechanism={reference!r} is not built in; choose one of {sorted(BUILTIN)} or use module:attr")
        target = BUILTIN[reference]
    if isinstance(target, type) or (not isinstance(target, StreamMechanism) and callable(target)):
        try:
            target = target()
        except TypeError as exc:
            raise InvalidArgument(f"mechanism={reference!r} is not a StreamMechanism and cannot be built without arguments: {exc}") from exc
    if not isinstance(target, StreamMechanism):
        raise InvalidArgument(f"mechanism={reference!r} is not a StreamMechanism (needs .name and .run(stream, ledger))")
    return target


def verify_mechanism(reference: str, *, examples: int = 100, seed: int = 0, max_length: int = 60) -> VerifyResult:
    """Run stage (a) on one mechanism: ``examples`` generated cases, shrinking any failure."""
    mechanism = load_mechanism(reference)
    tally = {"examples": 0, "runs": 0}
    worst = [Fraction(0)]
    failures: list[Counterexample] = []

    def check(case: VerificationCase) -> None:
        tally["examples"] += 1
        tally["runs"] += case.runs
        try:
            _check_case(mechanism, case, worst)
        except _Violation as violation:
            failures.append(Counterexample(reason=violation.reason, detail=violation.detail, case=case))
            raise

    runner = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )(given(cases(max_length=max_length))(check))
    runner = hypothesis_seed(seed)(runner)
    try:
        runner()
    except _Violation:
        pass
    counterexample = failures[-1] if failures else None  # Hypothesis replays the minimal case last
    return VerifyResult(
        mechanism=mechanism.name,
        reference=reference,
        examples=tally["examples"],
        runs=tally["runs"],
        worst_ratio=float(worst[0]),
        counterexample=counterexample,
    )


def _check_case(mechanism: StreamMechanism, case: VerificationCase, worst: list[Fraction]) -> None:
    try:
        execution = execute(mechanism, case.data, epsilon=case.epsilon, w=case.w, runs=case.runs, seed=case.seed)
    except BudgetExceeded as exc:
        raise _Violation("overspend refused by the ledger", str(exc)) from exc
    except SecretAccess as exc:
        raise _Violation("secret access", _located(exc)) from exc
    except Exception as exc:  # a crash is a finding, with its location
        raise _Violation("crash", f"{type(exc).__name__}: {exc} ({_located(exc)})") from exc
    ledger = execution.ledger
    if ledger.refusals:
        raise _Violation(
            "overspend attempted",
            f"the mechanism asked for more than a window allows {ledger.refusals} time(s) and swallowed the refusal",
        )
    report = audit_windows(ledger.records, epsilon=case.epsilon, w=case.w, runs=case.runs)
    worst[0] = max(worst[0], report.worst_ratio)
    if not report.ok:
        raise _Violation("window over epsilon", report.violations[0].describe(case.epsilon))


def _located(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    outside = [f for f in frames if "/budgetcheck/" not in f.filename.replace("\\", "/")]
    frame = outside[-1] if outside else frames[-1]
    return f"{exc} at {frame.filename}:{frame.lineno}: {frame.line}"
