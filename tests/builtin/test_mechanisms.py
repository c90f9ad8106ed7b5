"""Uniform, Sample, BD and BA (Kellaris et al. 2014): conformance, worked examples, utility."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings

from budgetcheck import (
    InvalidArgument,
    PolicyCollection,
    RequirementSet,
    StreamMechanism,
    StreamPolicy,
    audit_windows,
    execute,
    execute_personalized,
    execute_swellfish,
    rounding,
)
from budgetcheck.ops import EXACT, FLOAT
from budgetcheck.proving import AllocationRule, RuleEnv
from budgetcheck.strategies import VerificationCase, cases
from mechanisms import BA, BD, BUILTIN, Hybrid, Sample, Uniform
from mechanisms.rules import BARule, BDRule, ba_shares, bd_candidate

ALL = [
    Uniform(),
    Sample(),
    BD(),
    BA(),
    BA(dissimilarity_when_nullified=False),
    BD(filtering=True),
    BA(filtering=True),
    Hybrid(),
    Hybrid(every=5),
]


@pytest.mark.parametrize("mechanism", ALL, ids=lambda m: f"{m.name}-{m!r}")
@settings(max_examples=40)
@given(case=cases(max_length=40, max_w=20, max_runs=3))
def test_every_window_of_every_run_is_within_epsilon(mechanism: StreamMechanism, case: VerificationCase) -> None:
    """Conformance: the independent auditor finds no window over ε, and nothing was refused."""
    execution = execute(mechanism, case.data, epsilon=case.epsilon, w=case.w, runs=case.runs, seed=case.seed)
    assert execution.ledger.refusals == 0
    report = audit_windows(execution.ledger.records, epsilon=case.epsilon, w=case.w, runs=case.runs)
    assert report.ok, report.violations
    assert execution.releases.shape == (case.runs, *case.data.shape)


def test_builtin_registry_names_match() -> None:
    assert {name: factory().name for name, factory in BUILTIN.items()} == {n: n for n in BUILTIN}


def test_uniform_mean_absolute_error_is_w_over_epsilon() -> None:
    """Uniform's expected MAE is w/ε (Kellaris §4.4); 40,000 draws put the mean within 3%."""
    data = np.full((200, 50), 100.0)
    execution = execute(Uniform(), data, epsilon=0.5, w=10, runs=4, seed=5)
    mae = float(np.abs(execution.releases - data).mean())
    assert mae == pytest.approx(10 / 0.5, rel=0.03)
    assert {float(r.amounts[0]) for r in execution.ledger.records} == {rounding.share(0.5, 10)}


@pytest.mark.parametrize("w", [1, 3, 7])
def test_sample_releases_only_every_wth_timestamp(w: int) -> None:
    """Sample spends ε at t = 1, w+1, 2w+1, ... and repeats that release in between."""
    data = np.arange(30, dtype=float)[:, None] * 10
    execution = execute(Sample(), data, epsilon=1.0, w=w, runs=2, seed=1)
    assert [r.t for r in execution.ledger.records] == list(range(1, 31, w))
    assert all(float(r.amounts[0]) == 1.0 for r in execution.ledger.records)
    releases = execution.releases
    for t in range(30):
        anchor = (t // w) * w
        np.testing.assert_array_equal(releases[:, t], releases[:, anchor])


def _trace(rule: AllocationRule, decisions: list[bool], epsilon: Fraction, w: int) -> list[Fraction]:
    """The publication budgets the rule allocates, run in exact rational arithmetic."""
    env = RuleEnv(epsilon=epsilon, w=w)
    state = rule.initial(EXACT, env)
    budgets = []
    for decision in decisions:
        charges = rule.charges(EXACT, env, state, decision)
        budgets.append(Fraction(charges[-1]))
        state = rule.advance(EXACT, env, state, decision, tuple(Fraction(c) for c in charges))
    return budgets


def _bd_trace(decisions: list[bool], epsilon: Fraction, w: int) -> list[Fraction]:
    return _trace(BDRule(), decisions, epsilon, w)


def test_bd_reproduces_kellaris_figure_3() -> None:
    """w = 3, publish at 1, 3, 4: ε/4, 0, ε/8, 3ε/16, then (ε/2 − 3ε/16)/2 offered at 5 (not taken)."""
    eps = Fraction(1)
    trace = _bd_trace([True, False, True, True, False, False], eps, 3)
    assert trace == [eps / 4, 0, eps / 8, 3 * eps / 16, 0, 0]
    totals = [Fraction(1, 6) + b for b in trace]  # dissimilarity ε/(2w) = ε/6 at every t
    assert all(sum(totals[max(0, e - 2) : e + 1]) <= eps for e in range(6))


def _ba_trace(decisions: list[bool], epsilon: Fraction, w: int) -> list[Fraction]:
    return _trace(BARule(), decisions, epsilon, w)


def test_ba_reproduces_kellaris_figure_5() -> None:
    """w = 3: publish at 1 (ε/6), skip 2, publish at 3 absorbing 2 (ε/3), 4 nullified, 5 (ε/6), skip 6."""
    eps = Fraction(1)
    trace = _ba_trace([True, False, True, True, True, False], eps, 3)
    assert trace == [eps / 6, 0, eps / 3, 0, eps / 6, 0]
    totals = [Fraction(1, 6) + b for b in trace]
    assert all(sum(totals[max(0, e - 2) : e + 1]) <= eps for e in range(6))
    # Without nullification window [3, 5] would spend 7ε/6 (Kellaris §4.3).
    assert totals[2] + Fraction(1, 6) + Fraction(1, 6) + totals[4] == Fraction(7, 6)


def test_ba_never_absorbs_more_than_w_shares_and_first_step_has_one_share() -> None:
    nullified, shares = ba_shares(FLOAT, np.array([1]), np.array([1]), 5)
    assert not nullified[0] and shares[0] == 1
    nullified, shares = ba_shares(EXACT, 97, 2, 5)
    assert not nullified and shares == 5
    nullified, shares = ba_shares(EXACT, 2, 3, 5)
    assert nullified and shares == 0


def _publication_decisions(execution_records: list, runs: int, length: int) -> np.ndarray:  # type: ignore[type-arg]
    decided = np.zeros((runs, length), dtype=bool)
    spent = np.zeros((runs, length))
    for record in execution_records:
        if record.purpose == "publication":
            decided[:, record.t - 1] |= record.amounts > 0
            spent[:, record.t - 1] += record.amounts
    return decided, spent  # type: ignore[return-value]


@pytest.mark.parametrize("w", [1, 3, 10])
def test_bd_mechanism_spends_what_its_rule_allows(w: int) -> None:
    """At every publication, BD spends (ε/2 − Σ of its actual publication spends in the last w−1)/2.

    Never above the exact value (the soundness condition of Theorem 4's induction), and within
    1e-12 of it (no utility lost to rounding).
    """
    rng = np.random.default_rng(0)
    data = np.cumsum(rng.normal(0, 30, size=(80, 3)), axis=0) + 500
    execution = execute(BD(), data, epsilon=1.0, w=w, runs=3, seed=2)
    decided, spent = _publication_decisions(list(execution.ledger.records), 3, 80)
    assert decided.any() and not decided.all()
    half = Fraction(rounding.share(1.0, 2))
    for run in range(3):
        for t in range(80):
            if not decided[run, t]:
                continue
            recent = [Fraction(spent[run, k]) for k in range(max(0, t - w + 1), t)]
            exact = bd_candidate(EXACT, half, recent)
            assert Fraction(spent[run, t]) <= exact
            assert float(exact) == pytest.approx(spent[run, t], rel=1e-12)


@pytest.mark.parametrize("w", [1, 3, 10])
def test_ba_mechanism_spends_what_its_rule_allows(w: int) -> None:
    rng = np.random.default_rng(1)
    steps = rng.normal(0, 30, size=(80, 3)) * (rng.random((80, 1)) < 0.3)
    data = np.cumsum(steps, axis=0) + 500
    execution = execute(BA(), data, epsilon=1.0, w=w, runs=3, seed=2)
    decided, spent = _publication_decisions(list(execution.ledger.records), 3, 80)
    assert decided.any() and not decided.all()
    for run in range(3):
        exact = _ba_trace(decided[run].tolist(), Fraction(rounding.share(1.0, 2 * w)) * 2 * w, w)
        for t in range(80):
            assert Fraction(spent[run, t]) <= exact[t]
            assert float(exact[t]) == pytest.approx(spent[run, t], rel=1e-12)


def test_ba_reaches_exactly_epsilon_when_shares_are_exact() -> None:
    """With ε/(2w) a dyadic rational the ledger accepts windows that sum to exactly ε."""
    data = np.array([[0.0], [1e9], [0.0], [1e9]] * 10)
    execution = execute(BA(), data, epsilon=1.0, w=4, runs=1, seed=0)
    report = audit_windows(execution.ledger.records, epsilon=1.0, w=4, runs=1)
    assert report.ok and report.worst_ratio == 1


def test_bd_first_timestamp_compares_against_the_zero_vector() -> None:
    """Before any release the last release is all-zero: a large first count is published at t = 1."""
    execution = execute(BD(), [[1e9, 1e9]], epsilon=1.0, w=3, runs=2, seed=0)
    assert [r.purpose for r in execution.ledger.records] == ["dissimilarity", "publication"]
    np.testing.assert_allclose(execution.releases, 1e9, rtol=1e-6)
    quiet = execute(BD(), [[0.0, 0.0]], epsilon=1.0, w=3, runs=1, seed=0)
    assert [r.purpose for r in quiet.ledger.records] == ["dissimilarity"]
    np.testing.assert_array_equal(quiet.releases, 0.0)


@pytest.mark.parametrize(
    "mechanism", [Uniform(filtering=True), Sample(filtering=True), BD(filtering=True), BA(filtering=True)]
)
def test_filtering_truncates_to_non_negative_integers(mechanism: StreamMechanism) -> None:
    data = np.abs(np.sin(np.arange(60) / 5))[:, None] * np.array([[3.0, 300.0]])
    releases = execute(mechanism, data, epsilon=0.5, w=5, runs=3, seed=4).releases
    assert (releases >= 0).all() and (releases == np.round(releases)).all()


@pytest.mark.parametrize("mechanism", [Uniform(), Sample(), BD(), BA()])
def test_same_seed_same_releases(mechanism: StreamMechanism) -> None:
    data = np.linspace(0, 100, 50)[:, None]
    a = execute(mechanism, data, epsilon=1.0, w=5, runs=2, seed=9).releases
    b = execute(mechanism, data, epsilon=1.0, w=5, runs=2, seed=9).releases
    np.testing.assert_array_equal(a, b)


def test_float_rule_matches_exact_rule_on_random_windows() -> None:
    """BD's float rule never exceeds the exact rule and stays within 1e-12 of it."""
    rng = np.random.default_rng(8)
    recent = rng.uniform(0, 0.05, size=(200, 9))
    got = bd_candidate(FLOAT, np.full(200, 0.5), recent)
    for row, value in zip(recent, got, strict=True):
        exact = bd_candidate(EXACT, Fraction(0.5), [Fraction(x) for x in row])
        assert Fraction(float(value)) <= exact
        assert float(value) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(
    ("every", "w", "expected_budget", "expected_times"),
    [(1, 4, 0.25, list(range(1, 13))), (4, 4, 1.0, [1, 5, 9]), (2, 5, 1 / 3, [1, 3, 5, 7, 9, 11])],
)
def test_hybrid_samples_every_xth_with_epsilon_over_ceil_w_over_x(
    every: int, w: int, expected_budget: float, expected_times: list[int]
) -> None:
    """x = 1 is Uniform, x = w is Sample; x = 2, w = 5 gets ε/3 (x·ε/w = 2ε/5 would overspend)."""
    execution = execute(Hybrid(every=every), np.ones((12, 2)), epsilon=1.0, w=w, runs=2, seed=0)
    assert [r.t for r in execution.ledger.records] == expected_times
    assert float(execution.ledger.records[0].amounts[0]) == pytest.approx(expected_budget, rel=1e-15)
    assert float(execution.ledger.records[0].amounts[0]) <= expected_budget
    assert audit_windows(execution.ledger.records, epsilon=1.0, w=w, runs=2).ok


def test_hybrid_rejects_bad_period() -> None:
    from budgetcheck import InvalidArgument

    with pytest.raises(InvalidArgument, match=r"every=0 must be an integer >= 1"):
        Hybrid(every=0)


@pytest.mark.parametrize(
    ("mechanism", "match"),
    [
        (None, r"mechanism=None is not a StreamMechanism .* got NoneType"),
        (3, r"mechanism=3 is not a StreamMechanism"),
        ("Uniform", r"mechanism='Uniform' is a name, not a mechanism: pass load_mechanism\('Uniform'\)"),
        (Uniform, r"mechanism=Uniform is a class, not a StreamMechanism: pass an instance, Uniform\(\)"),
    ],
)
def test_execute_refuses_what_is_not_a_mechanism_by_name(mechanism: object, match: str) -> None:
    """execute, execute_personalized and execute_swellfish refuse a non-mechanism before any work."""
    with pytest.raises(InvalidArgument, match=match):
        execute(mechanism, np.ones((5, 2)), epsilon=1.0, w=3)  # type: ignore[arg-type]
    kind = match.replace("StreamMechanism", "PersonalizedMechanism")
    with pytest.raises(InvalidArgument, match=kind):
        execute_personalized(mechanism, RequirementSet([(3, 1.0)]), np.zeros((5, 1)), dimensions=2)  # type: ignore[arg-type]
    kind = match.replace("StreamMechanism", "SwellfishMechanism")
    with pytest.raises(InvalidArgument, match=kind):
        execute_swellfish(mechanism, PolicyCollection([StreamPolicy(1, 2, [1.0])]), np.ones((5, 2)), epsilon=1.0)  # type: ignore[arg-type]
