"""The ledger operations the data-adaptive mechanisms need: footprint measurements, grouped
releases, AboveThreshold and its ranked rows."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adaptive_groups import bound_ledger, growing_groups, window_sums
from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    RankedRows,
    TimestampOrder,
    WEventParams,
    WindowLedger,
    deviation,
    rounding,
)
from budgetcheck.ledger.noise import laplace_draws
from mechanisms._smoothing import smooth


# -- footprint measurements ---------------------------------------------------------------------
def test_footprint_charges_every_timestamp_it_reads_and_rechecks_old_windows() -> None:
    ledger, secrets = bound_ledger(w=4)
    out = ledger.measure_footprint(lambda v: v.sum(axis=0), secrets[0:3], sensitivity=3.0, epsilon=0.25, shape=3)
    assert out.shape == (1, 3)
    assert [r.t for r in ledger.records] == [1, 2, 3] and all(float(r.amounts[0]) == 0.25 for r in ledger.records)
    before = (len(ledger.records), ledger.remaining(3).tolist(), ledger.t)
    # windows [1, 3] and [1, 4] would hold 0.25 * (3 + 2) > 1: refused, nothing changes
    with pytest.raises(BudgetExceeded, match=r"window \[1, 3\]"):
        ledger.measure_footprint(lambda v: v.sum(axis=0), secrets[1:4], sensitivity=3.0, epsilon=0.25, shape=3)
    assert (len(ledger.records), ledger.remaining(3).tolist(), ledger.t) == before
    assert ledger.refusals == 1
    ledger.measure_footprint(lambda v: v.sum(axis=0), secrets[3:4], sensitivity=3.0, epsilon=0.25, shape=3)
    assert window_sums(ledger.records, 4, 1) == [Fraction(1)]


@pytest.mark.parametrize(
    ("pick", "message"),
    [
        (lambda s: [], "at least one"),
        (lambda s: [s[0], s[0]], "distinct"),
        (lambda s: [s[0], s[5]], "within one window"),
    ],
)
def test_footprint_bad_inputs_name_the_problem(pick: object, message: str) -> None:
    ledger, secrets = bound_ledger(w=4)
    with pytest.raises(InvalidArgument, match=message):
        ledger.measure_footprint(np.sum, pick(secrets), sensitivity=1.0, epsilon=0.1)  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match="epsilon=0"):
        ledger.measure_footprint(np.sum, secrets[:1], sensitivity=1.0, epsilon=0.0)
    assert ledger.records == ()


def test_footprint_cannot_end_before_the_ledger_clock() -> None:
    ledger, secrets = bound_ledger(w=3)
    ledger.spend(6, 0.1, purpose="x")
    with pytest.raises(TimestampOrder):
        ledger.measure_footprint(np.sum, [secrets[3], secrets[4]], sensitivity=1.0, epsilon=0.1)
    assert len(ledger.records) == 1


@settings(max_examples=150, deadline=None)  # was 400: 41 s of the default run for one property
@given(
    w=st.integers(1, 5),
    steps=st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 2),
            st.sets(st.integers(0, 4), min_size=1, max_size=3),
            st.sampled_from([0.1, 0.2, 0.25, 0.3, 1 / 3]),
        ),
        max_size=20,
    ),
)
def test_footprint_and_plain_spends_agree_with_a_brute_force_oracle(
    w: int, steps: list[tuple[bool, int, set[int], float]]
) -> None:
    """Accepted iff every window of the resulting per-timestamp totals is <= ε (exact), else unchanged."""
    ledger, secrets = bound_ledger(epsilon=1.0, w=w, data=np.zeros((40, 1)))
    t, totals = 1, {}
    for footprint, advance, back, amount in steps:
        t += advance
        stamps = sorted({t - b for b in back | {0} if t - b >= max(1, t - w + 1)}) if footprint else [t]
        if not stamps:
            continue
        proposed = dict(totals)
        for s in stamps:
            proposed[s] = proposed.get(s, Fraction(0)) + Fraction(amount)
        horizon = max(proposed)
        ok = all(
            sum((proposed.get(s, Fraction(0)) for s in range(e - w + 1, e + 1)), Fraction(0)) <= 1
            for e in range(1, horizon + 1)
        )
        count = len(ledger.records)
        try:
            if footprint:
                ledger.measure_footprint(np.sum, [secrets[s - 1] for s in stamps], sensitivity=1.0, epsilon=amount)
            else:
                ledger.spend(t, amount, purpose="plain")
        except BudgetExceeded:
            assert not ok
            assert len(ledger.records) == count
            continue
        assert ok
        totals = proposed
    assert window_sums(ledger.records, w, 1)[0] <= 1


# -- grouped releases -----------------------------------------------------------------------------
def test_laplace_groups_sums_groups_and_charges_the_largest_group_budget() -> None:
    ledger, secrets = bound_ledger(epsilon=1e9, w=2, runs=2, data=np.array([[1.0, 2.0, 4.0, 8.0]] * 3))
    labels = np.array([[0, 0, 1, -1], [1, 1, 1, 1]])
    out = ledger.laplace_groups(secrets[0], labels, np.array([[4e8, 1e8], [0.0, 2e8]]))
    np.testing.assert_allclose(out[0], [3.0, 4.0], atol=1e-6)
    assert np.isnan(out[1, 0]) and abs(out[1, 1] - 15.0) < 1e-6
    assert ledger.records[-1].amounts.tolist() == [4e8, 2e8]
    with pytest.raises(InvalidArgument, match="labels must lie in"):
        ledger.laplace_groups(secrets[1], np.array([0, 2, 0, 0]), np.array([1.0, 1.0]))
    with pytest.raises(InvalidArgument, match="labels must be integers"):
        ledger.laplace_groups(secrets[1], np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0, 1.0]))
    assert len(ledger.records) == 1


# -- AboveThreshold -------------------------------------------------------------------------------
def test_above_threshold_opens_tests_closes_and_charges_each_query_once() -> None:
    data = np.array([[0.0, 0.0], [0.0, 10.0], [0.0, 10.0], [0.0, 0.0], [0.0, 0.0]])
    ledger, secrets = bound_ledger(epsilon=1e12, w=5, data=data)
    test = ledger.above_threshold(epsilon=1e9, sensitivity=2.0, cells=(2,))
    first = test.query(secrets[0], deviation, 4.0)
    assert first.opened.tolist() == [[True, True]] and not first.above.any()
    second = test.query(secrets[1], deviation, 4.0)  # dev of {0, 10} = 10 >= 4 in cell 1 only
    assert second.above.tolist() == [[False, True]] and test.starts.tolist() == [[1, 0]]
    third = test.query(secrets[2], deviation, 4.0)  # cell 1 reopens at t = 3
    assert third.opened.tolist() == [[False, True]] and test.starts.tolist() == [[1, 3]]
    seen: list[np.ndarray] = []
    test.query(secrets[3], lambda v: seen.append(v.copy()) or deviation(v), 4.0, isolation="trusted")
    assert np.isnan(seen[0][0, :2, 1]).all() and seen[0][0, :, 0].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert [r.t for r in ledger.records] == [1, 2, 3, 4] and all(float(r.amounts[0]) == 1e9 for r in ledger.records)


def test_above_threshold_caps_footprints_and_is_refused_atomically() -> None:
    ledger, secrets = bound_ledger(epsilon=1.0, w=3, data=np.zeros((8, 1)))
    test = ledger.above_threshold(epsilon=0.5, sensitivity=2.0, cells=(1,), max_footprint=2)
    assert test.query(secrets[0], deviation, 1e9).opened.all()
    assert not test.query(secrets[1], deviation, 1e9).opened.any()
    starts = test.starts.tolist()
    with pytest.raises(BudgetExceeded):
        test.query(secrets[2], deviation, 1e9)  # window [1, 3] would hold 1.5
    assert test.starts.tolist() == starts and len(ledger.records) == 2
    wide = WindowLedger(WEventParams(1.0, 1), seed=0, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.zeros((5, 1)))
    wide.bind(stream)
    capped = wide.above_threshold(epsilon=1.0, sensitivity=2.0, cells=(1,), max_footprint=2)
    opened = [bool(capped.query(s, deviation, 1e9).opened[0, 0]) for s in stream]
    assert opened == [True, False, True, False, True]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1), st.sampled_from([1, 3]), st.sampled_from([2, 9, 40]), st.booleans(), st.floats(1.0, 1e4)
)
def test_above_threshold_keeps_deviation_up_to_date_with_the_answers_of_reading_the_footprints(
    seed: int, streams: int, cap: int, close_often: bool, scale: float
) -> None:
    """``deviation`` queries on a capped test use the kept sorted footprints (RankedRows); any other
    statistic reads the footprints. Both give the same answers, instances and records, on plain and
    stacked streams (the two deviations agree to rounding; a tie within an ulp is never drawn)."""
    rng = np.random.default_rng(seed)
    data = np.round(rng.normal(0.0, scale, size=(streams, 60, 2)), 1)
    threshold = (0.5 if close_often else 6.0) * scale
    outcomes = []
    for statistic in (deviation, lambda values: deviation(values)):
        ledger = WindowLedger(
            WEventParams(1e6, 50),
            runs=6,
            seed=seed,
            sampler="numpy-laplace",
            keep_records=True,
            trusted_code=True,
            allow_vouched=True,
        )
        stream = GuardedStream.stacked(list(data)) if streams > 1 else GuardedStream(data[0])
        ledger.bind(stream)
        test = ledger.above_threshold(epsilon=100.0, sensitivity=2.0, cells=(2,), max_footprint=cap)
        answers = [test.query(secret, statistic, threshold, isolation="trusted") for secret in stream]
        outcomes.append(
            (
                [a.above.tolist() for a in answers],
                [a.opened.tolist() for a in answers],
                test.starts.tolist(),
                [r.amounts.tolist() for r in ledger.records],
            )
        )
    assert outcomes[0] == outcomes[1]
    assert (
        any(any(map(any, above)) for above in outcomes[0][0]) or not close_often
    )  # instances closed on their deviation


def _spread(values: np.ndarray) -> np.ndarray:
    """max − min over each footprint (axis 1), NaN ignored (−inf for a cell not tested)."""
    missing = np.isnan(values)
    return np.asarray(np.where(missing, -np.inf, values).max(axis=1) - np.where(missing, np.inf, values).min(axis=1))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([None, 1, 4]), st.booleans())
def test_above_threshold_is_the_whole_array_reference_draw_for_draw(
    seed: int, cap: int | None, per_run_epsilon: bool
) -> None:
    """Answers, instances and offsets against AboveThreshold written as whole-array numpy steps on a
    generator with the ledger's seed (the oracle): query noise for every cell when some cell is
    tested, then one offset per opened cell; thresholds per run and cell; ε per run or shared."""
    rng = np.random.default_rng(seed)
    data = np.round(rng.normal(0.0, 3.0, size=(30, 3)), 1)
    runs, sensitivity = 4, 2.0
    epsilons = np.array([0.5, 1.0, 2.0, 4.0]) if per_run_epsilon else np.full(runs, 2.0)
    ledger = WindowLedger.with_epsilons(
        epsilons * 100, 30, seed=seed, sampler="numpy-laplace", keep_records=True, trusted_code=True, allow_vouched=True
    )
    stream = GuardedStream(data)
    ledger.bind(stream)
    test = ledger.above_threshold(
        epsilon=epsilons if per_run_epsilon else 2.0, sensitivity=sensitivity, cells=(3,), max_footprint=cap
    )
    thresholds = rng.uniform(0.0, 6.0, size=(runs, 3))
    oracle = np.random.default_rng(seed)
    query_scale = rounding.scale_up(4.0 * sensitivity, epsilons)[:, None]
    offset_scale = rounding.scale_up(2.0 * sensitivity, epsilons)[:, None]
    starts, offsets = np.zeros((runs, 3), dtype=np.int64), np.zeros((runs, 3))
    for secret in stream:
        t = secret.t
        answer = test.query(secret, _spread, thresholds, isolation="trusted")  # the oracle's answers, not the fork
        capped = (starts > 0) & (t - starts + 1 > cap) if cap is not None else np.zeros_like(starts, dtype=bool)
        opened = (starts == 0) | capped
        tested = ~opened
        above = np.zeros_like(opened)
        if tested.any():
            footprints = [[data[max(starts[r, c], 1) - 1 : t, c] for c in range(3)] for r in range(runs)]
            result = np.array([[np.ptp(f) for f in row] for row in footprints])
            noise = laplace_draws(oracle, (runs, 3)) * query_scale
            above = tested & (result + noise >= thresholds + offsets)
        offsets[opened] = laplace_draws(oracle, int(opened.sum())) * np.broadcast_to(offset_scale, (runs, 3))[opened]
        starts[opened] = t
        starts[above] = 0
        assert answer.opened.tolist() == opened.tolist() and answer.above.tolist() == above.tolist()
        assert test.starts.tolist() == starts.tolist()
        assert test._offsets.tobytes() == offsets.tobytes()


def test_a_test_keeping_sorted_groups_refuses_another_statistic_before_charging() -> None:
    """A capped test whose first query is a deviation keeps only the sorted groups: a later query
    with another statistic is refused with nothing charged (it has no footprints to read)."""
    ledger, secrets = bound_ledger(epsilon=10.0)
    test = ledger.above_threshold(epsilon=0.1, sensitivity=2.0, cells=(3,), max_footprint=3)
    test.query(secrets[0], deviation, 1.0)
    spent = list(ledger.records)
    with pytest.raises(InvalidArgument, match="query it with deviation"):
        test.query(secrets[1], lambda values: deviation(values), 1.0)
    assert list(ledger.records) == spent
    test.query(secrets[1], deviation, 1.0)  # the test goes on


def _stopping_deviation(group: list[float]) -> float:
    """2 Σ_{c < mean} (mean − c) as the kernel once summed it: ascending, stopping at the first c >= mean
    (the sum the branch-free kernel must give bit for bit); the mean from the total in time order."""
    total = 0.0
    for value in group:
        total += value
    mean, below = total / len(group), 0.0
    for value in sorted(group):
        if value >= mean:
            break
        below += mean - value
    return 2.0 * below


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 6), st.sampled_from([1, 2, 3, 5, 8, 9, 16, 17, 40, 70]))
def test_ranked_rows_deviation_matches_the_deviation_of_each_group(data: Any, rows: int, capacity: int) -> None:
    """RankedRows.deviation against :func:`deviation` of the groups written out in time order (the
    brute-force oracle), with groups that grow past ranks 16 and 64 and restart at any size."""
    ranked = RankedRows(capacity)
    for new, restart, groups, matrix in growing_groups(data, rows, capacity, 2 * capacity + 4):
        ranked.insert(new, restart)
        np.testing.assert_allclose(ranked.deviation(), deviation(matrix), rtol=1e-9, atol=1e-6)
        assert ranked.deviation().tolist() == [_stopping_deviation(g) for g in groups]
        assert ranked.median().tolist() == smooth(matrix, "median", 0.0).tolist()
        assert ranked.sizes.tolist() == [len(g) for g in groups]


def test_ranked_rows_bad_inputs() -> None:
    with pytest.raises(InvalidArgument, match="capacity"):
        RankedRows(0)
    ranked = RankedRows(3)
    ranked.insert(np.zeros(2), np.array([True, True]))
    with pytest.raises(InvalidArgument, match="3 rows"):
        ranked.insert(np.zeros(3), np.array([False, False, False]))
    ranked.insert(np.ones(2), np.array([False, False]))
    ranked.insert(np.full(2, 2.0), np.array([True, False]))
    before = (ranked.ranked.copy(), ranked.sizes.copy(), ranked.totals.copy())
    with pytest.raises(InvalidArgument, match="capacity=3"):
        ranked.insert(np.full(2, 5.0), np.array([True, False]))  # the second group would hold 4
    assert all(np.array_equal(a, b) for a, b in zip(before, (ranked.ranked, ranked.sizes, ranked.totals), strict=True))


def test_above_threshold_bad_inputs() -> None:
    ledger, secrets = bound_ledger()
    with pytest.raises(InvalidArgument, match="epsilon"):
        ledger.above_threshold(epsilon=0.0, sensitivity=1.0, cells=(3,))
    with pytest.raises(InvalidArgument, match="cells"):
        ledger.above_threshold(epsilon=0.1, sensitivity=1.0, cells=(0,))
    test = ledger.above_threshold(epsilon=0.1, sensitivity=1.0, cells=(2,))
    with pytest.raises(InvalidArgument, match="does not match cells"):
        test.query(secrets[0], deviation, 1.0)
    assert ledger.records == ()
