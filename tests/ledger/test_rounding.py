"""Directed-rounding helpers against exact rational oracles."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from budgetcheck import rounding

budgets = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-300, max_value=1e6)
any_finite = st.floats(allow_nan=False, allow_infinity=False)


@given(any_finite)
def test_units_are_exact(x: float) -> None:
    """to_units(x) * 2**-1127 is exactly x, including subnormals and signs."""
    assert rounding.units_to_fraction(rounding.to_units(x)) == Fraction(x)
    assert int(rounding.to_units_array(np.array([x]))[0]) == rounding.to_units(x)


@given(st.integers(min_value=0, max_value=2**1200))
def test_units_to_float_down_is_the_floor(units: int) -> None:
    """The float is <= the exact value and its successor is above it."""
    f = rounding.units_to_float_down(units)
    exact = rounding.units_to_fraction(units)
    assert Fraction(f) <= exact < Fraction(math.nextafter(f, math.inf))


@given(positive, st.integers(1, 10_000))
def test_share_is_the_largest_safe_share(total: float, parts: int) -> None:
    x = rounding.share(total, parts)
    assert Fraction(x) * parts <= Fraction(total)
    assert Fraction(math.nextafter(x, math.inf)) * parts > Fraction(total)


@given(budgets, st.floats(min_value=0.0, max_value=1e4))
def test_mul_down_is_the_floor_of_the_product(a: float, b: float) -> None:
    got = float(rounding.mul_down(a, b))
    exact = Fraction(a) * Fraction(b)
    assert Fraction(got) <= exact
    if exact > 0 and got > 2.0**-900:
        assert Fraction(math.nextafter(got, math.inf)) > exact


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    factor = 134217729.0 * a  # 2**27 + 1 (Veltkamp)
    high = factor - (factor - a)
    return high, a - high


def _two_product_error(a: np.ndarray, b: np.ndarray, product: np.ndarray) -> np.ndarray:
    """The exact a*b - fl(a*b) (Dekker) as whole-array numpy operations: the compiled loops' oracle.
    A factor above 2**995 or a product above 2**1000 (where Veltkamp's split or x_high·y_high would
    overflow) has the larger factor and the product scaled by 2**-128 first, exactly."""
    big = (np.abs(a) > 2.0**995) | (np.abs(b) > 2.0**995) | (np.abs(product) > 2.0**1000)
    a_first = np.abs(a) >= np.abs(b)
    a, b = np.where(big & a_first, a * 2.0**-128, a), np.where(big & ~a_first, b * 2.0**-128, b)
    product = np.where(big, product * 2.0**-128, product)
    a_high, a_low = _split(a)
    b_high, b_low = _split(b)
    return ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low


def _down_where(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, rounding.next_down(values), values)


def _floor_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """mul_down's whole-array form: the product, one step down where it went up or could underflow;
    a finite product that overflowed is the largest double (its floor)."""
    product = x * y
    error = _two_product_error(x, y, product)
    floor = _down_where(product, (error < 0.0) | _near_underflow(product))
    overflowed = (product == np.inf) & np.isfinite(x) & np.isfinite(y)
    return np.where(overflowed, np.finfo(np.float64).max, floor)


def _near_underflow(values: np.ndarray) -> np.ndarray:
    return (values != 0.0) & (np.abs(values) < 2.0**-900)


signed = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True) | st.sampled_from(
    [0.0, -0.0, 5e-324, 0.1, 0.3, 1 / 3]
)


def _same_doubles(got: np.ndarray, expected: np.ndarray) -> bool:
    """Bit for bit, but for the sign of a NaN (numpy's negation and the compiled loop's may differ)."""

    def canonical(values: np.ndarray) -> bytes:
        return np.where(np.isnan(values), np.nan, values).tobytes()

    return got.shape == expected.shape and canonical(got) == canonical(expected)


wide = st.floats(min_value=0.0, max_value=1e150, allow_subnormal=True) | st.sampled_from(
    [0.0, 5e-324, 2.0**-1022, 2.0**-900, 0.1, 1 / 3]
)


@given(
    st.lists(st.tuples(signed, signed), min_size=1, max_size=8),
    st.sampled_from(["arrays", "scalar first", "scalar second"]),
)
def test_mul_down_is_the_whole_array_form_on_every_double(pairs: list[tuple[float, float]], layout: str) -> None:
    """Signs, zeros of both signs, subnormals, infinities and NaN too, with either operand a single value
    (each broadcast has its own loop): the compiled steps by bit pattern match nextafter's rules."""
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])
    if layout == "scalar first":
        a = a[:1]
    elif layout == "scalar second":
        b = b[:1]
    x, y = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        expected = _floor_product(x, y)
    assert _same_doubles(rounding.mul_down(a, b), expected)


@given(st.lists(st.tuples(wide, wide), min_size=1, max_size=8), st.booleans())
def test_mul_down_of_arrays_is_the_whole_array_form_bit_for_bit_and_a_floor(
    pairs: list[tuple[float, float]], broadcast: bool
) -> None:
    """The compiled element loop against Dekker's TwoProduct as whole-array numpy operations (its
    earlier form), broadcasting a column against a row, and each result against the exact product."""
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])[:, None] if broadcast else np.array([y for _, y in pairs])
    got = rounding.mul_down(a, b)
    x, y = np.broadcast_arrays(a, b)
    expected = _floor_product(x, y)
    assert _same_doubles(got, expected)
    for value, left, right in zip(
        got.reshape(-1).tolist(), x.reshape(-1).tolist(), y.reshape(-1).tolist(), strict=True
    ):
        exact = Fraction(left) * Fraction(right)
        assert Fraction(value) <= exact
        if exact > 0 and value > 2.0**-900:
            assert Fraction(math.nextafter(value, math.inf)) > exact


@given(st.lists(st.tuples(signed, signed), min_size=1, max_size=8), st.booleans())
def test_sub_down_of_arrays_is_the_whole_array_form_bit_for_bit(
    pairs: list[tuple[float, float]], broadcast: bool
) -> None:
    """The compiled element loop against TwoSum as whole-array numpy operations (its earlier form),
    over every double (zeros of both signs, subnormals, infinities, NaN) and a broadcast."""
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])[:, None] if broadcast else np.array([y for _, y in pairs])
    got = rounding.sub_down(a, b)
    x, y = np.broadcast_arrays(a, -b)
    with np.errstate(all="ignore"):  # infinities and NaN, and nextafter from the largest double to -inf
        total = x + y
        virtual = total - x
        error = (x - (total - virtual)) + (y - virtual)
        expected = np.maximum(_down_where(total, error < 0.0), 0.0)
    assert _same_doubles(got, expected)


@given(st.lists(st.tuples(signed, signed), min_size=1, max_size=8), st.booleans())
def test_div_down_of_arrays_is_the_whole_array_form_bit_for_bit(
    pairs: list[tuple[float, float]], broadcast: bool
) -> None:
    """The compiled element loop against the quotient's TwoProduct check as whole-array numpy
    operations (its earlier form), over every double, zero divisors included, and a broadcast."""
    a = np.array([x for x, _ in pairs])
    b = np.array([y for _, y in pairs])[:, None] if broadcast else np.array([y for _, y in pairs])
    got = rounding.div_down(a, b)
    x, y = np.broadcast_arrays(a, b)
    with np.errstate(all="ignore"):
        quotient = x / y
        product = quotient * y
        error = _two_product_error(quotient, y, product)
        too_big = (product > x) | ((product == x) & (error > 0.0))
        # never a step down from a quotient of 0 (0 is the largest double below a quotient in [0, 2**-1075])
        down = (too_big | _near_underflow(quotient) | _near_underflow(x)) & (quotient != 0.0)
        expected = _down_where(quotient, down)
    assert _same_doubles(got, expected)


SHAPES = [(), (1,), (1, 1), (3,), (3, 1), (1, 3), (2, 3), (0,)]


@pytest.mark.parametrize("function", [rounding.mul_down, rounding.div_down, rounding.sub_down])
def test_compiled_rounding_broadcasts_as_numpy_does(function: Any) -> None:
    """Every pair of shapes numpy can broadcast (single values of any rank among them) gives
    numpy's broadcast shape, each element the function of the broadcast pair; others are refused."""
    rng = np.random.default_rng(0)
    for first in SHAPES:
        for second in SHAPES:
            a, b = rng.random(first) * 10, rng.random(second)
            try:
                shape = np.broadcast_shapes(first, second)
            except ValueError:
                with pytest.raises(ValueError):
                    function(a, b)
                continue
            got = np.asarray(function(a, b))
            x, y = np.broadcast_arrays(a, b)
            expected = [
                float(function(p, q)) for p, q in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist(), strict=True)
            ]
            assert got.shape == shape and got.reshape(-1).tolist() == expected


@given(budgets, st.floats(min_value=1e-6, max_value=1e6))
def test_div_down_is_the_floor_of_the_quotient(a: float, b: float) -> None:
    got = float(rounding.div_down(a, b))
    exact = Fraction(a) / Fraction(b)
    assert Fraction(got) <= exact
    if got > 2.0**-900 and a > 2.0**-900:  # a dividend below 2**-900 always takes one step down (conservative)
        assert Fraction(math.nextafter(got, math.inf)) > exact


@given(budgets, budgets)
def test_sub_down_is_the_floor_of_the_clamped_difference(a: float, b: float) -> None:
    got = float(rounding.sub_down(a, b))
    exact = max(Fraction(a) - Fraction(b), Fraction(0))
    assert Fraction(got) <= exact
    assert Fraction(math.nextafter(got, math.inf)) > exact


@given(st.lists(budgets, min_size=1, max_size=300))
def test_sum_up_bounds_the_exact_sum(values: list[float]) -> None:
    assert Fraction(float(rounding.sum_up(np.array(values)))) >= sum(map(Fraction, values), Fraction(0))


@given(st.floats(min_value=1e-3, max_value=10.0), positive)
def test_laplace_scale_never_undershoots(sensitivity: float, epsilon: float) -> None:
    """sensitivity / scale <= ε exactly, so the realised loss is within the charge."""
    scale = float(rounding.scale_up(sensitivity, np.array([epsilon]))[0])
    assert Fraction(sensitivity) / Fraction(scale) <= Fraction(epsilon)


@given(st.lists(st.integers(min_value=0, max_value=2**1140), min_size=1, max_size=20))
def test_units_to_float_down_array_matches_the_scalar_floor(units: list[int]) -> None:
    arr = np.array(units, dtype=object)
    assert rounding.units_to_float_down_array(arr).tolist() == [rounding.units_to_float_down(u) for u in units]


@given(st.lists(st.one_of(st.floats(0.0, 1e6), st.lists(st.floats(0.0, 1e6), min_size=3, max_size=3)), max_size=40))
def test_sum_up_terms_bounds_the_exact_sum_of_scalars_and_run_arrays(terms: list[float | list[float]]) -> None:
    arrays = [np.asarray(term, dtype=np.float64) for term in terms]
    bound = np.broadcast_to(rounding.sum_up_terms(arrays), (3,))
    for run in range(3):
        exact = sum((Fraction(float(np.broadcast_to(a, (3,))[run])) for a in arrays), Fraction(0))
        assert Fraction(float(bound[run])) >= exact
        assert float(bound[run]) <= float(exact) * (1 + 1e-12) + 1e-300


@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), min_size=0, max_size=12),
    st.sampled_from([(rounding.next_up, np.inf), (rounding.next_down, -np.inf)]),
)
def test_next_up_and_down_are_nextafter_bit_for_bit(values: list[float], pair: tuple[object, float]) -> None:
    fn, direction = pair
    x = np.array(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        got = np.asarray(fn(x))  # type: ignore[operator]
        expected = np.nextafter(x, direction)
    assert got.shape == expected.shape
    assert np.array_equal(got.view(np.int64), expected.view(np.int64), equal_nan=False) or np.array_equal(
        got, expected, equal_nan=True
    )


@given(
    st.lists(
        st.floats(min_value=0.0, max_value=1e300, allow_subnormal=True)
        | st.sampled_from([0.0, 5e-324, 2.0**-1021, 2.0**-1022]),
        min_size=0,
        max_size=8,
    )
)
def test_half_down_is_the_exact_half_or_div_down_where_the_half_is_subnormal(values: list[float]) -> None:
    x = np.array(values, dtype=np.float64)
    half = rounding.half_down(x)
    for value, got in zip(values, half.tolist(), strict=True):
        assert Fraction(got) <= Fraction(value) / 2
        if value >= 2.0**-1021 or value == 0.0:
            assert Fraction(got) == Fraction(value) / 2
    tiny = (x > 0) & (x < 2.0**-1021)
    np.testing.assert_array_equal(half[tiny].view(np.int64), rounding.div_down(x, 2.0)[tiny].view(np.int64))


@given(
    st.floats(min_value=1e-6, max_value=1e6),
    st.lists(st.floats(min_value=0.0, max_value=1e6, allow_subnormal=True), min_size=1, max_size=6),
)
def test_scale_up_is_the_next_double_above_the_quotient(sensitivity: float, budgets: list[float]) -> None:
    eps = np.array(budgets)
    with np.errstate(divide="ignore", over="ignore"):
        expected = np.nextafter(sensitivity / eps, np.inf)
    np.testing.assert_array_equal(rounding.scale_up(sensitivity, eps).view(np.int64), expected.view(np.int64))
    grid = np.stack([eps, eps[::-1]]).T  # (n, 2), not contiguous
    with np.errstate(divide="ignore", over="ignore"):
        expected_grid = np.nextafter(sensitivity / grid, np.inf)
    got = rounding.scale_up(sensitivity, grid)
    assert got.shape == grid.shape
    np.testing.assert_array_equal(got.view(np.int64), expected_grid.view(np.int64))


def _scale_up_reference(
    sensitivity: float, epsilon: np.ndarray[Any, np.dtype[np.float64]]
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """scale_up's whole-array form before its compiled pass (the oracle): the quotient, stepped up."""
    with np.errstate(divide="ignore", over="ignore"):
        scale = np.asarray(np.divide(sensitivity, epsilon, dtype=np.float64))
    if not (sensitivity > 0.0 and math.isfinite(sensitivity)) or (scale < 0.0).any():
        return rounding.next_up(scale)
    return np.asarray(np.where(scale == np.inf, np.inf, rounding.step_up(scale)), dtype=np.float64)


@given(
    st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1.0, 2.0**-1074, 1e308]),
    st.lists(
        st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)
        | st.sampled_from([0.0, -0.0, 5e-324, 1e-310]),
        min_size=0,
        max_size=10,
    ),
    st.sampled_from(["flat", "grid", "scalar"]),
)
@example(1.0, [0.5, -0.0, 0.0], "flat")
@example(1.0, [0.0, 2.0, 1e-310], "grid")
@example(1e308, [1e-308, 0.5], "flat")
@example(2.0**-1074, [1e308, np.nan, 1.0], "flat")
@example(1.0, [-0.0], "scalar")
def test_scale_up_is_its_whole_array_form_bit_for_bit_on_every_double(
    sensitivity: float, values: list[float], layout: str
) -> None:
    """The compiled pass (every ε +0.0 or > 0) and the general path give the oracle's doubles: zeros of
    both signs, subnormals, overflowing quotients, infinities, negative and NaN budgets; any shape."""
    eps = np.array(values, dtype=np.float64)
    if layout == "grid":
        eps = np.stack([eps, eps[::-1]]).T  # (n, 2), not contiguous
    elif layout == "scalar":
        eps = np.array(values[0] if values else 0.5)
    with np.errstate(all="ignore"):
        got = rounding.scale_up(sensitivity, eps)
        expected = _scale_up_reference(sensitivity, eps)
    assert got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


@given(
    st.floats(min_value=0.0, max_value=1e300) | st.sampled_from([5e-324, 2.0**-1000, 1 / 240]),
    st.integers(1, 300),
    st.lists(st.integers(-2, 305), min_size=1, max_size=12),
)
def test_float_ops_mul_down_by_small_integer_counts_is_rounding_mul_down_bit_for_bit(
    value: float, at_most: int, counts: list[int]
) -> None:
    """FLOAT.mul_down(u, k, at_most) looks integer counts up in a table of the at_most + 1 products;
    counts outside [0, at_most] (a caller's bug) take the direct computation; either way the doubles
    are those of rounding.mul_down, element by element."""
    from budgetcheck.ops import FLOAT

    array = np.array(counts, dtype=np.int64)
    got = np.asarray(FLOAT.mul_down(value, array, at_most=at_most))
    expected = np.asarray(rounding.mul_down(value, array.astype(np.float64)))
    assert got.tobytes() == expected.tobytes()
