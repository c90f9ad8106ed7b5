"""Budget allocation rules of BD and BA, separate from the data-dependent decisions.

Each rule is a pure function of the mechanism's own past budgets and decisions (never of the
data), written over small operation sets so that the same code runs on numpy floats with
conservative rounding (inside the mechanisms) and on exact rationals (in tests and proofs).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding

N = TypeVar("N")
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


class BudgetOps(Protocol[N]):
    """The arithmetic a rule needs; float implementations must round towards smaller budgets."""

    def sum_up(self, values: Any) -> N: ...

    def sub_down(self, value: N, subtrahend: N) -> N: ...

    def half_down(self, value: N) -> N: ...


class FloatOps(BudgetOps[FloatArray]):
    """numpy, vectorised over runs; sums rounded up, differences and halves rounded down."""

    def sum_up(self, values: FloatArray) -> FloatArray:
        return rounding.sum_up(values, axis=-1)

    def sub_down(self, value: FloatArray, subtrahend: FloatArray) -> FloatArray:
        return rounding.sub_down(value, subtrahend)

    def half_down(self, value: FloatArray) -> FloatArray:
        return rounding.div_down(value, 2.0)


class ExactOps(BudgetOps[Fraction]):
    """Exact rationals, one run at a time (``values`` is a list of Fractions)."""

    def sum_up(self, values: Any) -> Fraction:
        return sum(values, Fraction(0))

    def sub_down(self, value: Fraction, subtrahend: Fraction) -> Fraction:
        return max(value - subtrahend, Fraction(0))

    def half_down(self, value: Fraction) -> Fraction:
        return value / 2


def bd_publication_budget(half_epsilon: N, recent_publications: Any, ops: BudgetOps[N]) -> N:
    """BD's ε_{i,2} = (ε/2 − Σ_{k=i−w+1}^{i−1} ε_{k,2}) / 2 (Kellaris et al. 2014, Fig. 2 lines 5-6).

    ``recent_publications`` holds the publication budgets of the w−1 previous timestamps (0 where
    nothing was published, and for k <= 0).
    """
    return ops.half_down(ops.sub_down(half_epsilon, ops.sum_up(recent_publications)))


def ba_shares(t: int, last_t: IntArray, last_shares: IntArray, w: int) -> tuple[BoolArray, IntArray]:
    """BA's publication shares at t (Kellaris et al. 2014, Fig. 4 lines 5-9), as integers.

    The last publication happened at ``last_t`` with ``last_shares`` shares of ε/(2w). Returns
    (nullified, shares): nullified where t − l <= to_nullify = last_shares − 1; otherwise
    shares = min(to_absorb, w) with to_absorb = t − (l + to_nullify). Before any release the
    last publication is a virtual one at l = 0 holding one share (nothing nullified, one share
    available at t = 1).
    """
    to_nullify = last_shares - 1
    nullified = (t - last_t) <= to_nullify
    to_absorb = t - (last_t + to_nullify)
    shares = np.where(nullified, 0, np.minimum(to_absorb, w))
    return np.asarray(nullified, dtype=np.bool_), np.asarray(shares, dtype=np.int64)
