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


PASS, FAIL, NOT_PROVED, INCONCLUSIVE = "pass", "fail", "not proved", "inconclusive"


@attrs.frozen
class StageResult:
    """One stage of ``verify``: its name, verdict (pass / fail / not proved / inconclusive), detail."""

    stage: str
    verdict: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"stage": self.stage, "verdict": self.verdict, "detail": self.detail}


@attrs.frozen
class VerifyResult:
    """The verdict for one mechanism: stage (a) figures plus every stage's result."""

    mechanism: str
    reference: str
    examples: int
    runs: int
    worst_ratio: float
    counterexample: Counterexample | None
    stages: tuple[StageResult, ...] = ()
    worst_case: VerificationCase | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    @property
    def verdict(self) -> str:
        """fail if any stage failed; else inconclusive if any was not proved/inconclusive; else pass."""
        verdicts = {stage.verdict for stage in self.stages}
        if self.counterexample is not None or FAIL in verdicts:
            return FAIL
        if verdicts & {NOT_PROVED, INCONCLUSIVE}:
            return INCONCLUSIVE
        return PASS

    @property
    def failed_stage(self) -> str | None:
        return next((stage.stage for stage in self.stages if stage.verdict == FAIL), None)

    def to_json(self) -> dict[str, object]:
        report: dict[str, object] = {
            "mechanism": self.mechanism,
            "reference": self.reference,
            "examples": self.examples,
            "runs": self.runs,
            "worst_window_over_epsilon": self.worst_ratio,
            "verdict": self.verdict,
            "stages": [stage.to_json() for stage in self.stages],
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


@attrs.frozen
class Profile:
    """How much time ``verify`` spends: generated cases, proof range, audit runs."""

    examples: int
    w_max: int
    audit_runs: int


PROFILES = {
    "quick": Profile(examples=100, w_max=12, audit_runs=4000),
    "thorough": Profile(examples=1000, w_max=64, audit_runs=40000),
}


def verify_mechanism(
    reference: str,
    *,
    examples: int | None = None,
    seed: int = 0,
    max_length: int = 60,
    profile: str = "quick",
    stages: str = "abcd",
) -> VerifyResult:
    """Run the four stages on one mechanism (``stages`` selects a subset, e.g. "ab").

    (a) ledger replay on generated cases with a brute-force recheck, shrinking any failure;
    (b) secret access: any read of the true stream outside a charged ledger operation;
    (c) proof of the mechanism's allocation rule for w in 1..profile.w_max ("not proved" if it
        exposes none); (d) statistical lower bound on the loss for neighbouring streams.
    """
    if profile not in PROFILES:
        raise InvalidArgument(f"profile={profile!r} must be one of {sorted(PROFILES)}")
    chosen = PROFILES[profile]
    examples = chosen.examples if examples is None else examples
    replay = _replay(reference, examples=examples, seed=seed, max_length=max_length) if "a" in stages or "b" in stages else None
    mechanism = load_mechanism(reference)
    results: list[StageResult] = []
    counterexample = replay.counterexample if replay is not None else None
    if replay is not None:
        secret = counterexample is not None and counterexample.reason == "secret access"
        other = counterexample is not None and not secret
        if "a" in stages:
            results.append(StageResult("ledger replay", FAIL if other else PASS,
                                       f"{counterexample.reason}: {counterexample.detail}" if other and counterexample else
                                       f"{replay.examples} streams, {replay.runs} runs, worst window {replay.worst_ratio:.6f} of epsilon"))
        if "b" in stages:
            results.append(StageResult("secret access", FAIL if secret else PASS,
                                       counterexample.detail if secret and counterexample else "no read outside a charged ledger operation"))
    if "c" in stages:
        results.append(_proof_stage(mechanism, chosen.w_max))
    if "d" in stages:
        results.append(_statistical_stage(mechanism, chosen.audit_runs, seed))
    return VerifyResult(
        mechanism=mechanism.name,
        reference=reference,
        examples=replay.examples if replay else 0,
        runs=replay.runs if replay else 0,
        worst_ratio=replay.worst_ratio if replay else 0.0,
        counterexample=counterexample,
        stages=tuple(results),
        worst_case=replay.worst_case if replay else None,
    )


def _proof_stage(mechanism: StreamMechanism, w_max: int) -> StageResult:
    from budgetcheck.proving import Verdict, explain_failure, prove_range, rule_of

    rule = rule_of(mechanism)
    if rule is None:
        return StageResult("proof", NOT_PROVED, "the mechanism exposes no allocation_rule(); nothing was proved")
    verdict = prove_range(rule, range(1, w_max + 1))
    if verdict.verdict is Verdict.PROVED:
        return StageResult("proof", PASS, f"proved for w in 1..{w_max} ({verdict.methods}, {verdict.seconds:.1f}s)")
    outcome = FAIL if verdict.verdict is Verdict.REFUTED else INCONCLUSIVE
    return StageResult("proof", outcome, explain_failure(rule, verdict))


def _statistical_stage(mechanism: StreamMechanism, runs: int, seed: int) -> StageResult:
    from budgetcheck._audit_stat import statistical_audit

    findings = []
    for w in (1, 3):
        try:
            findings.append(statistical_audit(mechanism, epsilon=1.0, w=w, runs=runs, seed=seed))
        except Exception as exc:  # the mechanism's own failure is stage (a)'s to report
            return StageResult("statistical audit", INCONCLUSIVE, f"could not run: {type(exc).__name__}: {exc}")
    worst = max(findings, key=lambda f: f.lower_bound)
    detail = (f"loss lower bound {worst.lower_bound:.3f} vs epsilon={worst.epsilon} "
              f"(w={worst.w}, change at {worst.position} of a window, {worst.runs} runs per stream, 95% confidence)")
    return StageResult("statistical audit", FAIL if worst.violates else PASS, detail)


@attrs.frozen
class _Replay:
    examples: int
    runs: int
    worst_ratio: float
    counterexample: Counterexample | None
    worst_case: VerificationCase | None = None


def _replay(reference: str, *, examples: int, seed: int, max_length: int) -> _Replay:
    """Stages (a) and (b): ``examples`` generated cases, shrinking any failure."""
    mechanism = load_mechanism(reference)
    tally = {"examples": 0, "runs": 0}
    worst = [Fraction(0)]
    worst_case: list[VerificationCase] = []
    failures: list[Counterexample] = []

    def check(case: VerificationCase) -> None:
        tally["examples"] += 1
        tally["runs"] += case.runs
        before = worst[0]
        try:
            _check_case(mechanism, case, worst)
            if worst[0] > before or not worst_case:
                worst_case[:] = [case]
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
    return _Replay(
        examples=tally["examples"],
        runs=tally["runs"],
        worst_ratio=float(worst[0]),
        counterexample=counterexample,
        worst_case=worst_case[0] if worst_case else None,
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
