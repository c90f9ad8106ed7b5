"""Elementary functions that give the same doubles on every CPU: the C library's scalar routines.

numpy computes ``exp``, ``log``, ``expm1``, ``sin``, ``cos``, ``power`` and the other transcendental
ufuncs of float64 arrays with SIMD kernels chosen when numpy starts, by the CPU's features: on a
machine with AVX-512 (numpy's ``X86_V4`` target) they are vector approximations whose last bit
differs from the scalar C library's in a fraction of inputs (``np.log`` over 10^5 points of (0, 1):
2 % of results, each 1 ulp). A seasonal stream built with ``growth ** np.arange(n)`` was thus a
different stream on such a machine, and every release computed from it differed.

Every transcendental function on a path that feeds a release, a charge, a verify report or a
benchmark figure comes from here instead: one compiled loop (no SIMD dispatch, no fastmath, numba's
Intel SVML vector library switched off in :mod:`budgetcheck.kernels`) calls the C library's scalar
routine on each element, the routine numpy's baseline build and Python's :mod:`math` call. The
results are the same doubles on every CPU for a given C library (glibc's ``exp``, ``log``, ``pow``
are within 0.52 ulp and their last bit does not depend on the CPU beyond FMA, which every x86-64-v3
and arm64 CPU has); IEEE ``+ − × ÷`` and ``sqrt`` are correctly rounded and portable already.

>>> import numpy as np
>>> from budgetcheck import libm
>>> libm.exp(np.array([0.0, 1.0]))
array([1.        , 2.71828183])
>>> libm.powers(1.5, 4)
array([1.   , 1.5  , 2.25 , 3.375])
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.kernels import compiled

FloatArray = NDArray[np.float64]


def exp(x: ArrayLike) -> FloatArray:
    """e^x elementwise (inf past the largest double), as C's ``exp``.

    >>> float(exp(0.0)[()])
    1.0
    """
    return _apply(_exp_into, x)


def expm1(x: ArrayLike) -> FloatArray:
    """e^x − 1 elementwise, as C's ``expm1`` (exact near 0 where ``exp(x) - 1`` cancels).

    >>> float(expm1(1e-20)[()])
    1e-20
    """
    return _apply(_expm1_into, x)


def log(x: ArrayLike) -> FloatArray:
    """The natural logarithm elementwise, as C's ``log`` (−inf at 0, NaN below it).

    >>> log([1.0, 0.0]).tolist()
    [0.0, -inf]
    """
    return _apply(_log_into, x)


def sin(x: ArrayLike) -> FloatArray:
    """sin x elementwise (radians), as C's ``sin``.

    >>> float(sin(0.0)[()])
    0.0
    """
    return _apply(_sin_into, x)


def cos(x: ArrayLike) -> FloatArray:
    """cos x elementwise (radians), as C's ``cos``.

    >>> float(cos(0.0)[()])
    1.0
    """
    return _apply(_cos_into, x)


def powers(base: float, count: int) -> FloatArray:
    """base^0, base^1, …, base^(count − 1), each by C's ``pow`` (not a running product, whose
    rounding errors would accumulate): what ``base ** np.arange(count)`` gives on numpy's scalar path.

    >>> powers(2.0, 3).tolist()
    [1.0, 2.0, 4.0]
    """
    return np.array([math.pow(base, k) for k in range(count)], dtype=np.float64)


def _apply(kernel: object, x: ArrayLike) -> FloatArray:
    """``kernel`` over the elements of ``x`` as float64, into a new array of ``x``'s shape."""
    values = np.asarray(x, dtype=np.float64)
    out = np.empty(values.shape, dtype=np.float64)
    kernel(np.ascontiguousarray(values).reshape(-1), out.reshape(-1))  # type: ignore[operator]
    return out


@compiled
def _exp_into(values: FloatArray, out: FloatArray) -> None:
    for i in range(values.size):
        out[i] = math.exp(values[i])


@compiled
def _expm1_into(values: FloatArray, out: FloatArray) -> None:
    for i in range(values.size):
        out[i] = math.expm1(values[i])


@compiled
def _log_into(values: FloatArray, out: FloatArray) -> None:
    for i in range(values.size):
        out[i] = math.log(values[i])  # C's results at 0 and below (−inf, NaN) under error_model="numpy"


@compiled
def _sin_into(values: FloatArray, out: FloatArray) -> None:
    for i in range(values.size):
        out[i] = math.sin(values[i])


@compiled
def _cos_into(values: FloatArray, out: FloatArray) -> None:
    for i in range(values.size):
        out[i] = math.cos(values[i])
