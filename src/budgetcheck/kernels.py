"""Compiled loops over rows for per-step work that whole-array numpy cannot do in one pass.

:func:`compiled` is numba's ``njit`` with an on-disk cache, so a process pays for compilation
once per installation, not once per start. No fastmath: IEEE operations run in the order written,
nothing fused or reordered (the directed-rounding loops of :mod:`budgetcheck.rounding` rely on
it); numpy's error model: a division by zero gives inf or NaN, as in numpy, not an exception.
Where no cache directory can be written (a read-only installation and home), the kernel compiles
in each process instead of failing. Mechanisms may use it for their post-processing.

numba is imported when a kernel is first called, not when budgetcheck is: importing numba
imports scipy, which a publisher that never runs a kernel (or ``budgetcheck --help``) should not
pay for. The first call sets up every kernel of its module and puts each in the module's namespace
in place of its placeholder, so kernels that call each other see compiled kernels.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])
_LOCK = threading.Lock()
_PENDING: dict[str, list[_Deferred]] = {}  # module name -> its kernels not set up yet, in order


class _Deferred:
    """A kernel that is set up on its first call (see the module docstring)."""

    def __init__(self, function: Callable[..., Any]) -> None:
        functools.update_wrapper(self, function)
        self.__wrapped__ = function
        self._kernel: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kernel = self._kernel
        if kernel is None:
            kernel = _set_up(self)
        return kernel(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<compiled kernel {self.__wrapped__.__module__}.{self.__wrapped__.__qualname__}>"


def compiled(function: F) -> F:
    """``function`` compiled by numba (nopython mode, GIL released) on its first call, cached on disk
    when possible."""
    deferred = _Deferred(function)
    with _LOCK:
        _PENDING.setdefault(function.__module__, []).append(deferred)
    return cast(F, deferred)


def _set_up(wanted: _Deferred) -> Callable[..., Any]:
    """Compile-on-call dispatchers for every pending kernel of ``wanted``'s module, in definition order."""
    numba = _numba()

    with _LOCK:
        pending = _PENDING.pop(wanted.__module__, [])
        if wanted not in pending:
            pending.append(wanted)
        module = sys.modules.get(wanted.__module__)
        for deferred in pending:
            if deferred._kernel is None:
                deferred._kernel = _njit(numba, deferred.__wrapped__)
            if module is not None and getattr(module, deferred.__wrapped__.__name__, None) is deferred:
                setattr(module, deferred.__wrapped__.__name__, deferred._kernel)
    assert wanted._kernel is not None
    return wanted._kernel


def _numba() -> Any:
    """numba, imported with Intel's SVML vector library switched off.

    With SVML (the ``icc_rt`` package) installed, numba vectorises loops of ``math.exp``/``math.log``
    into SVML's approximations, whose last bits depend on the CPU's vector width; without it each call
    is the C library's scalar routine (:mod:`budgetcheck.libm`), the same doubles on every CPU. (A
    process that imported numba itself before budgetcheck's first kernel keeps numba's choice.)
    """
    os.environ["NUMBA_DISABLE_INTEL_SVML"] = "1"  # read when numba is first imported (in this process)
    import numba

    return numba


def _njit(numba: Any, function: Callable[..., Any]) -> Callable[..., Any]:
    try:
        return cast(Callable[..., Any], numba.njit(cache=True, nogil=True, error_model="numpy")(function))
    except RuntimeError as error:
        if "no locator available" not in str(error):  # only a missing cache directory is expected here
            raise
        return cast(Callable[..., Any], numba.njit(nogil=True, error_model="numpy")(function))
