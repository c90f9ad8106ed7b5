"""The proof files run and prove their rule; refutations are replayed through the ledger."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from broken.mutants import BAWithoutNullification, BDRecyclesEarly
from budgetcheck.ops import Ops
from budgetcheck.proving import RuleEnv, Verdict, prove_range, prove_rule, replay_refutation
from budgetcheck.verify import z3_adapter as _z3
from mechanisms.rules import BARule, BDRule, PeriodicRule

PROOFS = sorted((Path(__file__).resolve().parents[2] / "proofs").glob("[!_]*.py"))


@pytest.mark.parametrize("path", PROOFS, ids=lambda p: p.name)
def test_proof_file_proves_small_windows(path: Path) -> None:
    completed = subprocess.run([sys.executable, str(path), "--w-max", "6"], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "proved for w in 1..6" in completed.stdout


@pytest.mark.parametrize(
    "rule",
    [
        PeriodicRule(every=1),
        PeriodicRule(),
        PeriodicRule(every=3),
        BDRule(),
        BARule(),
        BARule(dissimilarity_when_nullified=False),
    ],
)
def test_builtin_rules_are_proved(rule: object) -> None:
    verdict = prove_range(rule, range(1, 10))  # type: ignore[arg-type]
    assert verdict.verdict is Verdict.PROVED, verdict.first_failure


def test_refutation_is_a_concrete_replayable_decision_sequence() -> None:
    rule = BAWithoutNullification().allocation_rule()
    result = prove_rule(rule, 3)
    assert result.verdict is Verdict.REFUTED and result.decisions is not None
    refusal = replay_refutation(rule, result.decisions, epsilon=1.0, w=3)
    assert refusal is not None and "window" in str(refusal)


def test_a_rule_sound_at_small_w_is_refuted_at_a_larger_one() -> None:
    """BD summing only w − 2 past publications is fine at w <= 2 and overspends from w = 3."""
    verdict = prove_range(BDRecyclesEarly().allocation_rule(), range(1, 6))
    assert verdict.verdict is Verdict.REFUTED
    failure = verdict.first_failure
    assert failure is not None and failure.w >= 3


def test_correct_rules_replay_without_refusal() -> None:
    assert replay_refutation(BARule(), [True] * 20, epsilon=1.0, w=4) is None
    assert replay_refutation(BDRule(), [True, False] * 10, epsilon=0.3, w=5) is None


def test_large_windows_are_proved_in_seconds() -> None:
    """The scaled encoding keeps w = 128 cheap (BA took 15 s at w = 64 with u symbolic)."""
    for rule in (BARule(), PeriodicRule(), BDRule()):
        result = prove_rule(rule, 128, timeout_ms=60_000)
        assert result.verdict is Verdict.PROVED and result.method == "scaled 1-induction"


def test_scale_invariance_is_read_from_the_terms() -> None:
    """Only constraints that keep their truth when every real variable is scaled may fix u = 1."""
    import z3

    from budgetcheck.verify import z3_adapter as _z3

    x, y, k, b = z3.Real("x"), z3.Real("y"), z3.Int("k"), z3.Bool("b")
    invariant = [
        x <= y,
        z3.If(b, x, 0) <= 2 * y,
        z3.ToReal(k) * x <= y,
        k <= 3,
        z3.Sum([x, -y]) == 0,
        x / 2 >= 0,
        z3.Not(x < y),
        z3.ToReal(k) <= 4,
    ]
    not_invariant = [x <= 1, x * y <= 1, x + 1 <= y, z3.If(x <= 1, x, y) <= y, z3.ToReal(k) <= x, z3.ToInt(x) <= k]
    for term in invariant:
        assert _z3.scale_invariant([term]), term
    for term in not_invariant:
        assert not _z3.scale_invariant([term]), term
    assert not _z3.scale_invariant(invariant + not_invariant[:1])
    assert _z3.normalized([x <= y], x)[0].eq(z3.RealVal(1) <= y)


@attrs.frozen
class _UniformWithAConstant:
    """Uniform, with a true but non-homogeneous conjunct in its invariant (ε + 1 > 0)."""

    purposes: tuple[str, ...] = ("publication",)

    def initial(self, ops: Ops, env: RuleEnv) -> tuple[()]:
        return ()

    def arbitrary(self, env: RuleEnv, tag: str) -> tuple[()]:
        return ()

    def charges(self, ops: Ops, env: RuleEnv, state: object, decision: object) -> tuple[object, ...]:
        return (ops.share(env.epsilon, env.w),)

    def advance(self, ops: Ops, env: RuleEnv, state: object, decision: object, spent: tuple[object, ...]) -> tuple[()]:
        return ()

    def invariant(self, ops: Ops, env: RuleEnv, state: object, recent: Sequence[Any]) -> object:
        unit = ops.share(env.epsilon, env.w)
        return ops.all_of([env.epsilon + 1 > 0, *(r >= 0 for r in recent), *(r <= unit for r in recent)])


def test_a_rule_that_is_not_scale_invariant_is_proved_with_the_unit_symbolic() -> None:
    from budgetcheck.proving import _induction, _NotScalable

    with pytest.raises(_NotScalable):
        _induction(_UniformWithAConstant(), 5, 60_000, scaled=True)
    result = prove_rule(_UniformWithAConstant(), 5)
    assert result.verdict is Verdict.PROVED and result.method == "1-induction"
    assert prove_rule(PeriodicRule(every=1), 5).method == "scaled 1-induction"


@pytest.mark.parametrize(
    "name", ["Uniform", "Sample", "BD", "BA", "Hybrid", "FASTw", "DSATw", "RescueDP", "AdaPub", "PeGaSus"]
)
def test_scaled_and_symbolic_unit_queries_agree(name: str) -> None:
    """Fixing u = 1 changes no answer: both encodings prove every built-in rule, and both fail
    the same mutants (tests/broken)."""
    from budgetcheck import load_mechanism
    from budgetcheck.proving import _induction, rule_of

    rule = rule_of(load_mechanism(name))
    assert rule is not None
    for w in (1, 2, 5, 9):
        scaled, symbolic = _induction(rule, w, 60_000, scaled=True), _induction(rule, w, 60_000, scaled=False)
        assert scaled is not None and symbolic is not None
        assert scaled[0] is symbolic[0] is _z3.Answer.UNSAT, (w, scaled, symbolic)


@pytest.mark.parametrize("mutant", [BAWithoutNullification(), BDRecyclesEarly()], ids=type)
def test_scaled_queries_still_find_the_mutants_counterexamples(mutant: Any) -> None:
    from budgetcheck.proving import _induction

    for w in (3, 5):
        scaled = _induction(mutant.allocation_rule(), w, 60_000, scaled=True)
        assert scaled is not None and scaled[0] is _z3.Answer.SAT and scaled[2] == "scaled 1-induction"
