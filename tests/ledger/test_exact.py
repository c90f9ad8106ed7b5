"""ExactVector (multi-limb int64 sums) against Python's big integers, the oracle."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import rounding
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.rounding import step_up as _step_up

RUNS = 3
budgets = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False)
tiny = st.sampled_from([0.0, 5e-324, 2.0**-1022, 2.0**-600, 0.1, 1.0 / 3.0, 1.0, 2.0**60, 1.7e308])
per_run = st.lists(st.one_of(budgets, tiny), min_size=RUNS, max_size=RUNS).map(lambda xs: np.array(xs))
vectors = st.one_of(per_run, st.one_of(budgets, tiny).map(lambda x: np.full(RUNS, x)))  # constants take a shortcut


def _oracle(values: np.ndarray) -> list[int]:
    return [rounding.to_units(float(v)) for v in values]


def _canonical(vector: ExactVector) -> None:
    """Limbs normalised (every limb but the top one in [0, 2**60)) and trimmed (no all-zero limb at either end)."""
    limbs = vector._limbs
    if limbs is None:
        return
    assert ((limbs[:-1] >= 0) & (limbs[:-1] < 2**60)).all()
    assert limbs[0].any() and limbs[-1].any()


@given(vectors)
def test_from_floats_is_exact(values: np.ndarray) -> None:
    exact = ExactVector.from_floats(values)
    assert exact.tolist() == _oracle(values)
    _canonical(exact)
    strided = np.repeat(values, 2)[::2]  # a view with a stride of two doubles
    assert ExactVector.from_floats(strided).tolist() == _oracle(values)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), vectors), min_size=1, max_size=12), st.one_of(budgets, tiny))
def test_sums_and_comparisons_match_python_integers(steps: list[tuple[bool, np.ndarray]], bound: float) -> None:
    exact, oracle = ExactVector.zeros(RUNS), [0] * RUNS
    for add, values in steps:
        term = ExactVector.from_floats(values)
        exact = exact + term if add else exact - term
        oracle = [a + b if add else a - b for a, b in zip(oracle, _oracle(values), strict=True)]
        assert exact.tolist() == oracle
        _canonical(exact)
        limit = rounding.to_units(bound)
        assert exact.exceeds(ExactVector.from_int(limit)).tolist() == [v > limit for v in oracle]


def test_a_window_at_its_bound_passes_and_one_unit_over_is_refused() -> None:
    share = rounding.share(1.0, 120)
    total = ExactVector.zeros(2)
    for _ in range(120):
        total = total + ExactVector.from_floats(np.array([share, 0.0]))
    exact = 120 * rounding.to_units(share)
    assert total.tolist() == [exact, 0]
    assert total.exceeds(ExactVector.from_int(exact)).tolist() == [False, False]
    assert total.exceeds(ExactVector.from_int(exact - 1)).tolist() == [True, False]
    assert not total.exceeds(ExactVector.from_int(rounding.to_units(1.0))).any()


@settings(max_examples=300)
@given(st.lists(st.tuples(st.booleans(), vectors), min_size=1, max_size=8))
def test_float_bounds_enclose_the_exact_value(steps: list[tuple[bool, np.ndarray]]) -> None:
    """lower <= value <= upper per run, against the exact Fraction, for sums and differences
    (negative values included), subnormal parts and values beyond every double."""
    exact, oracle = ExactVector.zeros(RUNS), [0] * RUNS
    for add, values in steps:
        term = ExactVector.from_floats(values)
        exact = exact + term if add else exact - term
        oracle = [a + b if add else a - b for a, b in zip(oracle, _oracle(values), strict=True)]
        lower, upper = exact.float_bounds()
        for low, high, units in zip(lower.tolist(), upper.tolist(), oracle, strict=True):
            value = rounding.units_to_fraction(units)
            assert (low == -math.inf or Fraction(low) <= value) and (high == math.inf or value <= Fraction(high))
            if abs(value) < Fraction(2) ** 1000:  # tight: a few ulps, not just any bound
                assert high - low <= 2.0**-38 * abs(float(value)) + 2.0**-1055


def test_float_bounds_of_an_exact_double_are_that_double() -> None:
    lower, upper = ExactVector.from_floats(np.full(2, 0.1)).float_bounds()
    assert lower.tolist() == upper.tolist() == [0.1, 0.1]


@given(st.floats(min_value=0.0, allow_nan=False))
def test_step_up_is_nextafter_for_finite_non_negative_doubles(value: float) -> None:
    got = float(_step_up(np.array([value]))[0])
    assert math.isnan(got) if value == math.inf else got == math.nextafter(value, math.inf)


@given(st.lists(st.floats(min_value=0.0) | st.sampled_from([-0.0, 5e-324, math.inf, math.nan]), min_size=1, max_size=8))
def test_step_up_in_place_on_a_scratch_array_gives_the_same_bits(values: list[float]) -> None:
    fresh = np.array(values)
    got = _step_up(fresh, scratch=True)
    assert got is fresh and got.tobytes() == _step_up(np.array(values)).tobytes()


def test_step_up_reads_negative_zero_as_zero() -> None:
    assert _step_up(np.array([-0.0])).tolist() == [5e-324]
    assert np.isnan(_step_up(np.inf))  # +inf fails every <= check


@st.composite
def grouped_values(draw: st.DrawFn) -> tuple[list[int], list[np.ndarray], int]:
    runs = draw(st.integers(1, 8))
    labels = draw(st.lists(st.integers(0, 2), min_size=runs, max_size=runs))
    used = sorted(set(labels))
    groups = [np.flatnonzero(np.array(labels) == g) for g in used]
    units = st.one_of(
        st.integers(0, 2**1200), st.sampled_from([0, 1, 2**60 - 1, 2**60, 2**1127]), st.integers(-(2**200), 0)
    )
    return [draw(units) for _ in used], groups, runs


@given(grouped_values())
def test_from_groups_puts_each_value_in_its_groups_runs(case: tuple[list[int], list[np.ndarray], int]) -> None:
    values, groups, runs = case
    vector = ExactVector.from_groups(values, list(groups), runs)
    expected = [0] * runs
    for value, group in zip(values, groups, strict=True):
        for run in group:
            expected[run] = value
    assert vector.tolist() == expected
    assert (vector + ExactVector.zeros(runs)).tolist() == expected  # normalised limbs: sums stay exact
    for value, group in zip(values, groups, strict=True):
        assert vector.shared(group) == value
    assert vector.shared(np.arange(runs)) == (values[0] if len(set(values)) == 1 else None)
    assert ExactVector.from_groups([values[0]], [None], runs).tolist() == [values[0]] * runs
