"""A rule's recent values with a running total (``FloatOps.slide``): O(1) per step instead of O(w).

BD's and RescueDP's rules subtract the sum of the last w − 1 budgets at every timestamp, and
DSAT_w counts its last w − 1 sample flags. Re-adding w − 1 per-run arrays costs O(w) numpy calls a
step; :class:`SlidingValues` is the same tuple (oldest first) that also carries its total, moved
by one subtraction and one addition when the window slides.

Counters are summed as integers, exactly. Budgets (non-negative doubles) keep an upper bound of
their exact sum: every subtraction and addition is stepped one ulp up, which keeps it >= the exact
sum (a double within half an ulp of the exact result is below the next double up), and after as
many slides as the window is long the bound is taken afresh with :func:`rounding.sum_up_terms`,
so the upward drift stays within a few hundred ulps however long the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from budgetcheck import rounding
from budgetcheck.rounding import step_up, step_up_float


class SlidingValues(tuple[Any, ...]):
    """A tuple of per-run values (scalars, or arrays of shape (runs,)) with their running total.

    ``integral``: the items are integer counters and ``total`` is their exact sum; otherwise
    they are budgets >= 0 and ``total`` is an upper bound of their exact sum, ``fresh`` slides ago
    recomputed.
    """

    total: Any
    integral: bool
    fresh: int

    @classmethod
    def of(cls, items: tuple[Any, ...]) -> SlidingValues:
        """``items`` with their total taken afresh."""
        if items and all(type(item) is float for item in items):  # one run's budgets: plain floats, the same doubles
            total = rounding.sum_up_floats(items)
            if total is not None:
                return cls._made(items, total, False, 0)
        if all(_is_counter(item) for item in items):
            return cls._made(items, plain_sum(items), True, 0)
        return cls._made(items, rounding.sum_up_terms(items), False, 0)

    @classmethod
    def _made(cls, items: tuple[Any, ...], total: Any, integral: bool, fresh: int) -> SlidingValues:
        window = cls(items)
        window.total, window.integral, window.fresh = total, integral, fresh
        return window

    def slid(self, newest: Any) -> SlidingValues:
        """Without the oldest item, ``newest`` appended (the total moves by two operations)."""
        items = (*self[1:], newest)
        if self.integral:
            if not _is_counter(newest):
                return SlidingValues.of(items)
            return SlidingValues._made(items, self.total - self[0] + newest, True, 0)
        if self.fresh + 1 >= len(self):
            return SlidingValues.of(items)
        # total >= the exact sum >= the oldest item (all >= 0), so the difference is >= 0.
        if type(self.total) is float and type(newest) is float:
            inner = step_up_float(self.total - self[0])
            outer = step_up_float(inner + newest) if inner is not None else None
            if outer is not None:
                return SlidingValues._made(items, outer, False, self.fresh + 1)
        total = step_up(step_up(self.total - self[0]) + newest, scratch=True)
        return SlidingValues._made(items, total, False, self.fresh + 1)


def plain_sum(values: Sequence[Any]) -> Any:
    """Σ with plain + (ints, numpy arrays and Z3 integer terms all support it)."""
    total: Any = 0
    for value in values:
        total = total + value
    return total


class PlainWindows:
    """``slide``, ``count`` and ``ghost`` of the back-ends that keep windows as plain tuples and
    compute everything (the exact and the Z3 back-ends: what the proofs and oracles read)."""

    def slide(self, window: Sequence[Any], newest: Any) -> tuple[Any, ...]:
        return (*window[1:], newest) if window else ()

    def count(self, values: Sequence[Any]) -> Any:
        return plain_sum(values)

    def ghost(self, make: Callable[[], Any]) -> Any:
        return make()


def _is_counter(item: Any) -> bool:
    if isinstance(item, (bool, np.bool_)):
        return False
    if isinstance(item, (int, np.integer)):
        return True
    return isinstance(item, np.ndarray) and np.issubdtype(item.dtype, np.integer)
