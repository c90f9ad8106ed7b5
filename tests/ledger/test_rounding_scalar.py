"""The directed-rounding helpers on plain Python floats give the kernels' doubles, bit for bit.

A one-run mechanism runs its allocation rule on plain floats (``budgetcheck.ops.FLOAT`` given
scalars); the budgets it asks for must be the very doubles the vectorised path computes, or a
live publisher and a batch run of the same mechanism would spend (and release) differently. Every
helper is compared with its compiled kernel on arrays of three elements (never the scalar path) over
adversarial doubles: subnormals, the edges of the range, ties of round-to-nearest, signed zeros,
infinities and NaN.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from budgetcheck import rounding
from budgetcheck.ops import FLOAT

TINY = 5e-324
EDGES = [
    0.0,
    -0.0,
    TINY,
    -TINY,
    2 * TINY,
    2.2250738585072014e-308,  # the smallest normal
    2.2250738585072009e-308,  # the largest subnormal
    2.0**-1021,
    math.nextafter(2.0**-1021, 0.0),
    2.0**-900,
    math.nextafter(2.0**-900, math.inf),
    1.0,
    math.nextafter(1.0, 0.0),
    math.nextafter(1.0, 2.0),
    0.1,
    1 / 3,
    1.5,
    2.0**53,
    2.0**53 + 2,
    1e308,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
    -1.0,
]
doubles = st.one_of(
    st.sampled_from(EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0.0, max_value=4.0),
    st.floats(min_value=0.0, max_value=1e-300),
    st.builds(lambda m, e: math.ldexp(m, e), st.integers(1, 2**53 - 1), st.integers(-1126, 970)),
)
SLOW_OK = settings(max_examples=400, deadline=None)


def bits(value: float) -> int:
    """The bit pattern (NaNs compared as one pattern: no budget is NaN, and both paths give NaN)."""
    if value != value:
        return -1
    return int(struct.unpack("<q", struct.pack("<d", float(value)))[0])


def kernel(function: object, x: float, y: float) -> float:
    """The compiled kernel's result on arrays of three (the element loop, never the scalar shortcut)."""
    assert callable(function)
    return float(function(np.full(3, x), np.full(3, y))[0])


@SLOW_OK
@given(doubles, doubles)
@example(1.0, 3.0)
@example(TINY, 0.5)
@example(2.0**-1000, 2.0**-100)
@example(1e308, 10.0)
@example(0.1, 0.2)
def test_mul_and_div_down_give_the_kernels_doubles(x: float, y: float) -> None:
    for scalar, array in ((rounding.mul_down_float, rounding.mul_down), (rounding.div_down_float, rounding.div_down)):
        expected = kernel(array, x, y)
        got = scalar(x, y)
        if got is not None:
            assert bits(got) == bits(expected), (scalar.__name__, x, y, got, expected)
        # the public helper on one element (the scalar shortcut, or the kernel where it declines)
        assert bits(float(array(np.array([x]), np.array([y]))[0])) == bits(expected)


@SLOW_OK
@given(doubles, doubles)
@example(1.0, math.nextafter(1.0, 0.0))
@example(0.1, 0.3)
@example(2.0**53, 1.0)  # a tie
@example(TINY, TINY)
@example(0.5, 0.5)
def test_sub_down_gives_the_kernels_double(x: float, y: float) -> None:
    expected = kernel(rounding.sub_down, x, y)
    got = rounding.sub_down_float(x, y)
    if got is not None:
        assert bits(got) == bits(expected), (x, y, got, expected)
    assert bits(float(rounding.sub_down(np.array([x]), np.array([y]))[0])) == bits(expected)
    assert bits(float(FLOAT.sub_down(x, y))) == bits(expected)


@SLOW_OK
@given(doubles)
@example(TINY)
@example(3 * TINY)  # its half is a tie below the smallest subnormal step
@example(2.0**-1021)
def test_half_down_and_step_up_give_the_array_paths_doubles(x: float) -> None:
    expected = float(rounding.half_down(np.full(3, x))[0])
    got = rounding.half_down_float(x)
    if got is not None:
        assert bits(got) == bits(expected), (x, got, expected)
    assert bits(float(FLOAT.half_down(x))) == bits(expected)
    stepped = rounding.step_up_float(x)
    if stepped is not None:
        assert bits(stepped) == bits(float(rounding.step_up(np.full(3, x))[0]))


def test_the_scalar_helpers_decline_what_the_array_path_must_decide() -> None:
    """Zeros, infinities and NaN are the kernels' business: the plain helpers hand them back (None)."""
    assert rounding.mul_down_float(0.0, 1.0) is None
    assert rounding.mul_down_float(1e-200, 1e-200) is None  # the product underflows to 0
    assert rounding.div_down_float(1.0, 0.0) is None
    assert rounding.div_down_float(math.inf, 1.0) is None
    assert rounding.sub_down_float(math.inf, 1.0) is None
    assert rounding.sub_down_float(math.nan, 1.0) is None
    assert rounding.half_down_float(TINY) is None  # half of the smallest subnormal rounds to 0
    assert rounding.step_up_float(-1.0) is None
    assert rounding.step_up_float(math.inf) is None
    assert rounding.sum_up_floats([1.0, -3.0]) is None


@SLOW_OK
@given(st.lists(st.one_of(st.sampled_from(EDGES[:21]), st.floats(0.0, 1e300)), max_size=40))
def test_sum_up_of_plain_floats_is_the_array_bound(terms: list[float]) -> None:
    with np.errstate(over="ignore"):  # the array path's bound of a sum near the top of the range overflows
        expected = float(np.asarray(rounding.sum_up_terms([np.full(2, term) for term in terms])).reshape(-1)[0])
        assert bits(float(FLOAT.sum_up(tuple(terms)))) == bits(expected)
    got = rounding.sum_up_floats(terms)
    if got is not None:
        assert bits(got) == bits(expected), (terms, got, expected)
    if terms and all(0.0 <= t < 1e300 for t in terms):
        assert got is not None and Fraction(got) >= sum(
            map(Fraction, terms)
        )  # and it is a bound, not just the same number


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(
        st.one_of(st.sampled_from([0.0, TINY, 2.0**-1021, 1 / 3, 0.1]), st.floats(0.0, 1.0)), min_size=1, max_size=60
    ),
)
def test_a_sliding_window_of_floats_keeps_the_array_windows_total(length: int, newest: list[float]) -> None:
    """The running bound of a one-run rule's window (BD's last w − 1 budgets) is the array path's, slide by slide."""
    plain = FLOAT.slide(tuple(0.0 for _ in range(length)), 0.0)
    arrays = FLOAT.slide(tuple(np.zeros(1) for _ in range(length)), np.zeros(1))
    for value in newest:
        plain = FLOAT.slide(plain, value)
        arrays = FLOAT.slide(arrays, np.full(1, value))
        assert type(FLOAT.sum_up(plain)) is float
        assert bits(FLOAT.sum_up(plain)) == bits(float(np.asarray(FLOAT.sum_up(arrays)).reshape(-1)[0]))
        assert Fraction(FLOAT.sum_up(plain)) >= sum(map(Fraction, plain))


def test_float_ops_on_plain_numbers_choose_as_numpy_does() -> None:
    assert FLOAT.where(True, 0.25, 0) == 0.25 and FLOAT.where(False, 0.25, 0) == 0
    assert FLOAT.minimum(3, 7) == 3 and FLOAT.minimum(7, 3) == 3
    assert FLOAT.both(True, False) is False and FLOAT.negate(False) is True
    # an array operand keeps numpy's broadcasting: never a Python shortcut
    assert np.asarray(FLOAT.where(True, np.zeros(2), 0)).shape == (2,)
    assert np.asarray(FLOAT.where(np.array([True, False]), 1.0, 0)).tolist() == [1.0, 0.0]
    assert float(FLOAT.minimum(1.5, math.nan)) != float(FLOAT.minimum(1.5, math.nan))  # NaN propagates
