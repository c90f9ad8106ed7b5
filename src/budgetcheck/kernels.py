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

import _thread
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
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
        if kernel is not None:
            return kernel(*args, **kwargs)
        return _first_call(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<compiled kernel {self.__wrapped__.__module__}.{self.__wrapped__.__qualname__}>"


_OFF_MAIN = threading.Lock()  # held by the thread doing :func:`off_main`'s work
_FORK_WAIT = 30.0  # how long a fork waits for a kernel set-up or a numba compilation under way in another thread


def _numba_lock() -> Any:
    """numba's compiler lock (an RLock every compilation holds), if numba is imported and still keeps it there."""
    module = sys.modules.get("numba.core.compiler_lock")
    return getattr(getattr(module, "global_compiler_lock", None), "_lock", None)


def _before_fork() -> None:
    """Hold the set-up lock and numba's compiler lock across a fork (``os.register_at_fork``), so that a child
    never inherits them held by a thread it does not have (its first kernel call would wait forever). Runs
    after the ledgers' hook, which lets their operations (and the compilations inside them) finish first."""
    deadline = time.monotonic() + _FORK_WAIT
    held = []
    for lock in (_LOCK, _numba_lock()):
        if lock is not None and lock.acquire(True, max(0.0, deadline - time.monotonic())):
            held.append(lock)
    _FORKING.held = (held, _numba_lock())


def _after_fork_in_parent() -> None:
    held, _ = getattr(_FORKING, "held", ([], None))
    _FORKING.held = ([], None)
    for lock in held:
        lock.release()


def _after_fork_in_child() -> None:
    """Release what the parent's thread held; a lock another thread held past the wait is made afresh (the
    compilation it guarded is lost with that thread: the child compiles again)."""
    global _LOCK
    held, numba_lock = getattr(_FORKING, "held", ([], None))
    _FORKING.held = ([], None)
    for lock in held:
        lock.release()
    if not any(lock is _LOCK for lock in held):
        _LOCK = threading.Lock()
    if numba_lock is not None and not any(lock is numba_lock for lock in held):
        sys.modules["numba.core.compiler_lock"].global_compiler_lock._lock = threading.RLock()


_FORKING = threading.local()
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


def compiled(function: F) -> F:
    """``function`` compiled by numba (nopython mode, GIL released) on its first call, cached on disk
    when possible."""
    deferred = _Deferred(function)
    with _LOCK:
        _PENDING.setdefault(function.__module__, []).append(deferred)
    return cast(F, deferred)


def _first_call(deferred: _Deferred, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A kernel's first call: numba imported and the module's kernels set up (:func:`off_main`), then called."""
    return off_main(_set_up, deferred)(*args, **kwargs)


def off_main(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread of its own while the main thread waits for it; in place in any other thread.

    Python runs signal handlers in the main thread only, between two bytecodes: one that raises (Ctrl-C, a
    SIGALRM timeout) in the middle of numba's import or of a compilation leaves numba's registries half made
    for the rest of the process (``RuntimeError: generator raised StopIteration`` at every later call, once
    an abort "double free"; issue 42). Run elsewhere, the work finishes whatever the handler does: its
    exception reaches the waiting caller, and a later call finds numba whole (a compilation under way is
    waited for by numba's own lock, never done twice)."""
    if threading.current_thread() is not threading.main_thread() or _importing():
        return fn(*args)
    done = threading.Event()
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            with _OFF_MAIN:  # one at a time: numba's first imports and compilations are not safe side by side
                outcome.append((True, fn(*args)))
        except BaseException as exc:  # handed to the caller below, with its traceback
            outcome.append((False, exc))
        finally:
            done.set()

    _thread.start_new_thread(run, ())  # returns at once: a handler cannot stop the work half way
    done.wait()
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return cast(T, value)


def _importing() -> bool:
    """Whether a module is being imported on this thread's stack (a kernel called from a module's body): the
    work then stays here, since a helper that imported that module (numba's cache may) would wait for it."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "<module>":
            module = sys.modules.get(str(frame.f_globals.get("__name__")))
            if getattr(getattr(module, "__spec__", None), "_initializing", False):
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _set_up(wanted: _Deferred) -> Callable[..., Any]:
    """Compile-on-call dispatchers for every pending kernel of ``wanted``'s module, in definition order."""
    numba = _numba()
    import numpy.ma  # noqa: F401 - numba's argument typing imports it at a first call: here, not in the main thread

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
        dispatcher = numba.njit(cache=True, nogil=True, error_model="numpy")(function)
    except RuntimeError as error:
        if "no locator available" not in str(error):  # only a missing cache directory is expected here
            raise
        dispatcher = numba.njit(nogil=True, error_model="numpy")(function)
    # a call with argument types not compiled yet compiles (or loads) them off the main thread (see off_main);
    # numba's dispatcher looks the method up on the instance when no compiled version matches
    compile_for_args = dispatcher._compile_for_args
    dispatcher._compile_for_args = lambda *args, **kwargs: off_main(lambda: compile_for_args(*args, **kwargs))
    return cast(Callable[..., Any], dispatcher)
