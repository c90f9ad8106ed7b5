"""Proofs that an allocation rule keeps every w-window within ε, for every decision sequence.

A mechanism that wants its rule proved exposes an :class:`AllocationRule`: its budget allocation
as a transition system over an abstract state, written once against :class:`budgetcheck.ops.Ops`
(so the same functions run inside the mechanism on floats and here on Z3 terms), plus a
strengthened inductive invariant. Data-dependent decisions (publish or skip) are free Booleans,
so what is proved holds for every stream.

For a fixed w and a symbolic ε > 0 the prover checks, with exact real arithmetic:

1. *initiation*: the initial state (no spends yet) satisfies the invariant;
2. *consecution and safety*: from any state satisfying the invariant, for either decision and any
   actual spends 0 <= x_i <= the rule's budget (covering implementations that round down), the
   window [t−w+1, t] sums to <= ε and the next state satisfies the invariant again.

Together these give the w-event condition (Kellaris et al. 2014, Theorem 3) for an unbounded
horizon (1-induction with a strengthened invariant). When step 2 fails, a bounded model check from
the initial state looks for a real counterexample: found → ``refuted`` with the decision
sequence, which :func:`replay_refutation` confirms through the rule's float implementation and a
real ledger; not found → ``unknown`` (the invariant is too weak). Unknown is never a pass.

Assumptions (stated in every proof): exact real arithmetic for the rule; float back-ends round
every budget down (property-tested in ``tests/ledger/test_rounding.py``); ``share(ε, n)`` returns a
u > 0 with n·u <= ε.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs
import numpy as np

from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.validation import check_positive_int
from budgetcheck.ledger.wevent import WindowLedger
from budgetcheck.ops import FLOAT, Ops
from budgetcheck.verify.verdict import NOT_PROVED, Verdict

if TYPE_CHECKING:
    from budgetcheck.verify import z3_adapter as _z3

State = tuple[Any, ...]


def symbol_real(name: str) -> Any:
    """A fresh real-valued Z3 variable (for ``AllocationRule.arbitrary``)."""
    from budgetcheck.verify import z3_adapter as _z3

    return _z3.real(name)


def symbol_int(name: str) -> Any:
    """A fresh integer-valued Z3 variable (for ``AllocationRule.arbitrary``)."""
    from budgetcheck.verify import z3_adapter as _z3

    return _z3.integer(name)


@attrs.frozen
class RuleEnv:
    """What a rule may know: the total budget ε (a number or a term) and the window length w."""

    epsilon: Any
    w: int


@runtime_checkable
class AllocationRule(Protocol):
    """A budget allocation rule as a transition system (see the module docstring).

    ``purposes`` names the charges made at every timestamp, in order. ``state`` is a tuple of
    numbers/terms; the rule's invariant may also constrain ``recent``, the totals actually spent
    at the w−1 previous timestamps (oldest first).
    """

    @property
    def purposes(self) -> tuple[str, ...]: ...

    def initial(self, ops: Ops, env: RuleEnv) -> State: ...

    def arbitrary(self, env: RuleEnv, tag: str) -> State:
        """Fresh Z3 variables for every state component (for the induction step)."""
        ...

    def charges(self, ops: Ops, env: RuleEnv, state: State, decision: Any) -> tuple[Any, ...]:
        """The budget of each purpose at this timestamp given the decision (0 = no charge)."""
        ...

    def advance(self, ops: Ops, env: RuleEnv, state: State, decision: Any, spent: tuple[Any, ...]) -> State:
        """The next state, given what was actually spent for each purpose."""
        ...

    def invariant(self, ops: Ops, env: RuleEnv, state: State, recent: Sequence[Any]) -> Any:
        """The strengthened invariant (a Boolean term)."""
        ...


@attrs.frozen
class ProofResult:
    """The verdict for one (rule, w)."""

    w: int
    verdict: Verdict
    method: str
    seconds: float
    decisions: tuple[bool, ...] | None = None
    detail: str = ""


def prove_rule(rule: AllocationRule, w: int, *, timeout_ms: int = 60_000, bmc_steps: int | None = None) -> ProofResult:
    """Prove (or refute) that ``rule`` keeps every window of w timestamps within a symbolic ε."""
    from budgetcheck.verify import z3_adapter as _z3

    w = check_positive_int(w, "w")
    if not isinstance(rule, AllocationRule):
        raise InvalidArgument(f"rule={rule!r} is not an AllocationRule")
    start = time.perf_counter()
    try:
        answer, reason, method = _induction(rule, w, timeout_ms, scaled=True)
    except _NotScalable:  # u stays symbolic and products u·k are written in binary
        answer, reason, method = _induction(rule, w, timeout_ms, scaled=False)
    if answer is _z3.Answer.UNSAT:
        return ProofResult(w=w, verdict=Verdict.PROVED, method=method, seconds=time.perf_counter() - start)
    return _bounded(rule, w, start, timeout_ms, bmc_steps, reason)


class _NotScalable(Exception):
    """A query whose truth could change when all real variables are scaled together."""


def _induction(rule: AllocationRule, w: int, timeout_ms: int, *, scaled: bool) -> tuple[_z3.Answer, str, str]:
    """Initiation, then consecution and safety: (answer, reason if not UNSAT, method).

    ``scaled``: products u·k of the first share u and an integer are built as such, and every
    query is solved with u = 1. That is sound when the query is scale-invariant (checked on its
    syntax by ``_z3.scale_invariant``): a model with u > 0 divided by u is a model with u = 1, and ε
    stays symbolic. It keeps the queries linear without writing k in binary. Raises _NotScalable
    when a query is not scale-invariant.
    """
    from budgetcheck.verify import z3_adapter as _z3

    ops = _z3.Z3Ops(unit_products=scaled)
    epsilon = _z3.real("epsilon")
    env = RuleEnv(epsilon=epsilon, w=w)
    base = [epsilon > 0]
    method = "scaled 1-induction" if scaled else "1-induction"

    kinds: dict[int, str | None] = {}  # the queries share most terms

    def solve(query: list[Any]) -> _z3.Answer:

        if scaled and ops.unit is not None:
            if not _z3.scale_invariant(query, kinds):
                raise _NotScalable
            query = _z3.normalized(query, ops.unit)
        return _z3.check(query, timeout_ms=timeout_ms)[0]

    zeros = [_z3.real_value(0)] * (w - 1)  # real zeros: recent totals are reals
    initial = rule.initial(ops, env)
    violated = _negate(rule.invariant(ops, env, initial, zeros))  # build terms before reading assumptions
    answer = solve([*base, *ops.assumptions, violated])
    if answer is not _z3.Answer.UNSAT:
        return (
            answer,
            "the initial state violates the invariant" if answer is _z3.Answer.SAT else "initiation: solver unknown",
            method,
        )

    state = rule.arbitrary(env, "s")
    recent = [_z3.real(f"recent_{j}") for j in range(w - 1)]
    decision = _z3.boolean("decision")
    bounds = rule.charges(ops, env, state, decision)
    spent = [_z3.real(f"spent_{i}") for i in range(len(bounds))]
    step = [s >= 0 for s in recent] + [x >= 0 for x in spent] + [x <= b for x, b in zip(spent, bounds, strict=True)]
    hypothesis = rule.invariant(ops, env, state, recent)
    total = ops.sum_up(spent)
    safe = ops.sum_up(recent) + total <= epsilon
    following = rule.advance(ops, env, state, decision, tuple(spent))
    shifted = [*recent[1:], total] if w > 1 else []
    preserved = rule.invariant(ops, env, following, shifted)
    context = [*base, *ops.assumptions, hypothesis, *step]
    for goal in (_negate(safe), _negate(preserved)):  # two easier queries than one disjunction
        answer = solve([*context, goal])
        if answer is not _z3.Answer.UNSAT:
            return (
                answer,
                "invariant not inductive" if answer is _z3.Answer.SAT else "consecution: solver unknown",
                method,
            )
    return _z3.Answer.UNSAT, "", method


def _bounded(
    rule: AllocationRule, w: int, start: float, timeout_ms: int, steps: int | None, reason: str
) -> ProofResult:
    """Bounded model check from the initial state: every window of a horizon of ``steps``."""
    from budgetcheck.verify import z3_adapter as _z3

    horizon = steps if steps is not None else 2 * w + 2
    ops = _z3.Z3Ops()
    epsilon = _z3.real("epsilon")
    env = RuleEnv(epsilon=epsilon, w=w)
    state = rule.initial(ops, env)
    decisions = [_z3.boolean(f"d_{t}") for t in range(horizon)]
    totals: list[Any] = []
    violations = []
    for t in range(horizon):
        bounds = rule.charges(ops, env, state, decisions[t])
        total = ops.sum_up(list(bounds))
        totals.append(total)
        violations.append(ops.sum_up(totals[max(0, t - w + 1) :]) > epsilon)
        state = rule.advance(ops, env, state, decisions[t], tuple(bounds))
    some_violation = _z3.disj(violations)
    answer, model = _z3.check([epsilon == 1, *ops.assumptions, some_violation], timeout_ms=timeout_ms)
    seconds = time.perf_counter() - start
    if answer is _z3.Answer.SAT:
        sequence = tuple(_z3.evaluate_bool(model, d) for d in decisions)
        last = max(t for t, v in enumerate(violations) if _z3.evaluate_bool(model, v))
        return ProofResult(
            w=w,
            verdict=Verdict.REFUTED,
            method=f"bmc({horizon})",
            seconds=seconds,
            decisions=sequence[: last + 1],
            detail=f"{reason}; window ending at t={last + 1} exceeds epsilon",
        )
    return ProofResult(w=w, verdict=Verdict.UNKNOWN, method=f"bmc({horizon})", seconds=seconds, detail=reason)


def replay_refutation(
    rule: AllocationRule, decisions: Sequence[bool], *, epsilon: float, w: int
) -> BudgetExceeded | None:
    """Run the rule's float implementation on ``decisions`` through a real ledger.

    Returns the ledger's refusal (the refutation is confirmed) or None (not confirmed).
    """
    env = RuleEnv(epsilon=epsilon, w=w)
    ledger = WindowLedger(WEventParams(epsilon, w), sampler="numpy-laplace")
    state = rule.initial(FLOAT, env)
    for t, decision in enumerate(decisions, start=1):
        bounds = rule.charges(FLOAT, env, state, np.bool_(decision))
        amounts = tuple(float(np.asarray(b)) for b in bounds)
        try:
            for purpose, amount in zip(rule.purposes, amounts, strict=True):
                ledger.spend(t, amount, purpose=purpose)
        except BudgetExceeded as refusal:
            return refusal
        state = rule.advance(FLOAT, env, state, np.bool_(decision), amounts)
    return None


def _negate(term: Any) -> Any:
    from budgetcheck.verify import z3_adapter as _z3

    return _z3.negation(term)


@attrs.frozen
class RangeVerdict:
    """The verdict of a rule over a range of w: proved iff proved for every w."""

    results: tuple[ProofResult, ...]

    @property
    def verdict(self) -> Verdict:
        verdicts = {r.verdict for r in self.results}
        if Verdict.REFUTED in verdicts:
            return Verdict.REFUTED
        return Verdict.PROVED if verdicts == {Verdict.PROVED} else Verdict.UNKNOWN

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    @property
    def first_failure(self) -> ProofResult | None:
        """The refutation if there is one, else the first unknown."""
        refuted = [r for r in self.results if r.verdict is Verdict.REFUTED]
        return refuted[0] if refuted else next((r for r in self.results if r.verdict is not Verdict.PROVED), None)

    @property
    def methods(self) -> str:
        return ", ".join(sorted({r.method.split(",")[0] for r in self.results}))


def prove_range(rule: AllocationRule, ws: Sequence[int], *, timeout_ms: int = 60_000) -> RangeVerdict:
    """:func:`prove_rule` for every w in ``ws``, stopping at the first refutation."""
    results = []
    for w in ws:
        result = prove_rule(rule, w, timeout_ms=timeout_ms)
        results.append(result)
        if result.verdict is Verdict.REFUTED:
            break
    return RangeVerdict(results=tuple(results))


def explain_failure(rule: AllocationRule, verdict: RangeVerdict) -> str:
    """The first refutation (with its decisions, replayed through the ledger) or unknown, in words."""
    failure = verdict.first_failure
    if failure is None:
        return ""
    text = f"{failure.verdict.value} at w={failure.w}: {failure.detail}"
    if failure.decisions is not None:
        refusal = replay_refutation(rule, failure.decisions, epsilon=1.0, w=failure.w)
        bits = "".join("1" if d else "0" for d in failure.decisions)
        replay = f"replay refused by the ledger: {refusal}" if refusal else "replay NOT refused by the ledger"
        text += f"; decisions {bits}; {replay}"
    return text


def rule_of(mechanism: object) -> AllocationRule | None:
    """The allocation rule a mechanism exposes (``allocation_rule()``), or None if it exposes none."""
    factory = getattr(mechanism, "allocation_rule", None)
    if not callable(factory):
        return None
    rule = factory()
    return rule if isinstance(rule, AllocationRule) else None


@attrs.frozen
class MechanismProof:
    """What ``budgetcheck prove`` and verify's proof stage report for one mechanism.

    ``verdict``: :class:`Verdict` PROVED, REFUTED, UNKNOWN, or NOT_PROVED (no rule, no bounded proof);
    ``method``: the solver methods, ``exhaustive(N)`` for a bounded family, or "-"; ``detail``: the
    first refutation or unknown in words (empty when proved by Z3)."""

    verdict: Verdict
    method: str
    seconds: float
    detail: str
    bounded: bool = False  # decided by the mechanism's bounded_proof() (Swellfish), not by a rule


def prove_mechanism(mechanism: object, ws: Sequence[int], *, timeout_ms: int = 60_000) -> MechanismProof:
    """Prove the mechanism's allocation rule for every w in ``ws`` (Z3, :func:`prove_range`), or run
    its exhaustive ``bounded_proof()`` when it exposes no rule; :data:`NOT_PROVED` with neither."""
    started = time.perf_counter()
    rule = rule_of(mechanism)
    bounded = getattr(mechanism, "bounded_proof", None)
    if rule is None and callable(bounded):
        holds, count, failure = bounded()
        detail = failure or (
            f"Theorem 4.2 on {count} collections (<= 2 policies, horizon 5), every decision sequence, exact"
        )
        return MechanismProof(
            Verdict.PROVED if holds else Verdict.REFUTED,
            f"exhaustive({count})",
            time.perf_counter() - started,
            detail,
            bounded=True,
        )
    if rule is None:
        return MechanismProof(NOT_PROVED, "-", 0.0, "no allocation_rule()")
    verdict = prove_range(rule, ws, timeout_ms=timeout_ms)
    return MechanismProof(verdict.verdict, verdict.methods, verdict.seconds, explain_failure(rule, verdict))
