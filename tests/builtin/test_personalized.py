"""Personalized w-event: requirements, ledger against a brute-force oracle, OBS, the Sampling
Mechanism, PBD/PBA worked examples (Du et al. 2025, Figures 5 and 6), bad inputs."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from budgetcheck import (
    BudgetExceeded,
    InvalidArgument,
    PersonalizedLedger,
    PersonalizedStream,
    RequirementSet,
    WEventParams,
    WindowLedger,
    optimal_budget,
    sampling_error,
)
from budgetcheck.ledger.audit_notions import audit_personalized
from budgetcheck.ops import FLOAT, per_run
from budgetcheck.proving import RuleEnv
from budgetcheck.strategies import requirement_sets
from budgetcheck.stream.secret import _payload
from mechanisms.personalized import step_budgets
from mechanisms.rules import BARule, BDRule

AMOUNTS = st.sampled_from([0.0, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.3, 1.0, 2.0**-10])


@settings(max_examples=150, deadline=None)
@given(
    requirements=requirement_sets(max_classes=3, max_users=3, max_w=4),
    steps=st.lists(st.tuples(st.integers(0, 2), st.lists(AMOUNTS, min_size=3, max_size=3)), min_size=1, max_size=12),
)
def test_ledger_accepts_exactly_what_the_oracle_accepts(
    requirements: RequirementSet, steps: list[tuple[int, list[float]]]
) -> None:
    C = requirements.n_classes
    ledger = PersonalizedLedger(requirements, sampler="numpy-laplace", keep_records=True)
    spent: dict[int, list[Fraction]] = {}
    t = 1
    for gap, amounts in steps:
        t += gap
        row = amounts[:C]
        proposal = {c: spent.get(t, [Fraction(0)] * C)[c] + Fraction(row[c]) for c in range(C)}
        ok = all(
            sum((spent.get(k, [Fraction(0)] * C)[c] for k in range(t - req.w + 1, t)), Fraction(0)) + proposal[c]
            <= Fraction(req.epsilon)
            for c, req in enumerate(requirements.classes)
        )
        before = (ledger.records, ledger.remaining(t).tolist())
        if ok:
            ledger.spend(t, row, purpose="p")
            spent[t] = [proposal[c] for c in range(C)]
        else:
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, row, purpose="p")
            assert (ledger.records, ledger.remaining(t).tolist()) == before
    assert audit_personalized(ledger.records, [(r.w, r.epsilon) for r in requirements.classes], runs=1).ok


@settings(max_examples=100, deadline=None)
@given(requirements=requirement_sets(max_classes=3, max_users=3, max_w=5), data=st.data())
def test_long_quick_sequences_decide_as_the_oracle_per_class(requirements: RequirementSet, data: st.DataObject) -> None:
    """Many small spends (committed by the float pre-check without exact sums), some near a class's
    ε, and rare probes: every decision and every probed window sum is the oracle's."""
    C = requirements.n_classes
    ledger = PersonalizedLedger(requirements, sampler="numpy-laplace", keep_records=True)
    spent: dict[int, list[Fraction]] = {}
    small = st.floats(0.0, 0.05)
    t = 1
    for _ in range(data.draw(st.integers(1, 60))):
        t += data.draw(st.sampled_from([0, 1, 1, 2]))
        row = [data.draw(small | AMOUNTS if data.draw(st.integers(0, 7)) == 0 else small) for _ in range(C)]
        totals = spent.get(t, [Fraction(0)] * C)
        ok = all(
            sum((spent.get(k, [Fraction(0)] * C)[c] for k in range(t - req.w + 1, t)), Fraction(0))
            + totals[c]
            + Fraction(row[c])
            <= Fraction(req.epsilon)
            for c, req in enumerate(requirements.classes)
        )
        if ok:
            ledger.spend(t, row, purpose="p")
            spent[t] = [totals[c] + Fraction(row[c]) for c in range(C)]
        else:
            with pytest.raises(BudgetExceeded):
                ledger.spend(t, row, purpose="p")
        if data.draw(st.integers(0, 9)) == 0 or ok is False:
            sums = ledger.window_sum(t)
            for c, req in enumerate(requirements.classes):
                expected = sum((spent.get(k, [Fraction(0)] * C)[c] for k in range(t - req.w + 1, t + 1)), Fraction(0))
                assert Fraction(sums[c][0], 2**1127) == expected
    assert audit_personalized(ledger.records, [(r.w, r.epsilon) for r in requirements.classes], runs=1).ok


def test_ulp_boundary_and_remaining_is_spendable() -> None:
    requirements = RequirementSet([(3, 0.1 + 0.2), (2, 1.0)])
    ledger = PersonalizedLedger(requirements, runs=2, sampler="numpy-laplace", keep_records=True)
    for t in (1, 2, 3):
        ledger.spend(t, ledger.remaining(t), purpose="all that remains")
    eps = requirements.classes[1].epsilon  # (w=3, 0.30000000000000004) sorts after (2, 1.0)
    assert requirements.classes[0].w == 2
    with pytest.raises(BudgetExceeded):
        ledger.spend(3, [0.0, np.nextafter(0.0, 1.0)], purpose="one ulp over")
    assert eps == 0.1 + 0.2


@settings(max_examples=60, deadline=None)
@given(w=st.integers(1, 5), amounts=st.lists(st.tuples(st.integers(0, 2), AMOUNTS), min_size=1, max_size=15))
def test_one_class_agrees_with_the_window_ledger(w: int, amounts: list[tuple[int, float]]) -> None:
    personal = PersonalizedLedger(
        RequirementSet.from_counts([((w, 1.0), 7)]), sampler="numpy-laplace", keep_records=True
    )
    plain = WindowLedger(WEventParams(epsilon=1.0, w=w), sampler="numpy-laplace", keep_records=True)
    t = 1
    for gap, x in amounts:
        t += gap
        outcomes = []
        for ledger in (personal, plain):
            try:
                ledger.spend(t, x if ledger is plain else [x], purpose="p")
                outcomes.append(True)
            except BudgetExceeded:
                outcomes.append(False)
        assert outcomes[0] == outcomes[1]
        assert personal.remaining(t)[:, 0].tolist() == plain.remaining(t).tolist()


def test_obs_running_example() -> None:
    budgets = [0.1, 0.4, 0.4, 0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.4]
    theta, err = optimal_budget(budgets, [1] * 10)
    assert theta[0] == 0.4
    assert err[0] == pytest.approx(15.31, abs=0.01)
    assert sampling_error([0.1, 0.4, 0.8], [2, 5, 3], np.array([0.1]))[0] == pytest.approx(200.0)
    # The paper prints err_3 = 89.74, which its own formula does not give: 2p1(1−p1) + 5p2(1−p2)
    # + (2(1−p1) + 5(1−p2))² + 2/0.8² = 1.358 + 23.25 + 3.125 = 27.73. The argmin (0.4) is the same.
    assert sampling_error([0.1, 0.4, 0.8], [2, 5, 3], np.array([0.8]))[0] == pytest.approx(27.733, abs=0.001)


@settings(max_examples=100, deadline=None)
@given(
    budgets=st.lists(st.sampled_from([0.05, 0.1, 0.4, 0.8, 1.0, 2.0]), min_size=1, max_size=5),
    counts=st.lists(st.integers(1, 50), min_size=5, max_size=5),
)
def test_obs_picks_the_argmin_of_the_stated_error(budgets: list[float], counts: list[int]) -> None:
    n = counts[: len(budgets)]
    theta, err = optimal_budget(budgets, n)
    errors = {b: float(sampling_error(budgets, n, np.array([b]))[0]) for b in budgets}
    assert err[0] == pytest.approx(min(errors.values()))
    assert theta[0] == min(b for b, e in errors.items() if e == min(errors.values()))


def test_sampling_mechanism_inclusion_frequencies() -> None:
    requirements = RequirementSet.from_counts([((1, 0.01), 50), ((1, 1.0), 5000)])
    bins = (requirements.user_classes == 1).astype(np.int64)[None, :]  # low-budget users in bin 0
    stream = PersonalizedStream(requirements, bins, dimensions=2)
    runs = 4000
    ledger = PersonalizedLedger(requirements, runs=runs, seed=5, sampler="numpy-laplace", keep_records=True)
    ledger.bind(stream)
    budgets = np.array([0.01, 1.0])
    theta, _ = ledger.reporting_error(budgets)
    assert theta[0] == 1.0  # few low-budget users: OBS prefers θ = 1.0 and samples them
    p = np.expm1(0.01) / np.expm1(1.0)
    released = ledger.sample_release(stream.secret(1), budgets)
    # bin 0 = Binomial(50, p) + Lap(1): mean 50p, variance 50p(1−p) + 2.
    sd = np.sqrt((50 * p * (1 - p) + 2.0) / runs)
    assert abs(released[:, 0].mean() - 50 * p) < 4 * sd
    assert abs(released[:, 1].mean() - 5000) < 4 * np.sqrt(2.0 / runs)  # always kept


def _drive(
    rule: object, requirements: list[tuple[int, float]], decisions: list[bool]
) -> list[tuple[list[float], list[float]]]:
    """Budgets per step for a scripted decision sequence, through the code PBD/PBA run."""
    envs = [RuleEnv(eps, w) for w, eps in requirements]
    states = [per_run(rule.initial(FLOAT, env), 1) for env in envs]  # type: ignore[attr-defined]
    out = []
    for decision in decisions:
        diss, cand = step_budgets(rule, envs, states, 1)  # type: ignore[arg-type]
        publish = np.array([decision and cand.max() > 0])
        spent = np.where(publish[:, None], cand, 0.0)
        out.append((diss[0].tolist(), spent[0].tolist()))
        states = [
            rule.advance(FLOAT, env, st_, publish, (diss[:, c], spent[:, c]))
            for c, (env, st_) in enumerate(zip(envs, states, strict=True))
        ]  # type: ignore[attr-defined]
    return out


def test_pbd_example_figure_5() -> None:
    steps = _drive(BDRule(), [(4, 1.0), (2, 1.0), (3, 1.0)], [True, False, True])
    assert steps[0][0] == pytest.approx([1 / 8, 1 / 4, 1 / 6])
    assert steps[0][1] == pytest.approx([1 / 4, 1 / 4, 1 / 4])
    assert steps[1][1] == [0.0, 0.0, 0.0]
    assert steps[2][1][0] == pytest.approx(1 / 8)  # (ε1/2 − ε1/4)/2


def test_pba_example_figure_6() -> None:
    steps = _drive(BARule(), [(4, 1.0), (2, 1.0), (3, 1.0)], [True, False, True, True, True])
    assert steps[0][1] == pytest.approx([1 / 8, 1 / 4, 1 / 6])
    assert steps[1][1] == [0.0, 0.0, 0.0]
    assert steps[2][1] == pytest.approx([1 / 4, 1 / 2, 1 / 3])
    assert steps[3][1] == [0.0, 0.0, 0.0]  # nullified: t − l = 1 <= max t_{i,N} = 1
    assert steps[4][1] == pytest.approx([1 / 8, 1 / 4, 1 / 6])


def test_pba_nullifies_by_the_maximum_over_classes() -> None:
    # A spends 2 shares (t_N = 1) and B (w = 1) can never absorb: B alone would publish at t = 3.
    steps = _drive(BARule(), [(3, 1.0), (1, 1.0)], [True, False, True, True])
    assert steps[3][1] == [0.0, 0.0]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RequirementSet([]), "empty"),
        (lambda: RequirementSet([(2, 0.0)]), "epsilon=0.0"),
        (lambda: RequirementSet([(0, 1.0)]), "w=0"),
        (lambda: RequirementSet([(2, float("nan"))]), "nan"),
        (lambda: RequirementSet.from_counts([]), "empty"),
        (lambda: RequirementSet({"ann": (2, 1.0)}).index_of("bob"), "'bob' is unknown"),
        (
            lambda: PersonalizedStream.from_events(
                RequirementSet({"ann": (2, 1.0)}), [(1, "bob", 0)], length=2, dimensions=2
            ),
            "'bob' is unknown",
        ),
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0)]), [[3]], dimensions=2), "must be in [0, 2)"),
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0)]), [[0.5]], dimensions=2), "must be an integer"),
        # Found by the fuzz test: strings, booleans and values beyond int64 are refused, not cast.
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0)] * 2), [[False, ""]], dimensions=2), "dtype <U5"),
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0)]), [[True]], dimensions=2), "dtype bool"),
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0)]), [[1e300]], dimensions=2), "=1e.300 must be in [0, 2)"),
        (
            lambda: PersonalizedStream(
                RequirementSet([(2, 1.0)]), np.array([[2**63 + 5]], dtype=np.uint64), dimensions=2
            ),
            "=9223372036854775813 must be in [0, 2)",
        ),
        (lambda: PersonalizedStream(RequirementSet([(2, 1.0), (2, 1.0)]), [[0]], dimensions=2), "shape"),
    ],
)
def test_bad_inputs_are_named(build: object, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        build()  # type: ignore[operator]


def test_bad_spend_changes_nothing() -> None:
    requirements = RequirementSet([(2, 1.0), (3, 0.5)])
    ledger = PersonalizedLedger(requirements, runs=2, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, [0.5, 0.25], purpose="p")
    before = (ledger.records, ledger.remaining(2).tolist())
    for bad in ([0.1], [[0.1, -0.1], [0, 0]], [0.1, float("inf")]):
        with pytest.raises(InvalidArgument):
            ledger.spend(2, bad, purpose="p")
    with pytest.raises(BudgetExceeded, match=r"w=3, epsilon=0.5"):
        ledger.spend(2, [[0.1, 0.1], [0.1, 0.26]], purpose="p")
    assert (ledger.records, ledger.remaining(2).tolist()) == before


def test_export_round_trips_through_the_auditor() -> None:
    from budgetcheck import load_lines

    requirements = RequirementSet.from_counts([((2, 1.0), 3), ((3, 0.5), 2)])
    ledger = PersonalizedLedger(requirements, runs=2, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, [[0.5, 0.25], [0.1, 0.2]], purpose="p")
    header, records = load_lines(ledger.jsonl())
    assert header.notion == "personalized" and header.classes == ((2, 1.0, 3), (3, 0.5, 2))
    assert records[0].amounts.tolist() == [[0.5, 0.25], [0.1, 0.2]]


def test_a_million_users_in_five_classes_is_cheap() -> None:
    requirements = RequirementSet.from_counts(
        [((w, eps), 200_000) for w, eps in [(10, 1.0), (20, 0.5), (40, 2.0), (80, 1.0), (120, 0.1)]]
    )
    ledger = PersonalizedLedger(requirements, runs=4, sampler="numpy-laplace", keep_records=True)
    for t in range(1, 30):
        ledger.spend(t, ledger.remaining(t) / 2, purpose="p")
    assert requirements.n_users == 1_000_000 and requirements.n_classes == 5


def _counts_by_mask(requirements: RequirementSet, bins: NDArray[np.int64], d: int) -> NDArray[np.float64]:
    """The counting PersonalizedStream did before one bincount per row: a mask, its nonzero, one bincount."""
    T, C = bins.shape[0], requirements.n_classes
    present = bins >= 0
    rows = np.broadcast_to(np.arange(T)[:, None], bins.shape)[present]
    cells = (rows * C + requirements.user_classes[np.nonzero(present)[1]]) * d + bins[present]
    return np.bincount(cells, minlength=T * C * d).astype(np.float64).reshape(T, C, d)


def _counts_one_by_one(requirements: RequirementSet, bins: NDArray[np.int64], d: int) -> NDArray[np.float64]:
    """Every present user adds one to its (t, class, bin) cell: the definition, with np.add.at."""
    t, user = np.nonzero(bins >= 0)
    counts = np.zeros((bins.shape[0], requirements.n_classes, d))
    np.add.at(counts, (t, requirements.user_classes[user], bins[t, user]), 1.0)
    return counts


def _stream_counts(stream: PersonalizedStream) -> NDArray[np.float64]:
    return np.stack([_payload(secret) for secret in stream])


@st.composite
def _personalized_rows(draw: st.DrawFn) -> tuple[RequirementSet, NDArray[np.int64], int]:
    """Requirements (classes in user order or interleaved) and (T, n) rows with absent users, empty rows and classes."""
    grouped = draw(requirement_sets(max_classes=4, max_users=6, max_w=5))
    pairs = [grouped.classes[c] for c in grouped.user_classes]
    if draw(st.booleans()):
        pairs = draw(st.permutations(pairs))  # users of a class need not be adjacent
    requirements = RequirementSet([(r.w, r.epsilon) for r in pairs])
    d = draw(st.one_of(st.integers(1, 4), st.integers(16, 18)))  # both sides of counting by comparisons
    T = draw(st.integers(1, 6))
    n = requirements.n_users
    cell = st.integers(-1, d - 1)
    rows = [draw(st.one_of(st.just([-1] * n), st.lists(cell, min_size=n, max_size=n))) for _ in range(T)]
    return requirements, np.array(rows, dtype=np.int64), d


@given(case=_personalized_rows(), dtype=st.sampled_from(["int8", "int16", "int64", "float64", "uint8", "uint64"]))
@settings(max_examples=300, deadline=None)
def test_class_counts_equal_the_masked_count_and_the_definition(
    case: tuple[RequirementSet, NDArray[np.int64], int], dtype: str
) -> None:
    requirements, bins, d = case
    if dtype.startswith("uint"):
        bins = np.where(bins < 0, 0, bins)  # unsigned rows cannot say absent
    stream = PersonalizedStream(requirements, bins.astype(dtype), dimensions=d)
    counts = _stream_counts(stream)
    reference = _counts_by_mask(requirements, bins, d)
    assert counts.shape == (bins.shape[0], requirements.n_classes, d) and counts.dtype == np.float64
    assert np.array_equal(counts, reference)
    assert np.array_equal(counts, _counts_one_by_one(requirements, bins, d))
    # every present user is counted once, in its own class
    present = [np.bincount(requirements.user_classes[row >= 0], minlength=requirements.n_classes) for row in bins]
    assert np.array_equal(counts.sum(axis=2), np.stack(present))


@given(case=_personalized_rows())
@settings(max_examples=200, deadline=None)
def test_class_ranges_are_adjacent_columns_exactly_when_they_exist(
    case: tuple[RequirementSet, NDArray[np.int64], int],
) -> None:
    requirements = case[0]
    classes = requirements.user_classes
    ranges = requirements.class_ranges
    adjacent = all(np.ptp(np.flatnonzero(classes == c)) + 1 == n for c, n in enumerate(requirements.counts))
    assert (ranges is not None) == adjacent
    if ranges is not None:
        assert sorted(ranges) == [(a, b) for a, b in sorted(ranges) if a < b]
        assert sum(end - start for start, end in ranges) == classes.size
        for c, (start, end) in enumerate(ranges):
            assert (classes[start:end] == c).all()
    assert requirements.class_ranges is ranges  # found once


def test_class_counts_of_many_users_by_class_ranges() -> None:
    """10^4 users in 15 adjacent classes, interleaved and by comparisons: the definition's counts."""
    pairs = [(w, eps) for w in (10, 20, 40, 80, 120) for eps in (0.5, 1.0, 2.0)]
    grouped = RequirementSet.from_counts([(pair, 600 + 37 * i) for i, pair in enumerate(pairs)])
    assert grouped.class_ranges is not None
    order = np.random.default_rng(1).permutation(grouped.n_users)
    shuffled = RequirementSet([grouped.classes[c] for c in grouped.user_classes[order]])
    assert shuffled.class_ranges is None
    for d in (1, 2, 16, 17):
        bins = np.random.default_rng(d).integers(-1, d, size=(3, grouped.n_users), dtype=np.int8)
        for requirements in (grouped, shuffled):
            counts = _stream_counts(PersonalizedStream(requirements, bins, dimensions=d))
            assert np.array_equal(counts, _counts_one_by_one(requirements, bins.astype(np.int64), d))
            assert counts.sum() == np.count_nonzero(bins >= 0)


@pytest.mark.parametrize(
    ("pairs", "rows", "d", "expected"),
    [
        ([(2, 1.0)], [[-1]], 2, [[[0, 0]]]),  # one user, absent: an empty row
        ([(2, 1.0)], [[1], [0], [-1]], 2, [[[0, 1]], [[1, 0]], [[0, 0]]]),  # one user moving between bins
        ([(2, 1.0), (3, 1.0), (2, 1.0)], [[-1, -1, -1]], 3, [[[0, 0, 0], [0, 0, 0]]]),  # no one at all
        # class (3, 1.0) has nobody present; class (2, 1.0)'s users, interleaved, share bin 2
        ([(2, 1.0), (3, 1.0), (2, 1.0)], [[2, -1, 2]], 3, [[[0, 0, 2], [0, 0, 0]]]),
        ([(2, 1.0)] * 3, [[0, 0, 0]], 1, [[[3]]]),  # d = 1
    ],
)
def test_class_counts_edge_cases(
    pairs: list[tuple[int, float]], rows: list[list[int]], d: int, expected: list[object]
) -> None:
    requirements = RequirementSet(pairs)
    counts = _stream_counts(PersonalizedStream(requirements, rows, dimensions=d))
    assert np.array_equal(counts, np.array(expected, dtype=np.float64))


def test_out_of_range_bins_never_spill_into_the_next_class() -> None:
    """A bin of d in class 0 would be slot 0 of class 1 in a combined index: it is refused, for every dtype."""
    requirements = RequirementSet([(2, 1.0), (3, 1.0)])
    for dtype in ("int8", "int64", "uint8", "uint64", "float64"):
        with pytest.raises(InvalidArgument, match=r"bins\[t=1, user 0\]=2(\.0)? must be in \[0, 2\)"):
            PersonalizedStream(requirements, np.array([[2, -1 if dtype[0] != "u" else 0]], dtype=dtype), dimensions=2)
    for dtype in ("int8", "int64", "float64"):  # below -1 would be the previous class's last bin
        with pytest.raises(InvalidArgument, match=r"bins\[t=2, user 1\]=-2(\.0)? must be in \[0, 2\)"):
            PersonalizedStream(requirements, np.array([[0, 0], [0, -2]], dtype=dtype), dimensions=2)
