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
        mantissa, exponent = np.frexp(values)
        ints = (mantissa * 2.0**53).astype(np.int64)
        position = exponent.astype(np.int64) + (_SHIFT - 53)  # where each mantissa's lowest bit sits
        position[ints == 0] = position[ints != 0].min()  # some run is non-zero: the values differ
        base = int(position.min()) // _BITS
        limb = position // _BITS - base
        bit = position % _BITS
        limbs = np.zeros((int(limb.max()) + 2, runs), dtype=np.int64)
        index = np.arange(runs)
        limbs[limb, index] = (ints & ((np.int64(1) << (_BITS - bit)) - 1)) << bit
        limbs[limb + 1, index] = ints >> (_BITS - bit)
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
            limbs[part_base - base:part_base - base + len(digits), slice(None) if group is None else group] = digits
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
        top = limbs[-1]
        return np.asarray((top > 0) | ((top == 0) & limbs[:-1].any(axis=0)), dtype=np.bool_)

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
        out = np.zeros((max(a_base + len(a_limbs), b_base + len(b_limbs)) - base + 1, runs), dtype=np.int64)
        out[a_base - base:a_base - base + len(a_limbs)] += a_limbs
        if sign == 1:
            out[b_base - base:b_base - base + len(b_limbs)] += b_limbs
        else:
            out[b_base - base:b_base - base + len(b_limbs)] -= b_limbs
        return _trimmed(_normalised(out), base, runs)

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
    """Carry until every limb but the top one lies in [0, 2**60) (in place; |limbs| < 2**62 on entry).

    One pass moves every limb's carry up at once; another is needed only where a carry pushed a
    limb out of range again (rare), so a sum costs a few numpy calls whatever the number of limbs.
    """
    if len(limbs) < 2:
        return limbs
    lower = limbs[:-1]
    while True:
        carry = lower >> _BITS
        lower &= _MASK
        limbs[1:] += carry
        if not ((lower < 0) | (lower > _MASK)).any():
            return limbs


def _trimmed(limbs: IntArray, base: int, runs: int) -> ExactVector:
    """Drop all-zero limbs at both ends (a vector of zero limbs is the shared value 0)."""
    used: NDArray[np.bool_] = np.asarray(limbs.any(axis=1))
    if not used.any():
        return ExactVector(runs, value=0)
    first = int(used.argmax())
    last = len(used) - int(used[::-1].argmax())
    return ExactVector(runs, limbs=limbs[first:last], base=base + first)
