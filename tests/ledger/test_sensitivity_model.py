"""Sensitivities the library derives from the stream's neighbouring relation, checked by brute force.

On small domains (d <= 4 bins, counts 0..3) every neighbouring pair (x, x') of each relation is
enumerated and max ‖q(x') − q(x)‖₁ is compared with the computed sensitivity: equal where the
library says it is exact, at least as large (an upper bound) where it says it is not (clipping).
The ledger refuses a declared sensitivity below the derived one, and a Linear query whose claimed
sensitivity differs from the computed one.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

import budgetcheck as bc
from budgetcheck import (
    Clipped,
    Composed,
    Differences,
    GroupSums,
    GuardedStream,
    Identity,
    InvalidArgument,
    Linear,
    Neighbours,
    Smoothing,
    Total,
    WindowLedger,
)
from budgetcheck.ledger.queries import Query, group_norms, linear_sensitivity

COUNTS = 3  # counts 0..3 per bin
RELATIONS = [
    Neighbours.one_bin(),
    Neighbours.one_bin(2),
    Neighbours.one_bin(3),
    Neighbours.across_bins(1),
    Neighbours.across_bins(2),
    Neighbours.across_bins(3),
    Neighbours.replace_one(),
]


def brute_force(query: Query, relation: Neighbours, d: int) -> float:
    """max ‖q(x') − q(x)‖₁ over every pair of histograms in {0..3}^d that ``relation`` makes neighbours."""
    xs = np.array(list(itertools.product(range(COUNTS + 1), repeat=d)), dtype=np.float64)
    changes = np.array(list(relation.changes(d)), dtype=np.float64).reshape(-1, d)
    if changes.size == 0:
        return 0.0
    best = 0.0
    base = query.apply(xs)
    for delta in changes:
        moved = xs + delta
        inside = ((moved >= 0) & (moved <= COUNTS)).all(axis=1)
        if inside.any():
            best = max(best, float(np.abs(query.apply(moved[inside]) - base[inside]).sum(axis=1).max()))
    return best


def queries(d: int) -> list[Query]:
    out: list[Query] = [
        Identity(),
        Total(),
        Smoothing(1),
        Clipped(Total(), 0.0, 2.0),
        Clipped(Identity(), 1.0, 2.0),
        Clipped(Total(), 0.5, 1.0),
        GroupSums(np.zeros(d, dtype=np.int64), 1),
        GroupSums(np.arange(d) % 2, 2),
        GroupSums(np.where(np.arange(d) == 0, -1, 0), 1),
        Linear(np.arange(1, d + 1, dtype=float)[None, :] * 0.1),
        Linear(scipy.sparse.csc_array(np.eye(d)[:1] * 3.0)),
        Clipped(Linear(np.array([[1.0] * d, [(-1.0) ** j for j in range(d)]])), 0.0, 3.0),
    ]
    if d >= 2:
        out += [
            Differences(),
            Smoothing(2),
            Composed(outer=Total(), inner=Differences()),
            Differences().then(Differences()) if d >= 3 else Differences(),
            Composed(outer=Differences(), inner=Identity()),
        ]
    if d >= 3:
        out += [Differences(2), Smoothing(3), Composed(outer=Smoothing(2), inner=Differences())]
    return out


@pytest.mark.parametrize("d", [1, 2, 3, 4])
@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_every_query_sensitivity_is_the_true_maximum_over_neighbours(d: int, relation: Neighbours) -> None:
    """Exact where claimed exact, an upper bound otherwise (clipping); the brute force enumerates pairs."""
    if relation.kind == "across-bins" and d == 4 and relation.bound == 3:
        d = 3  # the same relation, fewer pairs: keeps the default run fast
    for query in queries(d):
        computed = query.sensitivity(relation, d)
        true = brute_force(query, relation, d)
        assert true <= computed * (1 + 1e-12) + 1e-12, (query, relation, d, true, computed)
        if query.exact(relation, d):
            assert computed <= true * (1 + 1e-12) + 1e-12, (query, relation, d, true, computed)


def test_clipping_is_only_an_upper_bound_and_says_so() -> None:
    """Where clipping's bound is not attained the query reports exact() False (never claims equality)."""
    query, relation = Clipped(Total(), 0.5, 1.0), Neighbours.one_bin(3)
    assert not query.exact(relation, 2)
    assert brute_force(query, relation, 2) <= query.sensitivity(relation, 2) == 0.5


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda d: st.lists(
            st.lists(st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0]), min_size=d, max_size=d),
            min_size=1,
            max_size=3,
        )
    ),
    st.sampled_from(RELATIONS),
)
def test_any_small_matrix_sensitivity_is_the_brute_force_maximum(rows: list[list[float]], relation: Neighbours) -> None:
    matrix = np.array(rows)
    d = matrix.shape[1]
    for query in (Linear(matrix), Linear(scipy.sparse.csc_array(matrix))):
        assert query.exact(relation, d)
        assert query.sensitivity(relation, d) == pytest.approx(brute_force(query, relation, d), rel=1e-12, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 5).flatmap(
        lambda g: st.tuples(st.just(g), st.lists(st.integers(-1, g - 1), min_size=1, max_size=6))
    ),
)
def test_group_norms_over_runs_equal_the_matrix_norms(runs: int, groups_labels: tuple[int, list[int]]) -> None:
    """laplace_groups' O(runs·d) closed form equals the norms of each run's 0/1 matrix (largest over runs)."""
    groups, labels = groups_labels
    table = np.array([np.roll(labels, r) for r in range(runs)], dtype=np.int64)
    closed = group_norms(table)
    for relation in RELATIONS:
        per_run = max(linear_sensitivity(GroupSums(row, groups).norms(row.size), relation) for row in table)
        full = [GroupSums(row, groups) for row in table]
        assert linear_sensitivity(closed, relation) == per_run
        assert per_run == max(
            Linear(q.matrix(row.size)).sensitivity(relation, row.size) for q, row in zip(full, table, strict=True)
        )


def _ledger(relation: Neighbours, d: int = 3) -> tuple[WindowLedger, list[bc.Secret]]:
    stream = GuardedStream(np.arange(4 * d, dtype=float).reshape(4, d) % 4, neighbours=relation)
    ledger = WindowLedger(
        epsilon=100.0, w=2, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    ledger.bind(stream)
    return ledger, list(stream)


@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_the_identity_release_uses_the_relations_sensitivity_and_refuses_less(relation: Neighbours) -> None:
    ledger, secrets = _ledger(relation)
    want = relation.identity_sensitivity
    with pytest.raises(InvalidArgument, match=rf"sensitivity={want / 2!r} is below {want!r}.*{relation.kind}"):
        ledger.laplace(secrets[0], 1.0, sensitivity=want / 2)
    with pytest.raises(InvalidArgument, match="is below"):
        ledger.laplace_bins(secrets[0], [1.0, 1.0, 1.0], sensitivity=want / 2)
    with pytest.raises(InvalidArgument, match="is below"):
        ledger.laplace_series(secrets[:2], [1.0, 1.0], sensitivity=want / 2)
    assert ledger.t == 0  # refused before any charge
    ledger.laplace(secrets[0], 1.0)
    assert ledger.records[-1].sensitivity == want
    ledger.laplace(secrets[1], 1.0, sensitivity=want * 3)  # more noise is always allowed
    assert ledger.records[-1].sensitivity == want * 3


@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_query_releases_use_the_computed_sensitivity(relation: Neighbours) -> None:
    ledger, secrets = _ledger(relation, d=4)
    for t, query in enumerate([Total(), Differences(), GroupSums([0, 1, -1, 1], 2), Smoothing(2)], start=1):
        out = ledger.laplace_query(secrets[t - 1], query, 1.0)
        computed = query.sensitivity(relation, 4)
        assert ledger.records[-1].sensitivity == (computed if computed > 0 else relation.bound)
        assert out.shape == (1, query.apply(np.zeros(4)).shape[-1])
        if computed > 0:
            with pytest.raises(InvalidArgument, match="is below"):
                ledger.laplace_query(secrets[t - 1], query, 1.0, sensitivity=computed * 0.99)


def test_laplace_groups_derives_the_group_sums_sensitivity() -> None:
    ledger, secrets = _ledger(Neighbours.replace_one(), d=4)
    ledger.laplace_groups(secrets[0], [0, 0, 1, -1], [1.0, 1.0])
    assert ledger.records[-1].sensitivity == 2.0  # a move between two groups changes two sums by one
    with pytest.raises(InvalidArgument, match="sensitivity=1.0 is below 2.0"):
        ledger.laplace_groups(secrets[1], [0, 0, 1, -1], [1.0, 1.0], sensitivity=1.0)
    ledger.laplace_groups(secrets[1], [0, 0, 0, 0], [1.0])
    assert ledger.records[-1].sensitivity == 1.0  # the sum of all bins does not move: one person's bound, not 0


def test_a_linear_query_whose_claim_differs_from_the_computed_sensitivity_is_refused() -> None:
    ledger, secrets = _ledger(Neighbours.one_bin(), d=3)
    matrix = np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0]])  # columns 1, 3, 1
    for claim in (1.0, 2.9, 3.1, 6.0):
        with pytest.raises(InvalidArgument, match=f"claimed sensitivity {claim!r} differs from the computed 3.0"):
            ledger.laplace_query(secrets[0], Linear(matrix, claimed=claim), 1.0)
    assert ledger.t == 0
    ledger.laplace_query(secrets[0], Linear(matrix, claimed=3.0), 1.0)
    assert ledger.records[-1].sensitivity == 3.0


def test_a_rescaled_query_buys_no_accuracy() -> None:
    """Linear(1e-6·I) has sensitivity 1e-6: rescaled by 1e6 its answers carry Lap(1/ε) noise, as the
    identity's do (the noise follows the query, so shrinking the query shrinks nothing)."""
    stream = GuardedStream(np.full((1, 4000), 5.0))
    ledger = WindowLedger(epsilon=1.0, w=1, sampler="numpy-laplace", seed=3)
    ledger.bind(stream)
    (secret,) = list(stream)
    out = ledger.laplace_query(secret, Linear(np.eye(4000) * 1e-6), 1.0)[0] * 1e6
    assert abs(np.mean(np.abs(out - 5.0)) - 1.0) < 0.08  # E|Lap(1)| = 1


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Neighbours.one_bin(0), "bound=0"),
        (lambda: Neighbours.across_bins(True), "bound=True"),
        (lambda: Neighbours("two-bins", 1), "kind='two-bins'"),
        (lambda: GuardedStream([[1.0]], neighbours="one-bin"), "neighbours='one-bin'"),
        (lambda: Clipped(Total(), 2.0, 1.0), "lower < upper"),
        (lambda: Clipped(Total(), 0.0, float("inf")), "finite"),
        (lambda: Linear(np.array([[np.nan]])), "finite"),
        (lambda: GroupSums([0, 3], 2), r"\[-1, 2\)"),
        (lambda: Total().then(Clipped(Total(), 0.0, 1.0)).matrix(2), "."),  # an outer map must be linear
    ],
)
def test_bad_relations_and_queries_are_refused_with_their_value(make, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((InvalidArgument, AttributeError, TypeError), match=match):
        make()


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        ("ab", r"weights='ab' must be a finite two-dimensional array \(m, d\) of real numbers, not str"),
        (None, r"weights=None must be .* not NoneType"),
        ([["1", "2"]], r"weights=\[\['1', '2'\]\] must be .* got an array of <U1"),
        ([[1 + 1j, 0.0]], r"got an array of complex128"),
        ([[1.0, None]], r"got an array of object"),
        ([[1.0], [2.0, 3.0]], r"weights=\[\[1\.0\], \[2\.0, 3\.0\]\] must be"),
    ],
)
def test_weights_that_are_not_real_numbers_are_invalid_arguments(weights: object, match: str) -> None:
    """Linear refuses text, None, complex and ragged weights by name and value, never converting them."""
    with pytest.raises(InvalidArgument, match=match):
        Linear(weights)


def test_the_stream_states_its_relation() -> None:
    assert GuardedStream([[1.0, 2.0]]).neighbours == Neighbours.one_bin()
    assert (
        GuardedStream.stacked([[[1.0]], [[2.0]]], neighbours=Neighbours.replace_one()).neighbours.kind == "replace-one"
    )
    assert Neighbours.one_bin(3).identity_sensitivity == 3.0 and Neighbours.replace_one().per_bin == 1


def test_live_and_personalized_streams_carry_their_relation() -> None:
    live = bc.LiveStream(iter([(1, [1.0, 2.0]), (2, [3.0, 4.0])]), dimensions=2, neighbours=Neighbours.replace_one())
    ledger = WindowLedger(epsilon=10.0, w=2, sampler="numpy-laplace", keep_records=True)
    ledger.bind(live)
    first, second = list(live)
    ledger.laplace(first, 1.0)
    assert ledger.records[-1].sensitivity == 2.0  # a move changes two bins by one
    with pytest.raises(InvalidArgument, match="sensitivity=1.0 is below 2.0"):
        ledger.laplace(second, 1.0, sensitivity=1.0)
    requirements = bc.RequirementSet([(2, 1.0)])
    assert bc.PersonalizedStream(requirements, [[0]], dimensions=1).neighbours == Neighbours.one_bin()


class _LyingTotal(Total):
    """A subclass that keeps what it sees and states a tiny sensitivity."""

    seen: list[np.ndarray] = []

    def apply(self, values: np.ndarray) -> np.ndarray:
        _LyingTotal.seen.append(values.copy())
        return super().apply(values)

    def sensitivity(self, relation: object, d: int) -> float:
        return 1e-9


@pytest.mark.parametrize(
    "query",
    [_LyingTotal(), Composed(outer=_LyingTotal(), inner=Identity()), Clipped(_LyingTotal(), 0, 1)],
    ids=["subclass", "inside-composed", "inside-clipped"],
)
def test_the_vocabulary_is_closed_to_subclasses(query: Query) -> None:
    ledger, secrets = _ledger(Neighbours.one_bin())
    with pytest.raises(InvalidArgument, match="not a subclass"):
        ledger.laplace_query(secrets[0], query, 1.0)
    assert _LyingTotal.seen == [] and ledger.t == 0


@pytest.mark.parametrize("sparse", [False, True])
def test_weights_changed_in_place_after_construction_are_seen(sparse: bool) -> None:
    """A Linear's cached norms follow its weights: shrinking them in place cannot keep the old sensitivity."""
    dense = np.array([[1.0, 1.0, 1.0]])
    query = Linear(scipy.sparse.csc_array(dense) if sparse else dense)
    ledger, secrets = _ledger(Neighbours.one_bin())
    ledger.laplace_query(secrets[0], query, 1.0)
    assert ledger.records[-1].sensitivity == 1.0
    target = query.weights.data if sparse else query.weights
    target.setflags(write=True)
    target *= 1000.0  # 1000x the answers: the noise must grow with them
    ledger.laplace_query(secrets[1], query, 1.0)
    assert ledger.records[-1].sensitivity == 1000.0


@pytest.mark.parametrize("relation", RELATIONS, ids=str)
def test_the_deviation_test_needs_twice_the_identitys_sensitivity(relation: Neighbours) -> None:
    """PeGaSus's deviation moves by < 2·‖Δ‖₁ over the cells: Δ below 2× the identity's is refused before
    any charge; a test on a statistic of the caller's is charged as vouched."""
    from budgetcheck import deviation

    ledger, secrets = _ledger(relation, d=3)
    need = 2 * relation.identity_sensitivity
    low = ledger.above_threshold(epsilon=1.0, sensitivity=need / 2, cells=(3,))
    with pytest.raises(
        InvalidArgument, match=f"sensitivity={need / 2!r} is below {need!r}, the L1 sensitivity of deviation"
    ):
        low.query(secrets[0], deviation, 1.0)
    assert ledger.t == 0
    ok = ledger.above_threshold(epsilon=1.0, sensitivity=need, cells=(3,))
    ok.query(secrets[0], deviation, 1.0)
    assert not ledger.records[-1].vouched and ledger.vouched == 0
    ok.query(secrets[1], lambda v: np.zeros((v.shape[0], 3)), 1.0)
    assert ledger.records[-1].vouched and ledger.vouched == 1


def test_deviation_moves_by_less_than_twice_the_change_brute_force() -> None:
    """The bound the check relies on, by enumeration: columns of up to 4 timestamps, counts 0..3,
    one entry changed by ±1..3."""
    from budgetcheck import deviation

    worst = 0.0
    for length in (1, 2, 3, 4):
        for column in itertools.product(range(COUNTS + 1), repeat=length):
            base = deviation(np.array(column, dtype=float)[None, :, None])[0, 0]
            for i, c in itertools.product(range(length), (-3, -2, -1, 1, 2, 3)):
                moved = np.array(column, dtype=float)
                moved[i] += c
                worst = max(worst, abs(deviation(moved[None, :, None])[0, 0] - base) / abs(c))
    assert worst < 2.0
