"""An ``ops`` back-end whose operations are compiled functions: an allocation rule compiled from its own source.

The built-in mechanisms run their budget rules (:mod:`mechanisms.rules`) on :data:`budgetcheck.ops.FLOAT`,
the same Python functions ``budgetcheck prove`` runs on Z3 terms; each rule operation is then a Python
call and a numpy call per timestep. Here the *same* functions, their code objects unchanged, are compiled
by numba with :class:`KernelOps` as their ``ops`` (a numba ``jitclass``): one run at a time, on doubles,
every operation the double :data:`~budgetcheck.ops.FLOAT` gives (the scalar helpers of
:mod:`budgetcheck.rounding`, compiled: the same IEEE operations in the same order, nothing fused; SVML off
as for every kernel, :mod:`budgetcheck.kernels`). A rule's window of its last w − 1 values is a
:data:`Window` over a (w − 1, runs) ring of doubles (slot-major: a step over every run reads and writes one
contiguous row) with the running upper bound of :class:`~budgetcheck.ledger.sliding.SlidingValues` (the same
steps, taken afresh after as many slides).

So the proof covers the code that runs: what is compiled is the proved rule's code object, with only the
names it calls (helpers of its own module such as ``bd_candidate``) bound to their compiled versions;
``tests/bench/test_grid_session.py`` runs the compiled step and the ``FLOAT`` step on the same seeds and
compares every charge and release bit for bit.

Supported rules: those whose state is one window of budgets (:func:`compile_rule` returns None for any
other, and the caller runs the rule on ``FLOAT``).
"""

from __future__ import annotations

import collections
import inspect
import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.kernels import compiled, off_main

FloatArray = NDArray[np.float64]

_LARGEST = float(np.finfo(np.float64).max)
_UNIT_ROUNDOFF = 2.0**-53


def _own(function: Callable[..., Any]) -> Callable[..., Any]:
    """A kernel of another module, its code and globals unchanged, set up with this module's kernels (a kernel
    calls only the compiled kernels of its own module's namespace)."""
    plain = inspect.unwrap(function)
    copy = types.FunctionType(plain.__code__, plain.__globals__, plain.__name__, plain.__defaults__, plain.__closure__)
    copy.__module__ = __name__
    copy.__qualname__ = plain.__qualname__
    return compiled(copy)


_product_error = _own(rounding._product_error)  # Dekker's TwoProduct error, rounding's own source

Window = collections.namedtuple("Window", ["run", "start", "total", "fresh"])
"""One run's window of a rule's last w − 1 budgets: column ``run`` of the back-end's (w − 1, runs) ring, its
oldest at ``start``; ``total`` is the upper bound of their exact sum that ``SlidingValues`` keeps,
``fresh`` slides after it was last taken afresh. Scalars only: made and passed at no cost per run."""

RuleEnv = collections.namedtuple("RuleEnv", ["epsilon", "w"])
"""A rule's (ε, w) for one run, as :class:`budgetcheck.proving.RuleEnv` (a tuple numba types)."""


@compiled
def _step_up(value: float) -> float:
    """``rounding.step_up`` of a double >= 0: the next double up (+inf and NaN give NaN)."""
    if not value < math.inf:
        return math.nan
    return float(np.nextafter(value + 0.0, np.inf))


@compiled
def _down(value: float, down: bool) -> float:
    """``rounding._down_if``: one double down where ``down`` holds."""
    return float(np.nextafter(value, -np.inf)) if down else value


@compiled
def k_sub_down(value: float, subtrahend: float) -> float:
    """``rounding._sub_down_each``: max(value − subtrahend, 0) rounded down (TwoSum's error)."""
    y = -subtrahend
    total = value + y
    virtual = total - value
    error = (value - (total - virtual)) + (y - virtual)
    total = _down(total, error < 0.0)
    return total if (total > 0.0) or (total != total) else 0.0


@compiled
def _near_underflow(value: float) -> bool:
    return (value != 0.0) & (abs(value) < 2.0**-900)


@compiled
def k_div_down(value: float, divisor: float) -> float:
    """``rounding._div_down_each``: value / divisor rounded down."""
    quotient = value / divisor
    product = quotient * divisor
    error = _product_error(quotient, divisor, product)
    too_big = (product > value) | ((product == value) & (error > 0.0))
    # never one step down from a quotient of 0 (rounding._div_down_each): 0 is the largest double below it
    return _down(quotient, (too_big | _near_underflow(quotient) | _near_underflow(value)) & (quotient != 0.0))


@compiled
def k_mul_down(value: float, factor: float) -> float:
    """``rounding._floor_product``: value · factor rounded down."""
    product = value * factor
    if product == np.inf and abs(value) < np.inf and abs(factor) < np.inf:
        return _LARGEST
    return _down(product, (_product_error(value, factor, product) < 0.0) | _near_underflow(product))


@compiled
def k_half_down(value: float) -> float:
    """``rounding.half_down``: exact halving, or the division rounded down where the half is subnormal."""
    if abs(value) < 2.0**-1021 and value != 0.0:
        return k_div_down(value, 2.0)
    return value * 0.5


@compiled
def k_share(total: float, parts: int) -> float:
    """``rounding.share``: the largest double x with parts · x <= total exactly (total >= 2**-800, finite:
    Dekker's product error is exact there; :func:`usable_epsilon` keeps the rest on ``FLOAT``)."""
    candidate = total / parts
    while True:
        product = candidate * parts
        if not ((product > total) or ((product == total) and (_product_error(candidate, float(parts), product) > 0.0))):
            return candidate
        candidate = float(np.nextafter(candidate, -np.inf))


@compiled
def _bound_sum(total: float, n: int) -> float:
    """``rounding._bound_sum`` of one double: inflated by 2(n + 1)u, one double up; 0 stays 0."""
    if total == 0.0:
        return 0.0
    return float(np.nextafter(total * (1.0 + 2.0 * (n + 1) * 2.0**-53), np.inf))


@compiled
def k_slide(values: FloatArray, window: Any, newest: float) -> Any:
    """``FloatOps.slide`` of a window of budgets: the oldest dropped, ``newest`` appended, the bound moved by
    one subtraction and one addition, each stepped one double up, or taken afresh (``rounding.sum_up_terms``
    of the values oldest first) once it has moved as many times as the window is long."""
    run = window.run
    n = values.shape[0]
    if n == 0:
        return window
    start = window.start
    oldest = values[start, run]
    values[start, run] = newest
    following = start + 1 if start + 1 < n else 0
    if window.fresh + 1 >= n:
        total = 0.0
        for k in range(n):
            index = following + k
            total = total + values[index if index < n else index - n, run]
        return Window(run, following, _bound_sum(total, n), 0)
    inner = _step_up(window.total - oldest)
    return Window(run, following, _step_up(inner + newest), window.fresh + 1)


_OPS_CLASS: Any = None


def _link() -> None:
    """Set up this module's kernels (their first call), before a jitclass method refers to them."""
    _step_up(0.0)


def kernel_ops(ring: FloatArray) -> Any:
    """The compiled back-end (a ``KernelOps`` instance): the operations of :class:`budgetcheck.ops.Ops`
    that a rule's ``charges`` and ``advance`` use, on one run's doubles; ``ring`` holds every run's window
    of its rule's last w − 1 budgets, shape (w − 1, runs) (slot-major: a step over every run reads one row)."""
    global _OPS_CLASS
    if _OPS_CLASS is None:
        _link()
        _OPS_CLASS = off_main(_make_ops_class)
    return _OPS_CLASS(ring)


def _make_ops_class() -> Any:
    from budgetcheck.kernels import _numba

    numba = _numba()
    import importlib

    jitclass = importlib.import_module("numba.experimental").jitclass

    sub_down, half_down, mul_down, div_down, share, slide = (
        k_sub_down,
        k_half_down,
        k_mul_down,
        k_div_down,
        k_share,
        k_slide,
    )

    @jitclass([("ring", numba.float64[:, :])])
    class KernelOps:
        """:class:`budgetcheck.ops.Ops` on one run's doubles, compiled (see the module docstring)."""

        def __init__(self, ring: FloatArray) -> None:
            self.ring = ring

        def where(self, condition: Any, if_true: Any, if_false: Any) -> Any:
            return if_true if condition else if_false

        def minimum(self, a: Any, b: Any) -> Any:
            return a if a <= b else b

        def both(self, a: Any, b: Any) -> Any:
            return a and b

        def negate(self, a: Any) -> Any:
            return not a

        def define(self, name: Any, term: Any) -> Any:
            return term

        def sum_up(self, window: Any) -> float:
            return float(window.total)

        def slide(self, window: Any, newest: float) -> Any:
            return slide(self.ring, window, newest)

        def sub_down(self, value: float, subtrahend: float) -> float:
            return sub_down(value, subtrahend)

        def half_down(self, value: float) -> float:
            return half_down(value)

        def mul_down(self, value: float, count: float, at_most: Any = None) -> float:
            return mul_down(value, float(count))

        def share(self, total: float, parts: int) -> float:
            return share(total, parts)

        def fraction_down(self, value: float, numerator: int, denominator: int) -> float:
            return div_down(mul_down(value, float(numerator)), float(denominator))

    return KernelOps


def usable_epsilon(epsilon: float | FloatArray) -> bool:
    """Whether every ε is a double in [2**-800, 2**1000] (where the compiled ``share`` is exact)."""
    values = np.asarray(epsilon, dtype=np.float64)
    return bool(((values >= 2.0**-800) & (values <= 2.0**1000)).all())


def compile_function(function: Callable[..., Any], numba: Any, done: dict[int, Any] | None = None) -> Any:
    """``function`` compiled with its own code object; the plain functions of its module it calls (e.g.
    ``bd_candidate``) compiled the same way and bound in their place."""
    done = {} if done is None else done
    if id(function) in done:
        return done[id(function)]
    code = function.__code__
    scope = dict(function.__globals__)
    for name in code.co_names:
        value = scope.get(name)
        if (
            isinstance(value, types.FunctionType)
            and value.__module__ == function.__module__
            and not inspect.isclass(value)
        ):
            scope[name] = compile_function(value, numba, done)
    rebuilt = types.FunctionType(code, scope, function.__name__, function.__defaults__, function.__closure__)
    # inlined into its caller in numba's own IR (the same code object, typed at the call site): the back-end
    # object and the window are then passed without a reference count taken and dropped per run and call
    # (BD's charges over 12,000 runs: 310 -> 213 us per timestamp; benchmarks/grid-fixed-cost.md)
    dispatcher = numba.njit(nogil=True, error_model="numpy", inline="always")(rebuilt)
    done[id(function)] = dispatcher
    return dispatcher
