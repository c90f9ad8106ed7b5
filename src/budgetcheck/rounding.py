"""Exact budget arithmetic and directed rounding helpers for mechanism authors.

Every finite double is an integer multiple of 2**-1074, so the ledger keeps budgets as Python
integers in units of 2**-1127 (a margin of 53 bits so that every conversion is a plain shift) and
sums them exactly. The helpers below let a mechanism compute its allocations in floats while
rounding every result *down* (or a sum *up*), so that what it asks for never exceeds the exact value
of its allocation rule and is never refused for rounding.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.kernels import compiled

FloatArray = NDArray[np.float64]
ObjectArray = NDArray[np.object_]

_SHIFT = 1074 + 53
_ONE = 1 << _SHIFT
_UNIT_ROUNDOFF = 2.0**-53
_LARGEST = float(np.finfo(np.float64).max)
_SPLIT_LIMIT = 2.0**995  # above it Veltkamp's split (a factor times 2**27 + 1) can overflow
_PRODUCT_LIMIT = 2.0**1000  # above it x_high·y_high can overflow


def to_units(value: float) -> int:
    """The exact value of a finite double in units of 2**-1127."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator << (_SHIFT - (denominator.bit_length() - 1))


def to_units_array(values: FloatArray) -> ObjectArray:
    """Elementwise :func:`to_units` (an object array of Python ints)."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
    ints = (mantissa * 2.0**53).astype(np.int64).astype(object)
    shifts = (exponent.astype(np.int64) + 1074).astype(object)
    result: ObjectArray = ints << shifts
    return result


def units_to_fraction(units: int) -> Fraction:
    """The exact rational value of a unit count."""
    return Fraction(units, _ONE)


def units_to_float_down(units: int) -> float:
    """The largest double <= units * 2**-1127 (assumes the value is within the double range)."""
    value = units / _ONE  # correctly rounded by CPython's int true division
    if to_units(value) > units:
        value = math.nextafter(value, -math.inf)
    return value


def units_to_float_down_array(units: ObjectArray) -> FloatArray:
    """Elementwise :func:`units_to_float_down` (assumes values >= 0 within the double range)."""
    nearest = np.asarray(units / _ONE, dtype=np.float64)  # each element: correctly rounded int division
    too_big = np.asarray(to_units_array(nearest) > units, dtype=bool)
    return np.asarray(np.where(too_big, np.nextafter(nearest, -np.inf), nearest), dtype=np.float64)


def units_to_float_near(units: int) -> float:
    """The nearest double to an exact unit count (for messages and reports); ±inf beyond every
    double (a refused sum near the largest ε, e.g. ε = 1.7976931348623157e308 and one spend of it more)."""
    try:
        return units / _ONE
    except OverflowError:
        return math.inf if units > 0 else -math.inf


@functools.lru_cache(maxsize=4096)
def share(total: float, parts: int) -> float:
    """The largest double x with parts * x <= total exactly (e.g. Uniform's ε/w)."""
    total_exact = Fraction(total)
    candidate = total / parts
    while Fraction(candidate) * parts > total_exact:
        candidate = math.nextafter(candidate, -math.inf)
    return candidate


def mul_up_exact(x: float, y: float) -> float:
    """x·y rounded up: the least double >= the exact product of two finite doubles >= 0 (inf past the
    largest double), for a sensitivity that is a product (k·Δ): rounded to nearest it may fall below."""
    product = x * y
    if product < math.inf and Fraction(product) < Fraction(x) * Fraction(y):
        return math.nextafter(product, math.inf)
    return product


def div_up_exact(numerator: float, denominator: int) -> float:
    """numerator/denominator rounded up: the least double >= the exact quotient (numerator >= 0 finite,
    denominator >= 1), e.g. a mean's sensitivity k/d, which fl(k/d) may put below k/d."""
    quotient = numerator / denominator
    if Fraction(quotient) * denominator < Fraction(numerator):
        return math.nextafter(quotient, math.inf)
    return quotient


def covering_quotient(numerator: float, count: int, budgets: FloatArray | None = None) -> float:
    """numerator/count (a mean's sensitivity k/d) as the double a Laplace scale is computed from, so that
    scale·ε >= numerator/count exactly: fl(numerator/count) where it is >= the quotient, or where the
    :func:`scale_up` scales from it at ``budgets`` (> 0) already cover the quotient, so that releases drawn
    at them stay what they were; else the least double above the quotient. ``budgets`` None: the scales
    come by another rule, and the quotient is rounded up."""
    near = numerator / count
    exact = Fraction(numerator) / count
    if Fraction(near) >= exact:
        return near
    if budgets is not None and _covers(scale_up(near, budgets), budgets, exact):
        return near
    return math.nextafter(near, math.inf)


def _covers(scales: FloatArray, budgets: FloatArray, sensitivity: Fraction) -> bool:
    """Whether scale·ε >= ``sensitivity`` exactly for every budget ε > 0 (each distinct pair once)."""
    pairs = set(zip(np.broadcast_to(scales, budgets.shape).reshape(-1).tolist(), budgets.reshape(-1).tolist()))
    return all(
        budget <= 0.0 or scale == math.inf or Fraction(scale) * Fraction(budget) >= sensitivity
        for scale, budget in pairs
    )


def mul_down(value: ArrayLike, factor: ArrayLike) -> FloatArray:
    """value * factor rounded down: the largest double <= the exact product (finite, >= 0 inputs).

    The product's rounding error is found exactly with Dekker's TwoProduct; the result moves one
    ulp down only where round-to-nearest went up.
    """
    return _elementwise(_mul_down_each, value, factor, mul_down_float)


def _elementwise(
    kernel: Callable[..., None],
    first: ArrayLike,
    second: ArrayLike,
    scalar: Callable[[float, float], float | None] | None = None,
) -> FloatArray:
    """``kernel(a, b, out, out_bits)`` over the two operands broadcast as numpy does: each passed as
    a contiguous 1-d float64 array of the result's size or of size 1 (a single value is not copied
    out to the full size), ``out`` the result flattened and ``out_bits`` the same memory as int64.
    Two single values go through ``scalar`` (the same doubles in plain Python, or None: the kernel)."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if scalar is not None and a.size == 1 and b.size == 1:
        value = scalar(float(a.reshape(-1)[0]), float(b.reshape(-1)[0]))
        if value is not None:
            return np.full(a.shape if a.ndim >= b.ndim else b.shape, value)
    if a.shape != b.shape and a.size != 1 and b.size != 1:
        a, b = np.broadcast_arrays(a, b)
    out = np.empty(a.shape if a.shape == b.shape else np.broadcast_shapes(a.shape, b.shape))
    flat = out.reshape(-1)
    kernel(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), flat, flat.view(np.int64))
    return out


@compiled
def _mul_down_each(a: FloatArray, b: FloatArray, out: FloatArray, out_bits: NDArray[np.int64]) -> None:
    """:func:`mul_down` element by element (an operand of size 1 is used throughout), in one pass; a
    loop for each way the operands broadcast, so the element loop itself has no branch."""
    n = out.size
    if a.size == n and b.size == n:
        for i in range(n):
            _floor_product(a[i], b[i], out, out_bits, i)
    elif a.size == n:
        for i in range(n):
            _floor_product(a[i], b[0], out, out_bits, i)
    else:  # a single value times b of the result's size
        for i in range(n):
            _floor_product(a[0], b[i], out, out_bits, i)


@compiled
def _floor_product(x: float, y: float, out: FloatArray, out_bits: NDArray[np.int64], i: int) -> None:
    """out[i] = x·y, one step down where round-to-nearest went up (:func:`_product_error`) or where the
    error term could underflow (still a floor), by the bit pattern: a product that steps down is
    finite and non-zero, or −0.0 (an exact product < 0 that underflowed), whose pattern steps too."""
    product = x * y
    if product == np.inf and abs(x) < np.inf and abs(y) < np.inf:  # overflowed: the floor is the largest double
        out[i] = _LARGEST
        return
    out[i] = product
    down = (_product_error(x, y, product) < 0.0) | _near_underflow(product)
    bits = out_bits[i]
    out_bits[i] = bits - down * ((bits > 0) * 2 - 1)


@compiled
def _product_error(x: float, y: float, product: float) -> float:
    """x·y − product exactly, for product = fl(x·y) (Dekker's TwoProduct with Veltkamp's splitting
    by 2**27 + 1), valid without overflow or underflow; no fastmath, so nothing is fused or reordered.
    Veltkamp's split overflows for a factor above about 2**996 (and x_high·y_high may for a product
    near the largest double): there the larger factor and the product are scaled by 2**-128 first,
    exactly (the product of such a factor is above 2**-80), which scales the error exactly."""
    if abs(x) > _SPLIT_LIMIT or abs(y) > _SPLIT_LIMIT or abs(product) > _PRODUCT_LIMIT:
        if abs(x) >= abs(y):
            x = x * 2.0**-128
        else:
            y = y * 2.0**-128
        product = product * 2.0**-128
    factor = 134217729.0 * x
    x_high = factor - (factor - x)
    x_low = x - x_high
    factor = 134217729.0 * y
    y_high = factor - (factor - y)
    y_low = y - y_high
    return ((x_high * y_high - product) + x_high * y_low + x_low * y_high) + x_low * y_low


@compiled
def _near_underflow(value: float) -> bool:
    """Where Dekker's error term could underflow: there the result always steps down."""
    return (value != 0.0) & (abs(value) < 2.0**-900)


@compiled
def _down_if(out: FloatArray, out_bits: NDArray[np.int64], i: int, down: bool) -> None:
    """out[i] ← nextafter(out[i], −inf) where ``down`` holds: a finite non-zero double by its bit
    pattern (``out_bits`` is ``out`` seen as int64), with no branch on ``down`` (rounding
    directions are random); zeros, infinities and NaN by the library's rule."""
    value = out[i]
    ordinary = (value != 0.0) & (abs(value) < np.inf)
    bits = out_bits[i]
    out_bits[i] = bits - (down & ordinary) * (1 if bits > 0 else -1)
    if down and not ordinary:
        out[i] = np.nextafter(value, -np.inf)


def div_down(value: ArrayLike, divisor: ArrayLike) -> FloatArray:
    """value / divisor rounded down (value >= 0, divisor > 0, both finite)."""
    return _elementwise(_div_down_each, value, divisor, div_down_float)


@compiled
def _div_down_each(a: FloatArray, b: FloatArray, out: FloatArray, out_bits: NDArray[np.int64]) -> None:
    """:func:`div_down` element by element (an operand of size 1 is used throughout), in one pass:
    quotient·divisor = product + error exactly (:func:`_product_error`), so the quotient went up
    iff product + error > the dividend; then one step down there (or near underflow)."""
    for i in range(out.size):
        x, y = a[i if a.size > 1 else 0], b[i if b.size > 1 else 0]
        quotient = x / y
        product = quotient * y
        error = _product_error(quotient, y, product)
        too_big = (product > x) | ((product == x) & (error > 0.0))
        out[i] = quotient
        # a dividend below 2**-900 makes the product's error terms underflow: always one step down there,
        # except from a quotient of 0: the exact quotient of x >= 0 by y > 0 is then in [0, 2**-1075], and 0 is
        # the largest double below it (one step down would be a negative budget)
        down = too_big | _near_underflow(quotient) | _near_underflow(x)
        _down_if(out, out_bits, i, down & (quotient != 0.0))


def half_down(value: ArrayLike) -> FloatArray:
    """value / 2 rounded down (:func:`div_down` by 2): halving is exact unless the half is subnormal,
    so only then is the general division needed."""
    a = np.asarray(value, dtype=np.float64)
    half = np.asarray(a * 0.5, dtype=np.float64)
    tiny = (np.abs(a) < 2.0**-1021) & (a != 0.0)
    return np.asarray(np.where(tiny, div_down(a, 2.0), half), dtype=np.float64) if tiny.any() else half


def sub_down(value: ArrayLike, subtrahend: ArrayLike) -> FloatArray:
    """max(value - subtrahend, 0) rounded down (Knuth's TwoSum finds the exact error)."""
    return _elementwise(_sub_down_each, value, subtrahend, sub_down_float)


@compiled
def _sub_down_each(a: FloatArray, subtrahend: FloatArray, out: FloatArray, out_bits: NDArray[np.int64]) -> None:
    """:func:`sub_down` element by element (an operand of size 1 is used throughout), in one pass:
    TwoSum in its order, one step down where the sum went up, then numpy's maximum with 0 (NaN
    stays NaN; a zero of either sign gives +0.0)."""
    for i in range(out.size):
        x, y = a[i if a.size > 1 else 0], -subtrahend[i if subtrahend.size > 1 else 0]
        total = x + y
        virtual = total - x
        error = (x - (total - virtual)) + (y - virtual)
        out[i] = total
        _down_if(out, out_bits, i, error < 0.0)
        value = out[i]
        out[i] = value if (value > 0.0) | (value != value) else 0.0


# -- the same helpers on one plain Python float: what a one-run mechanism computes at every timestamp.
# Each gives the double its kernel gives (the same IEEE operations in the same order: CPython's float
# arithmetic is IEEE binary64 with nothing fused), or None where an operand or the result is not a
# finite non-zero double: there the caller takes the array path, whose rules for zeros, infinities and
# NaN are the library's. tests/ledger/test_rounding_scalar.py checks them against the kernels.


_two_product_error: Callable[[float, float, float], float] = inspect.unwrap(_product_error)
"""The kernel :func:`_product_error` as the plain Python function it compiles, for Python floats:
Dekker's TwoProduct is written once, the kernel stays compiled and a scalar call costs what it did."""


def _ordinary(value: float) -> bool:
    """A finite non-zero double (whose bit-pattern step is ``math.nextafter``)."""
    return value != 0.0 and -math.inf < value < math.inf


def mul_down_float(x: float, y: float) -> float | None:
    """:func:`mul_down` of two doubles (None: not a finite non-zero case, use the array path)."""
    product = x * y
    if not _ordinary(product) or not _ordinary(x) or not _ordinary(y):
        return None
    if _two_product_error(x, y, product) < 0.0 or abs(product) < 2.0**-900:
        return math.nextafter(product, -math.inf)
    return product


def div_down_float(x: float, y: float) -> float | None:
    """:func:`div_down` of two doubles (None: not a finite non-zero case, use the array path)."""
    if not _ordinary(x) or not _ordinary(y):
        return None
    quotient = x / y
    if not _ordinary(quotient):
        return None
    product = quotient * y
    error = _two_product_error(quotient, y, product)
    if product > x or (product == x and error > 0.0) or abs(quotient) < 2.0**-900 or abs(x) < 2.0**-900:
        return math.nextafter(quotient, -math.inf)
    return quotient


def sub_down_float(x: float, subtrahend: float) -> float | None:
    """:func:`sub_down` of two doubles, max(x − subtrahend, 0) rounded down (None: use the array path)."""
    y = -subtrahend
    total = x + y
    if not (-math.inf < x < math.inf and -math.inf < y < math.inf and -math.inf < total < math.inf):
        return None
    virtual = total - x
    error = (x - (total - virtual)) + (y - virtual)
    if error < 0.0:
        total = math.nextafter(total, -math.inf)  # the kernel's step by bit pattern, or nextafter at zero
    return total if total > 0.0 else 0.0


def half_down_float(value: float) -> float | None:
    """:func:`half_down` of a double (None: use the array path)."""
    if not -math.inf < value < math.inf:
        return None
    if value != 0.0 and abs(value) < 2.0**-1021:
        return div_down_float(value, 2.0)
    return value * 0.5


def step_up_float(value: float) -> float | None:
    """:func:`step_up` of a double >= 0 (−0.0 read as +0.0; None: use the array path)."""
    if not 0.0 <= value < math.inf:
        return None
    return math.nextafter(value + 0.0, math.inf)


def sum_up_floats(terms: Sequence[float]) -> float | None:
    """:func:`sum_up_terms` of plain floats (None: use the array path)."""
    total = 0.0
    for term in terms:
        total = total + term
    if not 0.0 <= total < math.inf:
        return None
    if total == 0.0:
        return 0.0
    return math.nextafter(total * (1.0 + 2.0 * (len(terms) + 1) * _UNIT_ROUNDOFF), math.inf)


def step_up(values: ArrayLike, *, scratch: bool = False) -> Any:
    """The next double above each value >= 0, from its bit pattern (cheaper than ``nextafter``;
    −0.0 is read as +0.0, 0 gives the smallest subnormal). +inf and NaN give NaN, which fails every
    ``<=`` check. A 0-d input gives a numpy scalar. ``scratch``: ``values`` is a writable float64
    array the caller no longer needs (a fresh sum), stepped in place and returned."""
    if (
        scratch
        and isinstance(values, np.ndarray)
        and values.ndim
        and values.dtype == np.float64
        and values.flags.writeable
    ):
        values += 0.0
        bits = values.view(np.int64)
        bits += 1
        return values
    array = np.asarray(values, dtype=np.float64) + 0.0
    stepped = (array.view(np.int64) + 1).view(np.float64)
    return stepped if stepped.ndim else np.float64(stepped)


def next_up(values: ArrayLike) -> FloatArray:
    """``np.nextafter(values, inf)`` for float64 values, bit for bit, without the libm call per element
    (several times cheaper): the neighbour of a finite non-zero double is its bit pattern ± 1."""
    return _next(values, 1)


def next_down(values: ArrayLike) -> FloatArray:
    """``np.nextafter(values, -inf)`` for float64 values, bit for bit (see :func:`next_up`)."""
    return _next(values, -1)


def _next(values: ArrayLike, direction: int) -> FloatArray:
    x = np.asarray(values, dtype=np.float64)
    # Zeros, infinities and NaN take the library's rules; the common case costs a few whole-array operations.
    if np.count_nonzero(x) != x.size or not np.isfinite(x).all():
        return np.asarray(np.nextafter(x, direction * np.inf), dtype=np.float64)
    bits = np.ascontiguousarray(x).view(np.int64)
    # Positive doubles order like their bit patterns, negative ones in reverse.
    step = np.sign(bits)
    out = bits + step if direction > 0 else bits - step
    return np.asarray(out.view(np.float64).reshape(x.shape), dtype=np.float64)


def sum_up(values: ArrayLike, axis: int = -1) -> FloatArray:
    """A certified upper bound of the exact sum of non-negative values along an axis.

    Any summation order of n terms errs by at most γ_{n-1}·Σ|x| (Higham, Accuracy and Stability,
    Lemma 8.4); we inflate by 2nu and one more ulp for the multiplication itself.
    """
    arr = np.asarray(values, dtype=np.float64)
    return _bound_sum(np.sum(arr, axis=axis), arr.shape[axis] if arr.ndim else 1)


def sum_up_terms(terms: Sequence[ArrayLike]) -> FloatArray:
    """:func:`sum_up` of a sequence of non-negative scalars or arrays (broadcast), added one by one.

    The bound holds for any summation order; adding the terms in turn spares the copy into one
    array (a rule's state of w − 1 scalars and per-run arrays costs O(w) additions, mostly of scalars).
    """
    total: Any = 0.0
    for term in terms:
        total = total + term  # Python floats while the terms are scalars: cheap
    return _bound_sum(np.asarray(total, dtype=np.float64), len(terms))


def _bound_sum(total: FloatArray, n: int) -> FloatArray:
    inflated = np.multiply(total, 1.0 + 2.0 * (n + 1) * _UNIT_ROUNDOFF)
    # A float sum of non-negative terms is 0 only when every term is 0: then it is exact.
    return np.asarray(np.where(total == 0.0, 0.0, next_up(inflated)), dtype=np.float64)


def scale_up(sensitivity: float, epsilon: FloatArray) -> FloatArray:
    """Laplace scale sensitivity/ε rounded up, so that the realised privacy loss is <= ε."""
    if isinstance(epsilon, np.ndarray) and epsilon.dtype == np.float64 and 0.0 < sensitivity < math.inf:
        flat = epsilon.reshape(-1)
        scale = np.empty(flat.size)
        if _scales_up(sensitivity, flat, scale, scale.view(np.int64)):
            return scale.reshape(epsilon.shape)
    with np.errstate(divide="ignore", over="ignore"):  # ε = 0, or so small the scale overflows: an infinite scale
        scale = np.asarray(np.divide(sensitivity, epsilon, dtype=np.float64))
    if not (sensitivity > 0.0 and math.isfinite(sensitivity)) or (scale < 0.0).any():
        return next_up(scale)
    return np.asarray(
        np.where(scale == np.inf, np.inf, step_up(scale)), dtype=np.float64
    )  # scale >= 0, inf where ε = 0


def scale_up_float(sensitivity: float, epsilon: float) -> float | None:
    """:func:`scale_up` of one budget, on doubles: the quotient one double up (inf if it overflows), as
    ``_scales_up`` steps it by its bit pattern. None outside 0 < sensitivity < inf, ε > 0: use the array path."""
    if not (0.0 < sensitivity < math.inf and epsilon > 0.0):
        return None
    quotient = sensitivity / epsilon
    return math.nextafter(quotient, math.inf) if quotient < math.inf else quotient


@compiled
def _scales_up(sensitivity: float, epsilon: FloatArray, out: FloatArray, out_bits: NDArray[np.int64]) -> bool:
    """:func:`scale_up` for 0 < sensitivity < inf in one pass, when every ε is +0.0 or > 0: the quotient
    stepped one double up by its bit pattern (inf where ε = 0 or the quotient overflows). False, with
    ``out`` partly written, at the first other ε (NaN, < 0, −0.0), which the general path takes."""
    for i in range(epsilon.size):
        e = epsilon[i]
        if not (e > 0.0 or (e == 0.0 and math.copysign(1.0, e) > 0.0)):
            return False
        quotient = sensitivity / e  # >= +0.0, inf where e = 0 (numpy's error model)
        out[i] = quotient
        out_bits[i] += quotient < math.inf
    return True
