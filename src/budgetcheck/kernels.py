"""Compiled loops over rows for per-step work that whole-array numpy cannot do in one pass.

:func:`compiled` is numba's ``njit`` with an on-disk cache, so a process pays for compilation
once per installation, not once per start. No fastmath: IEEE operations run in the order written,
nothing fused or reordered (the directed-rounding loops of :mod:`budgetcheck.rounding` rely on
it); numpy's error model: a division by zero gives inf or NaN, as in numpy, not an exception.
Where no cache directory can be written (a read-only installation and home), the kernel compiles
in each process instead of failing at import. Mechanisms may use it for their post-processing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])


def compiled(function: F) -> F:
    """``function`` compiled by numba (nopython mode, GIL released), cached on disk when possible."""
    try:
        kernel = numba.njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError as error:
        if "no locator available" not in str(error):  # only a missing cache directory is expected here
            raise
        kernel = numba.njit(nogil=True, error_model="numpy")(function)
    return cast(F, kernel)
