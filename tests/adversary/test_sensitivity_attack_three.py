"""An outside attack on derived sensitivities, exact budgets and refusals: each test reproduces one defect.

Every test fails on the code it was written against and asserts the promised behaviour: a sensitivity
is derived from the stream's neighbouring relation and is never below the true L1 sensitivity (brute
force in exact arithmetic); a Laplace scale is never below (true sensitivity)/ε; a refusal or a bad
argument changes nothing (no binding of a stream) and is an InvalidArgument naming the argument; the
data reaches a mechanism only through charged operations, never as exact values.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from binding_probe import bound_elsewhere
from budgetcheck import (
    Clipped,
    Composed,
    Differences,
    GroupSums,
    GuardedStream,
    Identity,
    InvalidArgument,
    Linear,
    LiveStream,
    Neighbours,
    PersonalizedLedger,
    PersonalizedStream,
    PolicyCollection,
    RequirementSet,
    Smoothing,
    StreamPolicy,
    SwellfishLedger,
    Total,
    WindowLedger,
    deviation,
)

NUMPY = "numpy-laplace"


def _ledger(epsilon: float = 1.0, w: int = 3) -> WindowLedger:
    return WindowLedger(epsilon=epsilon, w=w, seed=1, sampler=NUMPY, keep_records=True)


def _exact_l1(matrix: list[list[Fraction]], delta: tuple[int, ...]) -> Fraction:
    return sum((abs(sum((a * b for a, b in zip(row, delta, strict=True)), Fraction(0))) for row in matrix), Fraction(0))


# -- 1. Composed: the product A_outer·A_inner is formed in doubles before the "exact" norm ------------------


def test_composed_sensitivity_is_not_lost_to_the_float_product() -> None:
    """outer(inner(x)) with inner = (2^53, 1, 1, 1, −2^53)ᵀ and outer = (1, 1, 1, 1, 1) is x ↦ 3x: L1
    sensitivity 3 under one_bin(). Composed.matrix multiplies the matrices in doubles, 2^53 + 1 rounds
    back to 2^53, the product comes out 0, so the derived sensitivity is 0 (then 1, one person's
    noise), and a mechanism's sensitivity=1.0 — a third of the truth — is accepted."""
    inner_rows = [[2.0**53], [1.0], [1.0], [1.0], [-(2.0**53)]]
    outer_rows = [[1.0, 1.0, 1.0, 1.0, 1.0]]
    exact_inner = [[Fraction(v) for v in row] for row in inner_rows]
    exact_outer = [[Fraction(v) for v in row] for row in outer_rows]
    product = [
        [sum((o[i] * exact_inner[i][j] for i in range(len(exact_inner))), Fraction(0)) for j in range(1)]
        for o in exact_outer
    ]
    relation = Neighbours.one_bin()
    true = max(_exact_l1(product, tuple(int(v) for v in delta)) for delta in relation.changes(1))
    assert true == 3
    query = Composed(outer=Linear(np.array(outer_rows)), inner=Linear(np.array(inner_rows)))
    stream = GuardedStream(np.ones((3, 1)), neighbours=relation)
    ledger = _ledger()
    ledger.bind(stream)
    with pytest.raises(InvalidArgument, match="sensitivity"):
        ledger.laplace_query(stream.secret(1), query, 0.5, sensitivity=1.0)


# -- 2. dissimilarity: k/d rounded to nearest, then the scale is one ulp up: below (k/d)/ε --------------------


def _window_dissimilarity(epsilon: float, d: int) -> tuple[float, float]:
    stream = GuardedStream(np.ones((3, d)))
    ledger = _ledger()
    ledger.bind(stream)
    ledger.dissimilarity(stream.secret(1), np.zeros((1, d)), epsilon)
    return float(ledger.records[-1].noise_scale[0]), epsilon


def _sampled_dissimilarity(epsilon: float, d: int) -> tuple[float, float]:
    requirements = RequirementSet.from_counts([((2, 1.0), 100)])
    stream = PersonalizedStream(requirements, np.zeros((3, 100), dtype=np.int64), dimensions=d)
    ledger = PersonalizedLedger(requirements, keep_records=True, sampler=NUMPY)
    ledger.bind(stream)
    ledger.sample_dissimilarity(stream.secret(1), np.zeros((1, d)), epsilon)
    theta, _ = ledger.reporting_error(epsilon, sensitivity=1 / d)  # OBS's θ: the budget the noise is drawn at
    return float(ledger.records[-1].noise_scale[0]), float(theta[0])


@pytest.mark.parametrize("release", [_window_dissimilarity, _sampled_dissimilarity], ids=["w-event", "personalized"])
def test_dissimilarity_noise_scale_covers_the_true_sensitivity(release: Any) -> None:
    """The mean absolute difference over d = 49 bins has sensitivity exactly 1/49 under one_bin(). The
    ledgers use fl(1/49) (rounded down: `_identity_sensitivity(...) / count` in core.py, `1.0 / d` in
    personalized.py), divide by ε (rounded down again) and step one ulp up: at ε = 0.6848695625260186 the
    scale is 0.029798613315554966 and scale·ε < 1/49, so the realised loss (1/49)/scale exceeds the ε
    charged (the README: scales are rounded up so that it never does)."""
    d = 49
    scale, budget = release(0.6848695625260186, d)
    assert Fraction(scale) * Fraction(budget) >= Fraction(1, d)


# -- 3. Swellfish: declared Δ × Δ_Q^t multiplied in doubles (rounded down), then the scale -------------------


def test_swellfish_scale_covers_k_times_the_temporal_sensitivity() -> None:
    """Under across_bins(3) a Swellfish release's sensitivity is 3·Δ_Q^t. SwellfishLedger._sensitivity_at
    multiplies the two doubles (rounded to nearest: down for θ = 0.21103752447557728), and the scale
    sensitivity/ε is then one ulp up from a quotient rounded down again: at ε = 0.16623866638742754,
    scale·ε < 3·Δ_Q^t, a realised loss above the ε charged."""
    theta, epsilon = 0.21103752447557728, 0.16623866638742754
    policies = PolicyCollection([StreamPolicy(1, 3, (theta,))])
    stream = GuardedStream(np.ones((3, 4)), neighbours=Neighbours.across_bins(3))
    ledger = SwellfishLedger(policies, epsilon=1.0, keep_records=True, sampler=NUMPY)
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), epsilon)
    record = ledger.records[-1]
    true = 3 * Fraction(policies.temporal_sensitivity(1))
    assert Fraction(float(record.noise_scale[0])) * Fraction(epsilon) >= true


# -- 4. The personalized ledger ignores a LiveStream's neighbouring relation --------------------------------


@pytest.mark.parametrize("operation", ["sample_release", "sample_dissimilarity", "local_report"])
def test_personalized_release_derives_its_sensitivity_from_the_relation(operation: str) -> None:
    """A LiveStream with classes= may declare any relation; PersonalizedLedger binds it, and
    sample_release / sample_dissimilarity / local_report hard-code sensitivity 1 and 1/d (one user, one
    bin). With neighbours=across_bins(5) a person moves the counts by 5 in L1, yet the release gets
    Laplace scale 1/θ (record: sensitivity=1.0, scale 2.0 at θ = 0.5), and the local oracle treats the
    5 as 5 users of ε each. The ledger must use 5 (5/d) or refuse the relation."""
    requirements = RequirementSet.from_counts([((2, 1.0), 10)])
    rows = [(1, [[2.0, 2.0, 2.0]]), (2, [[2.0, 2.0, 2.0]])]
    stream = LiveStream(rows, dimensions=3, classes=1, neighbours=Neighbours.across_bins(5))
    ledger = PersonalizedLedger(requirements, keep_records=True, sampler=NUMPY)
    ledger.bind(stream)
    secret = next(iter(stream))
    try:
        if operation == "sample_release":
            ledger.sample_release(secret, 0.5)
        elif operation == "sample_dissimilarity":
            ledger.sample_dissimilarity(secret, np.zeros((1, 3)), 0.5)
        else:
            ledger.local_report(secret, 0.5)
    except InvalidArgument:
        return  # refusing a relation other than one person, one bin is also right
    record = ledger.records[-1]
    true = 5.0 / 3 if operation == "sample_dissimilarity" else 5.0
    assert record.sensitivity >= true
    if record.noise_scale is not None:
        assert float(record.noise_scale[0]) * 0.5 >= true


# -- 5. laplace_weighted reuses the nonzeros of a Composed query whose inner Linear changed in place ---------


def _composed_changed() -> tuple[Any, np.ndarray, Any, float]:
    inner = Linear(np.eye(3))
    query = Composed(outer=Identity(), inner=inner)

    def change() -> None:
        inner.weights.setflags(write=True)
        inner.weights[0, 0] = 1000.0

    return query, np.array([1, 1, 1]), change, 1000.0


def _group_sums_changed() -> tuple[Any, np.ndarray, Any, float]:
    query = GroupSums(np.array([0, 0, 0]), 2)

    def change() -> None:
        query.labels.setflags(write=True)
        query.labels[:] = 1

    return query, np.array([1, 10]), change, 10.0


@pytest.mark.parametrize("make", [_composed_changed, _group_sums_changed], ids=["composed-linear", "group-sums"])
def test_weighted_release_sees_a_query_changed_in_place(make: Any) -> None:
    """_column_major remembers a query's nonzeros by id (only a top-level Linear is exempt). Linear
    recomputes its norms when its weights change in place (the library handles that case), but inside a
    Composed, or in a GroupSums whose labels array is made writeable again, the cached rows and magnitudes
    stay. Composed(Identity, Linear(I)) after inner.weights[0, 0] = 1000 keeps σ = 1 (scale 1 per answer)
    for an answer of sensitivity 1000; GroupSums([0, 0, 0], 2) with weights (1, 10) keeps σ = 1 after
    every bin moves to group 1, whose answer is released at budget 10ε: a loss of 10 for a charge of 1."""
    stream = GuardedStream(np.ones((4, 3)))
    ledger = _ledger(epsilon=10.0)
    ledger.bind(stream)
    query, weights, change, expected_sigma = make()
    ledger.laplace_weighted(stream.secret(1), query, weights, 1.0)
    change()
    ledger.laplace_weighted(stream.secret(2), query, weights, 1.0)
    record = ledger.records[-1]
    scales = np.asarray(record.noise_scale, dtype=np.float64).reshape(-1)
    # the answer of the largest weight moves by 1 per person: its scale must be at least σ / (ε·w_max) = 1
    heaviest = int(np.argmax(weights))
    assert float(scales[heaviest]) * float(weights[heaviest]) >= expected_sigma


# -- 6. A nested non-linear query crashes with AttributeError instead of InvalidArgument --------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Composed(outer=Clipped(Total(), 0, 1), inner=Identity()),  # type: ignore[arg-type]
        lambda: Composed(outer=Total(), inner=Clipped(Identity(), 0, 1)),  # type: ignore[arg-type]
        lambda: Clipped(Clipped(Identity(), 0, 1), 0, 1),  # type: ignore[arg-type]
    ],
    ids=["clipped-outer", "clipped-inner", "clipped-of-clipped"],
)
def test_a_non_linear_query_inside_composed_or_clipped_is_an_invalid_argument(make: Any) -> None:
    """check_query checks that the parts are of the vocabulary, not that they are linear: Composed and
    Clipped built directly (not through .then) around a Clipped pass it, and the sensitivity computation
    then raises AttributeError ('Clipped' object has no attribute 'matrix' / 'norms')."""
    stream = GuardedStream(np.ones((3, 3)))
    ledger = _ledger()
    ledger.bind(stream)
    with pytest.raises(InvalidArgument, match="query"):
        ledger.laplace_query(stream.secret(1), make(), 0.1)


# -- 7. A bad argument after the claim raises a foreign error and leaves the stream bound ---------------------


_HUGE = Neighbours.one_bin(2**1100)  # accepted: a bound no double holds


@pytest.mark.parametrize(
    ("operation", "relation"),
    [
        (lambda ledger, stream: ledger.dissimilarity(stream.secret(1), "abc", 0.1), None),
        (lambda ledger, stream: ledger.dissimilarity_groups(stream.secret(1), "abc", [0, 0, 1], [0.1, 0.1]), None),
        (lambda ledger, stream: ledger.laplace_bins(stream.secret(1), [0.1] * 3, sensitivity=2**1100), None),
        (
            lambda ledger, stream: ledger.laplace_groups(stream.secret(1), [0, 0, 1], [0.1, 0.1], sensitivity=2**1100),
            None,
        ),
        (lambda ledger, stream: ledger.laplace_bins(stream.secret(1), [0.1] * 3), _HUGE),
        (
            lambda ledger, stream: ledger.measure_footprint(
                lambda v: 1.0, [stream.secret(1)], sensitivity=2**1100, epsilon=0.1, isolation="trusted"
            ),
            None,
        ),
    ],
    ids=[
        "dissimilarity-last",
        "dissimilarity-groups-last",
        "bins-huge-sensitivity",
        "groups-huge-sensitivity",
        "bins-huge-relation-bound",
        "footprint-huge-sensitivity",
    ],
)
def test_a_bad_argument_is_invalid_and_binds_nothing(operation: Any, relation: Neighbours | None) -> None:
    """The secret is claimed (the stream bound) before last_release or the sensitivity is checked; a
    last_release of 'abc' raises numpy's ValueError, sensitivity=2**1100 (or a stream whose relation is
    Neighbours.one_bin(2**1100), which Neighbours accepts) an OverflowError. journaled undoes a binding only
    for BudgetExceeded and InvalidArgument, so the stream stays bound to a ledger that charged nothing and
    read nothing, and the right ledger is refused it."""
    stream = GuardedStream(np.ones((4, 3)), neighbours=relation or Neighbours.one_bin())
    ledger = _ledger()
    with pytest.raises(InvalidArgument):
        operation(ledger, stream)
    assert not bound_elsewhere(stream)


def test_personalized_bad_last_release_is_invalid_and_binds_nothing() -> None:
    """The same gap in PersonalizedLedger.sample_dissimilarity: the class secret is claimed first, then
    np.asarray('abc', float64) raises ValueError and the PersonalizedStream stays bound."""
    requirements = RequirementSet.from_counts([((2, 1.0), 4)])
    stream = PersonalizedStream(requirements, np.zeros((3, 4), dtype=np.int64), dimensions=3)
    ledger = PersonalizedLedger(requirements, sampler=NUMPY)
    with pytest.raises(InvalidArgument, match="last_release"):
        ledger.sample_dissimilarity(stream.secret(1), "abc", 0.5)
    PersonalizedLedger(requirements).bind(stream)  # SecretAccess while the refused call's binding stays


# -- 8. AboveThreshold: thresholds that do not broadcast are a ValueError ----------------------------------


@pytest.mark.parametrize("thresholds", [np.zeros(5), "abc"], ids=["shape", "string"])
def test_threshold_query_bad_thresholds_are_an_invalid_argument(thresholds: Any) -> None:
    """ThresholdTest._query converts thresholds with np.asarray(..., float64) and np.broadcast_to: a
    (5,) array for cells (3,) or a string raises numpy's ValueError, not InvalidArgument naming thresholds."""
    stream = GuardedStream(np.ones((4, 3)))
    ledger = _ledger()
    ledger.bind(stream)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(3,))
    with pytest.raises(InvalidArgument, match="thresholds"):
        test.query(stream.secret(1), deviation, thresholds)


# -- 9. AboveThreshold: a custom statistic receives the exact footprints in the mechanism's process -------------


def test_threshold_statistic_does_not_hand_the_exact_data_to_the_mechanism() -> None:
    """A statistic other than deviation is a vouched measurement (its record says vouched), like measure's
    fn — but measure runs fn in a forked child, and ThresholdTest calls the statistic in-process with the
    true footprint values: a closure keeps them, and the mechanism holds the stream's exact counts after
    paying one ε for a noisy comparison."""
    data = np.array([[3.0, 141.0, 59.0], [26.0, 53.0, 58.0], [97.0, 93.0, 23.0]])
    stream = GuardedStream(data)
    ledger = _ledger(epsilon=10.0)
    ledger.bind(stream)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(3,))
    kept: list[np.ndarray] = []

    def statistic(footprints: np.ndarray) -> np.ndarray:
        kept.append(np.array(footprints))
        return np.zeros((footprints.shape[0], 3))

    for t in (1, 2, 3):
        try:
            test.query(stream.secret(t), statistic, 1e9)
        except InvalidArgument:  # refusing statistics other than the library's own is also right
            break
    seen = np.concatenate([k.reshape(-1) for k in kept]) if kept else np.zeros(0)
    assert not np.isin(data[1:], seen).all(), "the statistic handed the mechanism the exact counts"


# -- 10. AboveThreshold: a statistic of the wrong shape fails after the charge with numpy's message ------------


def test_threshold_statistic_of_a_wrong_shape_fails_as_a_budgetcheck_error() -> None:
    """The statistic runs after the charge (it reads the data); a result of another shape raises numpy's
    ValueError 'operands could not be broadcast ... (7,) and requested shape (1,3)': a crash after a
    charge, whose message carries the shape the statistic chose (data-dependent), where measure raises
    one fixed MeasurementFailed. Now (issue 43) any failure of the statistic gives its declared default,
    tested like any value, and is recorded for the ledger's owner without the shape it chose."""
    stream = GuardedStream(np.ones((4, 3)))
    ledger = WindowLedger(epsilon=1.0, w=3, seed=1, sampler=NUMPY, keep_records=True, allow_vouched=True)
    ledger.bind(stream)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(3,))
    test.query(stream.secret(1), deviation, 0.0)
    answer = test.query(stream.secret(2), lambda footprints: np.zeros(7), 1e9, default=0.0)
    assert not answer.above.any() and [f.operation for f in ledger.failures] == ["query"]
    assert "7" not in ledger.failures[0].reason


# -- 11. A query's own parameters are not validated: TypeError from deep inside --------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Linear(np.ones((1, 3)), claimed="3"),
        lambda: Differences(lag=1.5),  # type: ignore[arg-type]
        lambda: Smoothing(width=2.5),  # type: ignore[arg-type]
        lambda: Differences(lag="1"),  # type: ignore[arg-type]
    ],
    ids=["linear-claimed-str", "differences-lag-float", "smoothing-width-float", "differences-lag-str"],
)
def test_a_query_with_a_bad_parameter_is_an_invalid_argument(make: Any) -> None:
    """Linear's claimed, Differences' lag and Smoothing's width are taken as given: claimed='3' fails in
    _same (str − float), lag=1.5 and width=2.5 in np.eye, lag='1' in a comparison — TypeError, where the
    promise is InvalidArgument naming the argument and its value (at construction or at the release)."""
    stream = GuardedStream(np.ones((3, 3)))
    ledger = _ledger()
    ledger.bind(stream)
    with pytest.raises(InvalidArgument, match="claimed|lag|width"):
        ledger.laplace_query(stream.secret(1), make(), 0.1)


# -- 12. GroupSums: labels changed in place are checked only after the charge -----------------------------------


def test_group_sums_with_labels_changed_in_place_refuses_before_the_charge() -> None:
    """GroupSums freezes its labels with setflags(write=False) on an array it owns, which the caller can
    undo. A label moved to 5 (groups=2) passes the sensitivity computation (group_norms does not check
    bounds), the ledger charges ε = 0.1 at t = 1, and apply then raises IndexError: a crash after a
    charge, nothing released, the budget gone. Linear re-checks weights changed in place; labels must be
    checked (or copied) before anything is charged."""
    stream = GuardedStream(np.ones((3, 3)))
    ledger = _ledger()
    ledger.bind(stream)
    query = GroupSums(np.array([0, 1, 0]), 2)
    query.labels.setflags(write=True)
    query.labels[0] = 5
    with pytest.raises(InvalidArgument):
        ledger.laplace_query(stream.secret(1), query, 0.1)
    assert ledger.records == ()
    assert ledger.window_sum(1) == (0,)


# -- 13. Swellfish thresholds no double equals are rounded to nearest (down), not refused ------------------------


def test_swellfish_threshold_no_double_equals_is_refused_or_covered() -> None:
    """StreamPolicy's converter is float(x): a threshold θ = 9412931955006976999/18014398509481984000
    (just under half an ulp above 0.5225226892839316) becomes that double, Δ_Q^t is computed from it, and
    the release at ε = 0.527642976049598 gets scale 0.9902959254683891 with scale·ε < θ: a realised loss
    above the ε charged. Budgets no double equals are refused; a threshold that sets the noise must be
    refused too (or rounded up)."""
    theta = Fraction(9412931955006976999, 18014398509481984000)
    epsilon = 0.527642976049598
    try:
        policies = PolicyCollection([StreamPolicy(1, 3, (theta,))])  # type: ignore[arg-type]
    except InvalidArgument:
        return
    stream = GuardedStream(np.ones((3, 2)))
    ledger = SwellfishLedger(policies, epsilon=1.0, keep_records=True, sampler=NUMPY)
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), epsilon)
    assert Fraction(float(ledger.records[-1].noise_scale[0])) * Fraction(epsilon) >= theta


# -- 14. A budget array no double equals is rounded to doubles, not refused ----------------------------------------

_TENTH = np.longdouble(1) / np.longdouble(10)


def _with_epsilons_long_double() -> None:
    WindowLedger.with_epsilons(np.array([1.0, _TENTH]), 1)


def _threshold_epsilon_long_double() -> None:
    ledger = WindowLedger(epsilon=1.0, w=2, runs=2, sampler=NUMPY)
    ledger.above_threshold(epsilon=np.array([_TENTH, _TENTH]), sensitivity=2.0, cells=(3,))


def _threshold_epsilon_int64() -> None:
    ledger = WindowLedger(epsilon=1e30, w=2, runs=2, sampler=NUMPY)
    ledger.above_threshold(epsilon=np.array([2**62 + 1, 1], dtype=np.int64), sensitivity=2.0, cells=(1,))


@pytest.mark.parametrize(
    "make",
    [_with_epsilons_long_double, _threshold_epsilon_long_double, _threshold_epsilon_int64],
    ids=["with_epsilons-longdouble", "above_threshold-longdouble", "above_threshold-int64"],
)
def test_a_budget_array_no_double_equals_is_refused(make: Any) -> None:
    """WindowLedger(epsilon=np.longdouble('0.1')), with_epsilons([1.0, np.longdouble('0.1')]) and spends of
    np.int64(2**62 + 1) are refused (no double equals them), but the fast paths of check_epsilons and
    check_query_epsilon for numeric arrays take any float or integer dtype and convert:
    with_epsilons(np.array([1.0, 0.1L])) holds run 1 to the double 0.1, above the 0.1L it was given, so a
    window summing to 0.1 > ε is accepted; an AboveThreshold ε of int64 2**62 + 1 is charged as 2**62."""
    numerator, denominator = _TENTH.as_integer_ratio()
    if Fraction(numerator, denominator) == Fraction(float(_TENTH)) and make is not _threshold_epsilon_int64:
        pytest.skip("this platform's long double is a double")
    with pytest.raises(InvalidArgument, match="double"):
        make()


# -- 15. laplace_weighted: uint64 weights wrap to negative int64 after the check ------------------------------------


def test_weighted_release_refuses_weights_that_wrap_when_cast() -> None:
    """laplace_weighted checks weights.min() >= 0 on the array as given, then casts it to int64: a uint64
    weight 2**64 − 1 becomes −1. For A = [[1, 1], [1, 0]] and weights (2**64 − 1, 10), column 0 sums to
    −1 + 10 = 9, so σ = 9 and answer 1 (weight 10) gets budget 10/9 of ε: a change of bin 0 moves
    answer 1 by 1 at Laplace scale 0.9, a loss of 1.11 for a charge of ε = 1."""
    stream = GuardedStream(np.ones((3, 2)))
    ledger = _ledger()
    ledger.bind(stream)
    query = Linear(np.array([[1.0, 1.0], [1.0, 0.0]]))
    weights = np.array([2**64 - 1, 10], dtype=np.uint64)
    try:
        ledger.laplace_weighted(stream.secret(1), query, weights, 1.0)
    except InvalidArgument:
        return
    record = ledger.records[-1]
    scales = np.asarray(record.noise_scale, dtype=np.float64).reshape(-1)
    # Δ = e_0 moves both answers by 1: the realised loss is Σ 1/scale over the released answers
    loss = sum(Fraction(1) / Fraction(float(scale)) for scale in scales if np.isfinite(scale))
    assert loss <= Fraction(float(record.amounts[0]))


# -- 16. A linear query whose answer overflows: the release is non-finite exactly when the data is larger ---------


@pytest.mark.parametrize("sampler", [NUMPY, "discrete-laplace"])
def test_a_query_answer_that_overflows_is_refused_before_the_charge(sampler: str) -> None:
    """Linear([[1e308]]) has sensitivity 1e308 (derived, exact) and the ledger releases it at ε = 1. For
    x = 1 the answer is 1e308 and about 62% of releases are finite (125 of seeds 0..199); for x = 2 the
    answer overflows to inf and every release is inf or NaN (0 of 200 finite): a finite release tells x = 1
    from its neighbour x = 2 with certainty, an unbounded privacy loss. Under discrete-laplace x = 2 raises
    OverflowError after the charge (a data-dependent crash). Stream values are at most 2**53, so a query
    whose answers can pass the largest double is knowable before anything is read."""
    stream = GuardedStream(np.array([[2.0]]))
    ledger = WindowLedger(epsilon=1.0, w=1, seed=0, sampler=sampler, keep_records=True)
    ledger.bind(stream)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            released = ledger.laplace_query(stream.secret(1), Linear(np.array([[1e308]])), 1.0)
    except InvalidArgument:
        assert ledger.records == ()
        return
    assert np.isfinite(released).all()


# -- 17. An integer too large for a double escapes as OverflowError from every budget and sensitivity check -------

_POLICIES = [StreamPolicy(1, 2, (1.0,))]


@pytest.mark.parametrize(
    "make",
    [
        lambda: WindowLedger(epsilon=2**1100, w=2),
        lambda: WindowLedger.with_epsilons([2**1100], 2),
        lambda: RequirementSet([(2, 2**1100)]),
        lambda: SwellfishLedger(PolicyCollection(_POLICIES), epsilon=2**1100),
        lambda: _ledger().above_threshold(epsilon=0.1, sensitivity=2**1100, cells=(3,)),
        lambda: _ledger().laplace(GuardedStream(np.ones((2, 3))).secret(1), 0.1, sensitivity=2**1100),
        lambda: _ledger().laplace_query(GuardedStream(np.ones((2, 3))).secret(1), Total(), 0.1, sensitivity=2**1100),
    ],
    ids=["window-epsilon", "with-epsilons", "requirement", "swellfish-epsilon", "threshold", "laplace", "query"],
)
def test_a_huge_integer_budget_or_sensitivity_is_an_invalid_argument(make: Any) -> None:
    """check_epsilon (and resolve, for a declared sensitivity) call float(value) unguarded: 2**1100 raises
    OverflowError 'int too large to convert to float' where a spend of 10**400 is an InvalidArgument naming
    epsilon. Bad input must give InvalidArgument naming the argument and its value."""
    with pytest.raises(InvalidArgument, match="epsilon|sensitivity"):
        make()


# -- 18. A Linear's claimed sensitivity is checked only when the Linear is the whole query ----------------------


@pytest.mark.parametrize(
    "wrap",
    [
        lambda linear: Clipped(linear, 0, 1),
        lambda linear: Composed(outer=Identity(), inner=linear),
        lambda linear: Identity().then(linear),
    ],
    ids=["clipped", "composed-inner", "then-outer"],
)
def test_a_wrong_claimed_sensitivity_is_refused_inside_any_query(wrap: Any) -> None:
    """Linear(ones((1, 3)), claimed=5.0) alone is refused (computed 1.0 under one_bin()), but
    derived_sensitivity checks claimed only for a top-level Linear: wrapped in Clipped or Composed (also
    through .then) the wrong claim is released without a word. The README: a claimed sensitivity that
    differs from the computed one is refused."""
    stream = GuardedStream(np.ones((3, 3)))
    ledger = _ledger()
    ledger.bind(stream)
    with pytest.raises(InvalidArgument, match="claimed"):
        ledger.laplace_query(stream.secret(1), wrap(Linear(np.ones((1, 3)), claimed=5.0)), 0.1)
