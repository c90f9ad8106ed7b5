"""Exact per-run sums of doubles, vectorised: multi-limb fixed point in int64 numpy arrays.

Every finite double is an integer multiple of 2**-1074; in units of 2**-1127 (see
:mod:`budgetcheck.rounding`) it is an integer M << p with a 53-bit M and 53 <= p <= 2151. An
:class:`ExactVector` holds one such integer per run, either as one Python integer when every run
holds the same value (a fixed schedule's budgets: its sums then cost what one big-integer
operation costs, whatever the number of runs), or as limbs of 60 bits, value =
Σ_i limbs[i] << 60·(base + i), kept normalised (every limb but the top one in [0, 2**60)). Only
the limbs a vector needs are stored (a budget ε/2**k spans two or three), so a sum or a comparison
costs a handful of numpy calls over (limbs, runs) instead of one Python big-integer operation per
run, and is exact all the same.
"""

from __future__ import annotations

import math
from typing import final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.kernels import compiled
from budgetcheck.rounding import to_units

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
ObjectArray = NDArray[np.object_]

_BITS = 60
_MASK = (1 << _BITS) - 1
_SHIFT = 1074 + 53  # units of 2**-1127, as in budgetcheck.rounding
_ONE = 1 << _SHIFT
_MAX_DOUBLE = float(np.finfo(np.float64).max)


@final
class ExactVector:
    """One exact integer (units of 2**-1127) per run: a shared Python int, or limbs of shape (L, runs)."""

    __slots__ = ("_base", "_limbs", "_runs", "_value")

    def __init__(self, runs: int, *, value: int | None = None, limbs: IntArray | None = None, base: int = 0) -> None:
        self._runs = runs
        self._value = value
        self._limbs = limbs
        self._base = base

    @classmethod
    def zeros(cls, runs: int) -> ExactVector:
        return cls(runs, value=0)

    @classmethod
    def from_int(cls, units: int, runs: int = 1) -> ExactVector:
        """The same Python integer in every run."""
        return cls(runs, value=units)

    @classmethod
    def from_floats(cls, values: NDArray[np.float64]) -> ExactVector:
        """The exact values of finite doubles >= 0, shape (runs,)."""
        values = np.asarray(values, dtype=np.float64)
        runs = int(values.shape[0])
        if values.min() == values.max():
            return cls(runs, value=to_units(float(values[0])))
        limbs, base = _float_limbs(np.ascontiguousarray(values))  # some run is non-zero: the values differ
        return _trimmed(limbs, base, runs)

    @classmethod
    def from_groups(cls, values: list[int], groups: list[IntArray | None], runs: int) -> ExactVector:
        """values[g] in every run of groups[g] (run indices; None: every run, for a single group);
        the groups partition the runs."""
        if len(set(values)) == 1:
            return cls(runs, value=values[0])
        parts = [cls(1, value=value)._as_limbs() for value in values]
        base = min(part_base for _, part_base in parts)
        limbs = np.zeros((max(part_base + len(digits) for digits, part_base in parts) - base + 1, runs), dtype=np.int64)
        for (digits, part_base), group in zip(parts, groups, strict=True):
            limbs[part_base - base : part_base - base + len(digits), slice(None) if group is None else group] = digits
        # each column holds one value's normalised digits; zeros above a value >= 0 keep it normalised
        return _trimmed(limbs if min(values) >= 0 else _normalised(limbs), base, runs)

    @property
    def runs(self) -> int:
        return self._runs

    def shared(self, runs: IntArray | None = None) -> int | None:
        """The value when it is the same in all of ``runs`` (None: in every run), else None."""
        if self._value is not None or runs is None or not runs.size:
            return self._value
        limbs = self._limbs
        assert limbs is not None
        column = limbs[:, runs[:1]]
        return self[int(runs[0])] if bool((limbs[:, runs] == column).all()) else None

    def __add__(self, other: ExactVector) -> ExactVector:
        return self._combine(other, 1)

    def __sub__(self, other: ExactVector) -> ExactVector:
        return self._combine(other, -1)

    def exceeds(self, bound: ExactVector) -> BoolArray:
        """Per run: value > bound, exactly."""
        difference = self - bound
        if difference._value is not None:
            return np.full(difference._runs, difference._value > 0)
        limbs = difference._limbs
        assert limbs is not None
        return _positive_columns(limbs, np.empty(difference._runs, dtype=np.bool_))

    def float_bounds(self) -> tuple[FloatArray, FloatArray]:
        """Doubles (lower, upper) per run with lower <= value <= upper (for a float pre-check).

        A shared value is converted exactly (correctly rounded, then stepped to the side it
        missed). Limbs are summed in floating point: each of the L limbs converts with relative
        error 2**-53 and the sum adds L more, and limbs below 2**-1074 may flush to zero, so the
        result is widened by a relative 2**-40 and an absolute 2**-1060 (only for values >= 0;
        a negative value is converted run by run, exactly)."""
        if self._value is not None:
            try:
                low = high = self._value / _ONE  # correctly rounded by CPython's int true division
            except OverflowError:  # beyond every double
                low, high = (_MAX_DOUBLE, math.inf) if self._value > 0 else (-math.inf, -_MAX_DOUBLE)
                return np.full(self._runs, low), np.full(self._runs, high)
            nearest = to_units(low)
            if nearest > self._value:
                low = math.nextafter(low, -math.inf)
            elif nearest < self._value:
                high = math.nextafter(high, math.inf)
            return np.full(self._runs, low), np.full(self._runs, high)
        limbs = self._limbs
        assert limbs is not None
        if (limbs[-1] < 0).any():
            return _exact_bounds([self[run] for run in range(self._runs)])
        powers = np.arange(self._base, self._base + len(limbs), dtype=np.int64)[:, None] * _BITS - _SHIFT
        with np.errstate(over="ignore"):
            approx = np.ldexp(limbs.astype(np.float64), powers).sum(axis=0)
            upper = np.nextafter(approx * (1.0 + 2.0**-40) + 2.0**-1060, np.inf)
        lower = np.clip(np.nextafter(approx * (1.0 - 2.0**-40) - 2.0**-1060, -np.inf), 0.0, _MAX_DOUBLE)
        return np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)

    def __getitem__(self, run: int) -> int:
        """The exact value of one run (a Python integer in units of 2**-1127)."""
        if self._value is not None:
            return self._value
        assert self._limbs is not None
        column = self._limbs[:, run].tolist()
        return sum((int(limb) << (_BITS * (self._base + i)) for i, limb in enumerate(column)), 0)

    def tolist(self) -> list[int]:
        return [self[run] for run in range(self._runs)]

    def to_object(self) -> ObjectArray:
        """An object array of Python integers (for the big-integer helpers of ``rounding``)."""
        out = np.empty(self._runs, dtype=object)
        out[:] = self.tolist()
        return out

    def __repr__(self) -> str:
        return f"ExactVector({self.tolist()!r})"

    def _combine(self, other: ExactVector, sign: int) -> ExactVector:
        runs = max(self._runs, other._runs)
        if self._value is not None and other._value is not None:
            return ExactVector(runs, value=self._value + sign * other._value)
        if other._value == 0:
            return ExactVector(runs, limbs=self._limbs, base=self._base)
        if self._value == 0 and sign == 1:
            return ExactVector(runs, limbs=other._limbs, base=other._base)
        a_limbs, a_base = self._as_limbs()
        b_limbs, b_base = other._as_limbs()
        base = min(a_base, b_base)
        out = np.empty((max(a_base + len(a_limbs), b_base + len(b_limbs)) - base + 1, runs), dtype=np.int64)
        return _trimmed(out, base, runs, _add_limbs(a_limbs, a_base - base, b_limbs, b_base - base, sign, out))

    def _as_limbs(self) -> tuple[IntArray, int]:
        """Limbs of shape (L, runs) or (L, 1) (a shared value, broadcast by the caller)."""
        if self._limbs is not None:
            return self._limbs, self._base
        assert self._value is not None
        value, digits = self._value, []
        base = ((value & -value).bit_length() - 1) // _BITS if value else 0  # skip the zero limbs below
        value >>= _BITS * base
        while value not in (0, -1):  # two's complement digits: the top one carries the sign
            digits.append(value & _MASK)
            value >>= _BITS
        digits.append(value)
        return np.array(digits, dtype=np.int64).reshape(-1, 1), base


def _exact_bounds(values: list[int]) -> tuple[FloatArray, FloatArray]:
    bounds = [ExactVector.from_int(value).float_bounds() for value in values]
    return np.array([low[0] for low, _ in bounds]), np.array([high[0] for _, high in bounds])


def _normalised(limbs: IntArray) -> IntArray:
    """Carry until every limb but the top one lies in [0, 2**60) (in place; |limbs| < 2**62 on entry)."""
    if len(limbs) > 1:
        _add_limbs(limbs, 0, limbs[:0], 0, 1, limbs)
    return limbs


@compiled
def _add_limbs(a: IntArray, a_start: int, b: IntArray, b_start: int, sign: int, out: IntArray) -> tuple[int, int]:
    """out = a + sign·b, normalised: out[i] gets a[i − a_start] and b[i − b_start] (an operand of one
    column is broadcast over the runs) plus the carry from out[i − 1]; every limb but the top one ends
    in [0, 2**60) (|limbs| < 2**61 on entry; out may be a itself). One pass per limb over the runs,
    with a loop for each way the operands broadcast (one loop indexing by a stride does not
    vectorise). Returns the rows from the first to one past the last limb that is non-zero in some
    run."""
    limbs, runs = out.shape
    carry = np.zeros(runs, dtype=np.int64)
    nothing = np.zeros(1, dtype=np.int64)
    first, last = limbs, 0
    for i in range(limbs):
        row = out[i]
        a_row = a[i - a_start] if 0 <= i - a_start < a.shape[0] else nothing
        b_row = b[i - b_start] if 0 <= i - b_start < b.shape[0] else nothing
        if a_row.size > 1 and b_row.size > 1:
            for r in range(runs):
                carry[r] += a_row[r] + sign * b_row[r]
        elif a_row.size > 1:
            for r in range(runs):
                carry[r] += a_row[r] + sign * b_row[0]
        elif b_row.size > 1:
            for r in range(runs):
                carry[r] += a_row[0] + sign * b_row[r]
        else:
            for r in range(runs):
                carry[r] += a_row[0] + sign * b_row[0]
        used = 0
        if i < limbs - 1:
            for r in range(runs):
                row[r] = carry[r] & _MASK
                carry[r] >>= _BITS
                used |= row[r]
        else:
            for r in range(runs):
                row[r] = carry[r]
                used |= row[r]
        if used:
            first, last = min(first, i), i + 1
    return first, last


@compiled
def _float_limbs(values: FloatArray) -> tuple[IntArray, int]:
    """Limbs (not yet trimmed) and base of the exact values of finite doubles, not all zero, read
    from their bit patterns: each value's 53-bit significand placed at its lowest bit's position
    (units of 2**-1127: 53 + the biased exponent − 1 for a normal double, 53 for a subnormal), across
    two limbs; a negative value contributes its negated significand."""
    bits = values.view(np.int64)
    lowest, highest = 1 << 62, -1
    for r in range(bits.size):
        if bits[r] << 1 != 0:  # not ±0.0
            position = max((bits[r] >> 52) & 0x7FF, 1) + 52
            lowest, highest = min(lowest, position), max(highest, position)
    base = lowest // _BITS
    limbs = np.zeros((highest // _BITS - base + 2, bits.size), dtype=np.int64)
    for r in range(bits.size):
        if bits[r] << 1 != 0:
            exponent = (bits[r] >> 52) & 0x7FF
            significand = (bits[r] & 0xFFFFFFFFFFFFF) | (np.int64(exponent > 0) << 52)
            if bits[r] < 0:
                significand = -significand
            position = max(exponent, 1) + 52
            limb, bit = position // _BITS - base, position % _BITS
            limbs[limb, r] = (significand & ((np.int64(1) << (_BITS - bit)) - 1)) << bit
            limbs[limb + 1, r] = significand >> (_BITS - bit)
    return limbs, base


@compiled
def _positive_columns(limbs: IntArray, out: BoolArray) -> BoolArray:
    """Per run: whether the normalised value is > 0 (its top limb > 0, or 0 with a non-zero limb below)."""
    top = len(limbs) - 1
    for r in range(limbs.shape[1]):
        positive = limbs[top, r] > 0
        if limbs[top, r] == 0:
            for i in range(top):
                positive = positive or limbs[i, r] != 0
        out[r] = positive
    return out


def _trimmed(limbs: IntArray, base: int, runs: int, used: tuple[int, int] | None = None) -> ExactVector:
    """Drop all-zero limbs at both ends (a vector of zero limbs is the shared value 0); ``used``:
    the rows from the first to one past the last non-zero limb, when already known."""
    first, last = _used_rows(limbs) if used is None else used
    if first >= last:
        return ExactVector(runs, value=0)
    return ExactVector(runs, limbs=limbs[first:last], base=base + first)


@compiled
def _used_rows(limbs: IntArray) -> tuple[int, int]:
    """The rows from the first to one past the last limb that is non-zero in some run."""
    first, last = len(limbs), 0
    for i in range(len(limbs)):
        used = 0
        for r in range(limbs.shape[1]):
            used |= limbs[i, r]
        if used:
            first, last = min(first, i), i + 1
    return first, last
