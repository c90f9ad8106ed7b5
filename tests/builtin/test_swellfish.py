"""Swellfish: policies, CalcDeltaJ against exhaustive enumeration, temporal sensitivity (Example
4.1), the ledger against a brute-force TOP_δ(J) oracle, mechanisms, bad inputs."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    PolicyCollection,
    StreamPolicy,
    SwellfishLedger,
    execute_swellfish,
    goal_affected_maximum,
    load_lines,
    rounding,
)
from budgetcheck.ledger.audit_notions import audit_swellfish
from budgetcheck.strategies import policy_collections
from mechanisms import swellfish
from mechanisms.swellfish import TSBA, TSBD, TSSample, TSUniform, Unicorn, UnicornIS, UnicornPS, bounded_proof

EXAMPLE = PolicyCollection([StreamPolicy(2, 3, [1.0]), StreamPolicy(3, 6, [2.2, 2.2])])


def test_temporal_sensitivity_example_4_1() -> None:
    assert EXAMPLE.temporal_sensitivity(3) == 3.2
    assert EXAMPLE.temporal_sensitivity(4) == 2.2
    assert EXAMPLE.temporal_sensitivity(1) == 0.0
    assert EXAMPLE.delta(1) == 3  # the paper's illustration of CalcDeltaJ for J2


def test_threshold_depends_on_where_the_pattern_can_land() -> None:
    policy = StreamPolicy(1, 4, [5.0, 1.0])
    assert [policy.threshold_at(t) for t in range(0, 6)] == [0.0, 5.0, 5.0, 5.0, 1.0, 0.0]


@settings(max_examples=150, deadline=None)
@given(collection=policy_collections(horizon=8, max_policies=3))
def test_calc_delta_j_never_below_the_exhaustive_maximum(collection: PolicyCollection) -> None:
    for index in range(len(collection)):
        assert collection.delta(index) >= goal_affected_maximum(collection.policies, index)


def _oracle_ok(collection: PolicyCollection, totals: dict[int, Fraction], epsilon: float) -> bool:
    for index, policy in enumerate(collection.policies):
        values = [totals.get(t, Fraction(0)) for t in range(policy.start, policy.end + 1)]
        k = min(collection.delta(index), len(values))
        if max(sum(c, Fraction(0)) for c in itertools.combinations(values, k)) > Fraction(epsilon):
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(
    collection=policy_collections(horizon=7, max_policies=3),
    steps=st.lists(
        st.tuples(st.integers(0, 1), st.sampled_from([0.0, 0.1, 0.2, 1 / 3, 0.5, 0.3, 1.0])), min_size=1, max_size=14
    ),
)
def test_ledger_accepts_exactly_what_the_brute_force_oracle_accepts(
    collection: PolicyCollection, steps: list[tuple[int, float]]
) -> None:
    ledger = SwellfishLedger(collection, epsilon=1.0, sampler="numpy-laplace", keep_records=True)
    totals: dict[int, Fraction] = {}
    t = 1
    for gap, x in steps:
        t += gap
        proposal = dict(totals)
        proposal[t] = proposal.get(t, Fraction(0)) + Fraction(x)
        before = (ledger.records, ledger.remaining(t).tolist())
        if _oracle_ok(collection, proposal, 1.0):
            ledger.spend(t, x, purpose="p")
            totals = proposal
        else:
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, x, purpose="p")
            assert (ledger.records, ledger.remaining(t).tolist()) == before
    assert audit_swellfish(ledger.records, collection, epsilon=1.0, runs=1).ok


def test_remaining_is_spendable_and_one_ulp_more_is_refused() -> None:
    ledger = SwellfishLedger(EXAMPLE, epsilon=0.1 + 0.2, runs=2, sampler="numpy-laplace", keep_records=True)
    for t in range(2, 7):
        left = ledger.remaining(t)
        ledger.spend(t, left, purpose="all")
        assert (ledger.remaining(t) == 0).all()
        with pytest.raises(BudgetExceeded):
            ledger.spend(t, np.nextafter(0.0, 1.0), purpose="one ulp")
    largest = float(np.finfo(np.float64).max)
    assert ledger.remaining(7).tolist() == [largest, largest]  # no policy is relevant: nothing bounds a spend


def test_remaining_where_no_policy_is_relevant_is_spendable_and_free() -> None:
    """Where no policy is relevant remaining is the largest finite double; spending it is accepted, enters no
    TOP set, and the records export and audit."""
    ledger = SwellfishLedger(EXAMPLE, epsilon=1.0, runs=2, sampler="numpy-laplace", keep_records=True)
    for t in range(1, 9):
        ledger.spend(t, ledger.remaining(t), purpose="remaining")
    assert ledger.remaining(8).tolist() == [float(np.finfo(np.float64).max)] * 2
    limit = rounding.to_units(1.0)  # the huge spends at t = 1, 7, 8 entered no TOP set
    assert all(0 < total <= limit for i in range(2) for total in ledger.top_sum(i))
    assert audit_swellfish(ledger.records, EXAMPLE, epsilon=1.0, runs=2).ok
    assert len(load_lines(ledger.jsonl())[1]) == 8
    with pytest.raises(InvalidArgument, match="finite"):
        ledger.spend(9, np.inf, purpose="inf is not an amount")


def test_top_set_names_the_timestamps_that_count() -> None:
    ledger = SwellfishLedger(EXAMPLE, epsilon=1.0, sampler="numpy-laplace", keep_records=True)
    for t, x in [(3, 0.125), (4, 0.25), (4, 0.25), (5, 0.1875), (6, 0.25)]:
        ledger.spend(t, x, purpose="p")
    assert ledger.top_set(1) == ((4, 0.5), (6, 0.25), (5, 0.1875))
    assert ledger.top_set(EXAMPLE.policies[1]) == ledger.top_set(1)  # the README's top_set(policy)
    assert ledger.top_sum(EXAMPLE.policies[0]) == ledger.top_sum(0)


@pytest.mark.parametrize(
    ("policy", "match"),
    [
        (StreamPolicy(1, 9, [1.0]), r"policy=StreamPolicy\(.*\) is not one of this ledger's 2 policies"),
        (2, r"policy=2 must be a StreamPolicy of the collection or a policy index in \[0, 2\)"),
        (-1, r"policy=-1 must be"),
        (True, r"policy=True must be"),
        ("0", r"policy='0' must be"),
    ],
)
def test_top_set_refuses_what_is_not_a_policy_of_the_ledger(policy: object, match: str) -> None:
    ledger = SwellfishLedger(EXAMPLE, epsilon=1.0)
    with pytest.raises(InvalidArgument, match=match):
        ledger.top_set(policy)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match=match):
        ledger.top_sum(policy)  # type: ignore[arg-type]


def test_exact_release_only_where_nothing_is_relevant() -> None:
    stream = GuardedStream(np.arange(8.0))
    ledger = SwellfishLedger(EXAMPLE, epsilon=1.0, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    assert ledger.release_exact(stream.secret(1)).tolist() == [[0.0]]
    with pytest.raises(InvalidArgument, match="relevant"):
        ledger.release_exact(stream.secret(3))
    header, records = load_lines(ledger.jsonl())
    assert header.notion == "swellfish" and header.policies[1] == (3, 6, (2.2, 2.2))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: StreamPolicy(5, 4, [1.0]), "empty"),
        (lambda: StreamPolicy(1, 2, [1.0, 1.0, 1.0]), "longer than its relevance interval"),
        (lambda: StreamPolicy(1, 2, [-1.0]), "thresholds"),
        (lambda: StreamPolicy(1, 2, [float("nan")]), "thresholds"),
        (lambda: StreamPolicy(1, 2, []), "empty"),
        (lambda: PolicyCollection([]), "non-empty"),
        (lambda: SwellfishLedger(EXAMPLE, epsilon=0.0, sampler="numpy-laplace", keep_records=True), "epsilon"),
    ],
)
def test_bad_inputs_are_named(build: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        build()  # type: ignore[operator]


@pytest.mark.parametrize(
    "factory",
    [TSUniform, TSSample, TSBD, TSBA, UnicornIS, UnicornPS, Unicorn, swellfish.TINARUniform, swellfish.TINARSample],
)
@pytest.mark.parametrize("runs", [1, 7])
def test_mechanisms_stay_within_every_interval(factory: object, runs: int) -> None:
    rng = np.random.default_rng(3)
    policies = PolicyCollection(
        [
            StreamPolicy(s, s + n - 1, list(rng.uniform(0, 3, size=k)))
            for s, n, k in [(1, 10, 2), (5, 20, 3), (30, 15, 15), (32, 5, 2), (50, 10, 4)]
        ]
    )
    data = np.abs(np.cumsum(rng.normal(0, 5, (70, 3)), axis=0))
    ex = execute_swellfish(factory(), policies, data, epsilon=0.7, runs=runs, seed=1)  # type: ignore[operator]
    assert ex.ledger.refusals == 0
    assert audit_swellfish(ex.ledger.records, policies, epsilon=0.7, runs=runs).ok
    free = [t for t in range(1, 71) if policies.temporal_sensitivity(t) == 0.0]
    assert np.array_equal(
        ex.releases[:, [t - 1 for t in free]], np.broadcast_to(data[[t - 1 for t in free]], (runs, len(free), 3))
    )


def test_bounded_proof_holds_and_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    assert bounded_proof(Unicorn(), horizon=4)[0]
    original = swellfish._OpBudgets.allocation
    monkeypatch.setattr(swellfish._OpBudgets, "allocation", lambda self, *a: original(self, *a) * 2)
    holds, _, failure = bounded_proof(UnicornPS(), horizon=4)
    assert not holds and "TOP_delta" in failure
