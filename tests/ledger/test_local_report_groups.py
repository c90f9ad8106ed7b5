"""``PersonalizedLedger.local_report_groups``: population division (LDP-IDS's LPD/LPA, Ren et al. 2022).

Attacks: a group reporting twice in its window, one ulp over a group's window, a partition that misses
or repeats a user, a class-wide charge slipping past a group's window, re-splitting the users after a
spend, and an auditor reading grouped records.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import BudgetExceeded, InvalidArgument, PersonalizedLedger, PersonalizedStream, RequirementSet
from budgetcheck.ledger.audit_notions import audit_personalized
from budgetcheck.ledger.local import group_counts


def _setup(requirements, bins, d, runs=1, seed=0):
    stream = PersonalizedStream(requirements, bins, dimensions=d)
    ledger = PersonalizedLedger(requirements, runs=runs, seed=seed, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    return stream, ledger


def _only(runs: int, classes: int, k: int, group: int, eps: list[float]) -> np.ndarray:
    out = np.zeros((runs, classes, k))
    out[:, :, group] = eps
    return out


def test_a_group_reporting_twice_in_its_window_is_refused_before_any_draw() -> None:
    requirements = RequirementSet.from_counts([((3, 1.0), 7), ((4, 2.0), 5)])
    bins = np.random.default_rng(1).integers(-1, 3, size=(5, 12))
    stream, ledger = _setup(requirements, bins, 3, runs=2, seed=9)
    twin_stream, twin = _setup(requirements, bins, 3, runs=2, seed=9)
    for s, led in ((stream, ledger), (twin_stream, twin)):
        led.local_report_groups(s.secret(1), _only(2, 2, 4, 1, [1.0, 2.0]), groups=4)
    before = ledger.remaining_groups(3)
    assert before[:, :, 1].tolist() == [[0.0, 0.0]] * 2 and (before[:, :, [0, 2, 3]] > 0).all()
    for t in (2, 3):  # still inside both windows (w = 3 and 4)
        with pytest.raises(BudgetExceeded, match=r"of group 1"):
            ledger.local_report_groups(stream.secret(t), _only(2, 2, 4, 1, [1.0, 2.0]), groups=4)
    assert len(ledger.records) == 1 and np.array_equal(ledger.remaining_groups(3), before)
    # nothing was drawn: the next grouped report equals the twin's, which never tried
    other = _only(2, 2, 4, 2, [1.0, 2.0])
    assert np.array_equal(
        ledger.local_report_groups(stream.secret(3), other, groups=4),
        twin.local_report_groups(twin_stream.secret(3), other, groups=4),
    )
    # a class-wide charge (every group) is refused too while group 1's window is full
    with pytest.raises(BudgetExceeded):
        ledger.local_report(stream.secret(4), [0.1, 0.0])
    # group 1 of class (3, 1.0) may report again at t = 4, its window [2, 4] being empty
    ledger.local_report_groups(stream.secret(4), _only(2, 2, 4, 1, [1.0, 0.0]), groups=4)


def test_one_ulp_over_a_groups_window_is_refused_and_remaining_is_spendable() -> None:
    requirements = RequirementSet.from_counts([((2, 0.7), 6)])
    stream, ledger = _setup(requirements, np.zeros((3, 6), dtype=np.int64), 2)
    ledger.local_report_groups(stream.secret(1), _only(1, 1, 3, 0, [0.3]), groups=3)
    left = ledger.remaining_groups(2)[0, 0]
    assert Fraction(left[0]) <= Fraction(0.7) - Fraction(0.3) and left[1] == left[2] == 0.7
    over = np.zeros((1, 1, 3))
    over[0, 0, 0] = np.nextafter(left[0], np.inf)
    with pytest.raises(BudgetExceeded, match=r"remaining_groups\(2\)\[0, 0, 0\]"):
        ledger.local_report_groups(stream.secret(2), over, groups=3)
    assert len(ledger.records) == 1
    exact = np.zeros((1, 1, 3))
    exact[0, 0] = left
    ledger.local_report_groups(stream.secret(2), exact, groups=3)  # everything left, every group: accepted
    assert (ledger.remaining_groups(2) < 1e-15).all()


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 4)), min_size=1, max_size=60),
    k=st.integers(1, 9),
)
def test_the_groups_are_every_user_exactly_once(data: list[tuple[int, int]], k: int) -> None:
    """Brute force: the j-th user of each class (column order) is in group j mod k; the counts per
    (class, group) add up to the class counts and the public sizes to the class sizes."""
    pairs = [((c + 1, 1.0), b) for c, b in data]
    requirements = RequirementSet([p for p, _ in pairs])
    classes, d = requirements.n_classes, 5
    bins = np.array([[b for _, b in pairs]], dtype=np.float64)
    counts = group_counts(bins[0], requirements.user_classes, classes, k, d).reshape(classes, k, d)
    expected = np.zeros((classes, k, d))
    seen = [0] * classes
    for i, c in enumerate(requirements.user_classes):
        g = seen[c] % k
        seen[c] += 1
        if bins[0, i] >= 0:
            expected[c, g, int(bins[0, i])] += 1
    assert np.array_equal(counts, expected)
    ledger = PersonalizedLedger(requirements)
    sizes = ledger.group_sizes(k)
    assert sizes.sum(axis=1).tolist() == list(requirements.counts) and sizes.min() >= 0
    assert sizes.max() - sizes.min() <= 1 or classes > 1


def test_every_group_reporting_estimates_the_whole_population_without_bias() -> None:
    """All k groups at ε: the same users as a class-wide report. Mean over 3000 runs within 4.5 standard
    errors of the truth per bin (false-failure rate for a random seed < 2·3·3.4e-6 < 1e-4)."""
    requirements = RequirementSet.from_counts([((2, 1.0), 700), ((5, 3.0), 300)])
    bins = np.random.default_rng(2).integers(-1, 3, size=(1, 1000))
    stream, ledger = _setup(requirements, bins, 3, runs=3000, seed=4)
    amounts = np.broadcast_to(np.array([1.0, 3.0])[None, :, None], (3000, 2, 4)).copy()
    amounts[:1500, 1, :] = 0.0  # half the runs: only class 0's groups report
    estimate = ledger.local_report_groups(stream.secret(1), amounts, groups=4)
    for rows, users in ((slice(0, 1500), slice(0, 700)), (slice(1500, 3000), slice(0, 1000))):
        truth = np.array([(bins[0, users] == j).sum() for j in range(3)])
        part = estimate[rows]
        z = (part.mean(axis=0) - truth) / (part.std(axis=0, ddof=1) / np.sqrt(part.shape[0]))
        assert np.abs(z).max() < 4.5, z
    variance = ledger.local_group_variance(amounts, 4, 3)
    assert variance[0] < variance[-1] and (variance > 0).all()


def test_the_partition_is_fixed_before_the_first_spend() -> None:
    requirements = RequirementSet.from_counts([((3, 1.0), 4)])
    stream, ledger = _setup(requirements, np.zeros((3, 4), dtype=np.int64), 2)
    ledger.spend(1, [0.1], purpose="warm-up")
    with pytest.raises(InvalidArgument, match=r"groups=2: .* already split into 1 group"):
        ledger.local_report_groups(stream.secret(2), _only(1, 1, 2, 0, [0.5]), groups=2)
    stream, ledger = _setup(requirements, np.zeros((3, 4), dtype=np.int64), 2)
    ledger.local_report_groups(stream.secret(1), _only(1, 1, 2, 0, [0.5]), groups=2)
    with pytest.raises(InvalidArgument, match=r"groups=4"):
        ledger.local_report_groups(stream.secret(2), _only(1, 1, 4, 0, [0.5]), groups=4)


@pytest.mark.parametrize(
    ("amounts", "groups", "match"),
    [
        (np.full((1, 1, 2), -0.1), 2, r"epsilon\[0, 0, 0\]=.* must be a finite number >= 0"),
        (np.full((1, 1, 2), np.nan), 2, r"must be a finite number >= 0"),
        (np.full((1, 1, 3), 0.1), 2, r"shape \(runs, classes, groups\)=\(1, 1, 2\)"),
        (np.zeros((1, 1, 2)), 2, r"epsilon=0 for every group and run"),
        (np.full((1, 1, 2), 0.1), 0, r"groups=0 must be an integer >= 1"),
        ([[["0.5", "0.5"]]], 2, r"epsilon=.* must be a number array .* not an array of <U3"),
        ([[[0.5, "0.5"]]], 2, r"epsilon=.* must be a number array"),
    ],
)
def test_bad_input_is_refused_naming_the_value(amounts: object, groups: int, match: str) -> None:
    stream, ledger = _setup(RequirementSet.from_counts([((3, 1.0), 4)]), np.zeros((2, 4), dtype=np.int64), 2)
    with pytest.raises(InvalidArgument, match=match):
        ledger.local_report_groups(stream.secret(1), amounts, groups=groups)
    assert len(ledger.records) == 0 and ledger.groups == 1
    if (
        groups >= 1 and "every group" not in match
    ):  # the public variance of a grouped report reads the same budgets the same way
        with pytest.raises(InvalidArgument, match=match):
            ledger.local_group_variance(amounts, groups, 2)


def test_the_auditor_reads_grouped_records_per_group() -> None:
    """Spends per group that the ledger accepted audit clean; the same amounts read class-wide would not."""
    requirements = RequirementSet.from_counts([((2, 1.0), 4)])
    stream, ledger = _setup(requirements, np.zeros((4, 4), dtype=np.int64), 2)
    for t in range(1, 5):
        ledger.local_report_groups(stream.secret(t), _only(1, 1, 2, t % 2, [1.0]), groups=2)
    report = audit_personalized(ledger.records, [(2, 1.0)], runs=1)
    assert not report.violations and report.worst_ratio == 1
    flattened = [type(r)(t=r.t, purpose=r.purpose, amounts=r.amounts.max(axis=2)) for r in ledger.records]
    assert audit_personalized(flattened, [(2, 1.0)], runs=1).violations


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.float64])
def test_the_reports_do_not_depend_on_the_dtype_the_bins_arrive_in(dtype: type) -> None:
    """The per-user bins are kept in their checked integer dtype (not copied to float64): int8 rows,
    uint8 rows (no -1), and integral floats give the same counts and the same noisy reports."""
    requirements = RequirementSet.from_counts([((3, 1.0), 9), ((5, 2.0), 6)])
    low = 0 if dtype is np.uint8 else -1
    bins = np.random.default_rng(4).integers(low, 3, size=(4, 15))
    eps = np.full((2, 2, 3), 0.25)
    reference_stream, reference = _setup(requirements, bins.astype(np.int64), 3, runs=2, seed=5)
    stream, ledger = _setup(requirements, bins.astype(dtype), 3, runs=2, seed=5)
    for t in (1, 2, 3):
        assert np.array_equal(
            ledger.local_report_groups(stream.secret(t), eps, groups=3),
            reference.local_report_groups(reference_stream.secret(t), eps, groups=3),
            equal_nan=True,
        )
