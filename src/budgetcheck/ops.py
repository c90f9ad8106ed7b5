"""Arithmetic back-ends for allocation rules: one rule, run on floats, rationals or Z3 terms.

A rule (e.g. BD's publication budget) is written against the small :class:`Ops` interface. The
mechanism runs it with :data:`FLOAT` (numpy, vectorised over runs, every budget rounded *down*),
tests run it with :data:`EXACT` (``fractions.Fraction``), and proofs run it with Z3 terms
(:mod:`budgetcheck.verify.z3_adapter`). Integer state (counters, share counts) uses plain operators, which
numpy, Python and Z3 all support; only choice, minimum and the logical connectives go through
``Ops``, and the window of a rule's last w − 1 values (``slide``, summed by ``sum_up`` or
``count``), whose total the float back-end keeps running instead of re-adding w − 1 terms a step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Final, Protocol, final

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.ledger.records import is_frozen
from budgetcheck.ledger.sliding import PlainWindows, SlidingValues, plain_sum

FloatArray = NDArray[np.float64]


class Ops(Protocol):
    """The operations an allocation rule may use (types are back-end specific, hence Any)."""

    def where(self, condition: Any, if_true: Any, if_false: Any) -> Any: ...

    def minimum(self, a: Any, b: Any) -> Any: ...

    def both(self, a: Any, b: Any) -> Any: ...

    def negate(self, a: Any) -> Any: ...

    def all_of(self, terms: Sequence[Any]) -> Any:
        """The conjunction of Boolean terms (True when empty)."""
        ...

    def implies(self, a: Any, b: Any) -> Any: ...

    def define(self, name: str, term: Any) -> Any:
        """Name an intermediate value (Z3: a fresh variable equal to the term; others: the term)."""
        ...

    def sum_up(self, values: Any) -> Any:
        """Σ values (along the last axis for arrays); float back-ends round up."""
        ...

    def slide(self, window: Sequence[Any], newest: Any) -> tuple[Any, ...]:
        """The window's values without the oldest, ``newest`` appended (a rule's last w − 1 values).

        Back-ends may keep the window's total current (the float one does: :meth:`sum_up` and
        :meth:`count` of a slid window then cost O(1), not O(w)).
        """
        ...

    def count(self, values: Sequence[Any]) -> Any:
        """Σ of integer counters, exactly."""
        ...

    def ghost(self, make: Callable[[], Any]) -> Any:
        """A ghost state component, ``make()``: read by the invariant only, never by charges or
        advance. Back-ends that only run the rule (float) skip computing it and hold :data:`GHOST`."""
        ...

    def sub_down(self, value: Any, subtrahend: Any) -> Any:
        """max(value − subtrahend, 0); float back-ends round down."""
        ...

    def half_down(self, value: Any) -> Any: ...

    def mul_down(self, value: Any, count: Any, at_most: int | None = None) -> Any:
        """value · count for an integer 0 <= count <= at_most; float back-ends round down.

        ``at_most`` lets the Z3 back-end keep the product linear (a chain of at_most choices).
        """
        ...

    def share(self, total: Any, parts: int) -> Any:
        """A budget u with parts · u <= total (float: the largest such double; exact: total/parts)."""
        ...

    def fraction_down(self, value: Any, numerator: int, denominator: int) -> Any:
        """value · numerator / denominator for constants 0 <= numerator <= denominator; float rounds down."""
        ...


class FloatOps:
    """numpy back-end used inside mechanisms: vectorised, every budget rounded towards 0.

    A rule run on plain Python numbers (one run: a live publisher's state) stays on plain numbers:
    the same doubles as on arrays of one element (:mod:`budgetcheck.rounding`'s ``*_float`` helpers),
    without a numpy call per operation.
    """

    def where(self, condition: Any, if_true: Any, if_false: Any) -> Any:
        if type(condition) is bool and type(if_true) in _PLAIN and type(if_false) in _PLAIN:
            return if_true if condition else if_false
        return np.where(condition, if_true, if_false)

    def minimum(self, a: Any, b: Any) -> Any:
        if type(a) is int and type(b) is int:
            return a if a <= b else b
        return np.minimum(a, b)

    def both(self, a: Any, b: Any) -> Any:
        if type(a) is bool and type(b) is bool:
            return a and b
        return np.logical_and(a, b)

    def negate(self, a: Any) -> Any:
        if type(a) is bool:
            return not a
        return np.logical_not(a)

    def all_of(self, terms: Sequence[Any]) -> Any:
        return np.logical_and.reduce([np.asarray(t) for t in terms]) if terms else np.bool_(True)

    def implies(self, a: Any, b: Any) -> Any:
        return np.logical_or(np.logical_not(a), b)

    def define(self, name: str, term: Any) -> Any:
        return term

    def sum_up(self, values: Any) -> Any:
        if isinstance(values, SlidingValues) and not values.integral:
            return values.total
        if isinstance(values, (list, tuple)):
            if all(type(value) is float for value in values):
                total = rounding.sum_up_floats(values)
                if total is not None:
                    return total
            return rounding.sum_up_terms(values)
        return rounding.sum_up(values, axis=-1)

    def slide(self, window: Sequence[Any], newest: Any) -> tuple[Any, ...]:
        if not window:
            return ()
        if isinstance(window, SlidingValues):
            return window.slid(newest)
        return SlidingValues.of((*window[1:], newest))

    def count(self, values: Sequence[Any]) -> Any:
        if isinstance(values, SlidingValues) and values.integral:
            return values.total
        return plain_sum(values)

    def ghost(self, make: Callable[[], Any]) -> Any:
        return GHOST

    def sub_down(self, value: Any, subtrahend: Any) -> Any:
        if type(value) in _NUMBERS and type(subtrahend) in _NUMBERS:
            result = rounding.sub_down_float(float(value), float(subtrahend))
            if result is not None:
                return result
        return rounding.sub_down(value, subtrahend)

    def half_down(self, value: Any) -> Any:
        if type(value) in _NUMBERS:
            result = rounding.half_down_float(float(value))
            if result is not None:
                return result
        return rounding.half_down(value)

    def mul_down(self, value: Any, count: Any, at_most: int | None = None) -> Any:
        if type(value) in _SCALARS and type(count) in _SCALARS:  # a rule's constant (e.g. DSAT_w's units): once
            return _scalar_mul_down(float(value), float(count))
        if (
            at_most is not None
            and at_most <= _TABLE_LIMIT
            and type(value) in _SCALARS
            and isinstance(count, np.ndarray)
            and count.dtype.kind in "iu"
            and count.size
            and 0 <= count.min()
            and count.max() <= at_most
        ):
            return _products(float(value), at_most)[count]  # BA's u·k per run: a look-up of the w + 1 products
        if isinstance(value, np.ndarray) and type(count) in _SCALARS:  # a share of per-run ε times a constant
            return _remembered(
                "mul_down", value, float(count), lambda: np.asarray(rounding.mul_down(value, count), dtype=np.float64)
            )
        return rounding.mul_down(value, count)

    def share(self, total: Any, parts: int) -> Any:
        if type(total) is float:  # one ε (a live run's rule asks at every timestamp): the remembered share
            return rounding.share(total, parts)
        if isinstance(total, np.ndarray):  # one ε per run (WindowLedger.with_epsilons)
            return _shares(total, parts)
        return rounding.share(float(total), parts)

    def fraction_down(self, value: Any, numerator: int, denominator: int) -> Any:
        return rounding.div_down(rounding.mul_down(value, float(numerator)), float(denominator))


_ARRAY_CACHE: dict[tuple[str, int, float], tuple[FloatArray, FloatArray]] = {}


def _remembered(kind: str, array: FloatArray, constant: float, compute: Callable[[], FloatArray]) -> FloatArray:
    """``compute()``, remembered for an array that nothing can change (a ledger's per-run ε, or a
    share of it) and a constant: a rule asking for the same budgets at every timestamp pays for them
    once. The entry holds the array, so its id cannot be reused while cached."""
    key = (kind, id(array), constant)
    cached = _ARRAY_CACHE.get(key)
    if cached is not None and cached[0] is array:
        return cached[1]
    result = compute()
    if is_frozen(array):  # nothing can change it (nor an array it views) while it is a key
        result.setflags(write=False)
        if len(_ARRAY_CACHE) >= 64:
            _ARRAY_CACHE.clear()
        _ARRAY_CACHE[key] = (array, result)
    return result


def _shares(totals: FloatArray, parts: int) -> FloatArray:
    """Elementwise :func:`rounding.share` of a per-run budget array (computed once per distinct value)."""

    def compute() -> FloatArray:
        values, inverse = np.unique(totals, return_inverse=True)
        return np.array([rounding.share(float(value), parts) for value in values], dtype=np.float64)[
            inverse.reshape(totals.shape)
        ]

    return _remembered("share", totals, parts, compute)


class ExactOps(PlainWindows):
    """Exact rationals, one run at a time (sequences are Python lists of Fractions)."""

    def where(self, condition: Any, if_true: Any, if_false: Any) -> Any:
        return if_true if condition else if_false

    def minimum(self, a: Any, b: Any) -> Any:
        return min(a, b)

    def both(self, a: Any, b: Any) -> Any:
        return bool(a) and bool(b)

    def negate(self, a: Any) -> Any:
        return not a

    def all_of(self, terms: Sequence[Any]) -> Any:
        return all(bool(t) for t in terms)

    def implies(self, a: Any, b: Any) -> Any:
        return (not a) or bool(b)

    def define(self, name: str, term: Any) -> Any:
        return term

    def sum_up(self, values: Sequence[Fraction]) -> Fraction:
        return sum(values, Fraction(0))

    def sub_down(self, value: Any, subtrahend: Any) -> Any:
        return max(Fraction(value) - Fraction(subtrahend), Fraction(0))

    def half_down(self, value: Any) -> Any:
        return Fraction(value) / 2

    def mul_down(self, value: Any, count: Any, at_most: int | None = None) -> Any:
        return Fraction(value) * int(count)

    def share(self, total: Any, parts: int) -> Any:
        return Fraction(total) / parts

    def fraction_down(self, value: Any, numerator: int, denominator: int) -> Any:
        return Fraction(value) * numerator / denominator


@final
class _Ghost:
    """What the float back-end holds for a ghost state component; any use of it is an error."""

    def __repr__(self) -> str:
        return "GHOST"

    _MISUSE = "a rule read a ghost state component outside its invariant (the float back-end does not compute ghosts)"

    def __getitem__(self, index: object) -> Any:
        raise TypeError(self._MISUSE)

    def __bool__(self) -> bool:
        raise TypeError(self._MISUSE)


GHOST: Final = _Ghost()


def per_run(state: Any, runs: int) -> Any:
    """A rule's (initial) state with every number repeated once per run, shape (runs,) (nested
    windows stay tuples; :data:`GHOST` stays as it is): the vectorised state a mechanism starts from."""
    if isinstance(state, tuple):
        return tuple(per_run(item, runs) for item in state)
    if isinstance(state, _Ghost):
        return state
    return np.full(runs, state)


_SCALARS = (float, int, np.float64, np.int64)
_NUMBERS = frozenset((float, int, np.float64))  # exact as doubles (a rule's ints are small counts)
_PLAIN = frozenset((bool, int, float, np.float64, np.int64))


@functools.lru_cache(maxsize=4096)
def _scalar_mul_down(value: float, count: float) -> np.float64:
    """:func:`rounding.mul_down` of two scalars, remembered (the same exact result every time)."""
    return np.float64(rounding.mul_down(value, count))


_TABLE_LIMIT = 1 << 16


@functools.lru_cache(maxsize=64)
def _products(value: float, at_most: int) -> FloatArray:
    """[:func:`rounding.mul_down` (value, k) for k = 0..at_most], read-only (the same doubles, element by element)."""
    table = np.asarray(rounding.mul_down(value, np.arange(at_most + 1, dtype=np.float64)), dtype=np.float64)
    table.setflags(write=False)
    return table


FLOAT = FloatOps()
EXACT = ExactOps()
