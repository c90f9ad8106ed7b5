"""A user's function on true values as a predictable transaction: only its declared answer leaves, on time.

``measure``, ``measure_footprint`` and a threshold test's own statistic hand ``fn`` the true values. Here
fn runs as Fuzz runs a microquery (Haeberlen, Pierce and Narayan, "Differential Privacy Under Fire",
USENIX Security 2011, §5): the only thing that leaves it is an answer of the declared shape, at a time
that does not depend on the data.

- **Isolated**: fn runs in a child forked for this one call, so every object it changes is the child's
  copy (a closure, a global, ``os.environ``, ``sys.modules``, a thread, an object whose ``__array__``
  re-reads the data later: none reaches the parent). Before fn sees a value the child is sandboxed
  (:func:`budgetcheck.ledger.sandbox.confine`: no descriptor but the answer pipe, no shared mapping,
  seccomp-bpf allowing ``write`` to that pipe only and no file, socket, signal, process or shared memory).
- **Total**: whatever fn does — raise, exit, crash, overrun, return another shape or a non-finite value,
  write anything into its pipe — the call yields the caller's declared ``default`` instead, charged and
  noised like any answer. That it failed is recorded for the ledger's owner (``ledger.failures``), never
  raised to the mechanism (which would hand it one exact bit per call).
- **On time**: the parent waits for the answer until ``deadline × KILL_SHARE`` after the fork, kills the
  child there whatever it is doing (a child that has answered is parked until then, so that even its exit
  is not earlier), reaps it, decodes the answer or takes the default, records a failure, and returns
  at ``deadline`` after the call began (:func:`held`): the call's duration is the deadline, whatever fn
  did. ``SIGCHLD`` is blocked in the calling thread for the call, so a handler of the mechanism's learns
  of the child's end only at the return. What remains is in
  ``docs/explanation/predictable-transactions.md``.

The parent reads exactly the bytes of an answer of the declared shape (:func:`answer_bytes`) and builds
plain float64 arrays from them (no unpickling, no object of the child's enters the parent).

``isolation="trusted"`` runs fn in-process (no fork, no sandbox, no deadline) for code one trusts: its
failures still give the default answer, but its side effects survive.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import select
import signal
import struct
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger import sandbox
from budgetcheck.ledger.errors import InvalidArgument, SecretAccess

FloatArray = NDArray[np.float64]
FORK = "fork"
TRUSTED = "trusted"
ISOLATIONS = (FORK, TRUSTED)
MOST_BYTES = 1 << 28  # the largest answer a child may send (256 MiB): larger ones are refused before the charge
MOST_DIMENSIONS = 32
DEFAULT_DEADLINE = 0.25  # seconds: a call's duration unless the caller declares another
MOST_DEADLINE = 3600.0
KILL_SHARE = 0.8  # fn has this share of the deadline; the rest is for killing and reaping the child in time
SECRET_ACCESS = "read a Secret outside its charge"
FAILED = "raised or returned a non-finite value or another shape"
NO_ANSWER = "no answer by the deadline: fn raised, exited, was killed or overran, or returned another shape"
NOT_FINITE = "a non-finite answer"
_OK = 0


@attrs.frozen
class Failure:
    """One call of the caller's code on true values that gave its declared default answer instead.

    Recorded for the ledger's owner (``ledger.failures``); the mechanism's call got the default, charged
    and noised like any answer. ``t``: the ledger's timestamp of the call; ``operation``: ``measure``,
    ``measure_footprint`` or ``query``; ``reason``: what the parent saw (a forked fn's own kind of failure
    is not told: it could be chosen to follow the data)."""

    t: int
    operation: str
    reason: str


def check_isolation(value: object) -> str:
    if value not in ISOLATIONS:
        raise InvalidArgument(
            f"isolation={value!r} must be 'fork' (fn runs in a sandboxed process forked per call, the default) "
            "or 'trusted' (fn runs in this process: only for code you trust)"
        )
    return str(value)


def check_confined(isolation: str, allow_unsandboxed: bool) -> None:
    """Refuse, before any charge, a forked call this machine cannot sandbox, unless the ledger's owner allowed
    unsandboxed children (then fn still runs forked, on time and total, but with the operating system open)."""
    if isolation != FORK:
        return
    if not hasattr(os, "fork"):
        raise InvalidArgument(
            "isolation='fork' needs os.fork (POSIX); on this platform pass isolation='trusted' knowingly"
        )
    reason = sandbox.unavailable()
    if reason is not None and not allow_unsandboxed:
        raise InvalidArgument(
            f"fn cannot be sandboxed here ({reason}), so a forked fn could send the data out through the operating "
            "system; refused before any charge. Install libseccomp (e.g. apt-get install libseccomp2) or have the "
            "ledger's owner allow unsandboxed code (ledger.allows_unsandboxed)"
        )


def check_deadline(value: object) -> float:
    """A call's declared deadline: seconds, finite, > 0 and at most MOST_DEADLINE."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not 0.0 < float(value) <= MOST_DEADLINE
    ):
        raise InvalidArgument(
            f"deadline={value!r} must be the seconds a call of fn takes, whatever fn does: a number > 0 and "
            f"<= {MOST_DEADLINE:g} (fn has {KILL_SHARE:g} of it; the call returns at the deadline)"
        )
    return float(value)


def check_default(value: object, shape: tuple[int, ...], name: str = "default") -> FloatArray:
    """The declared default answer, finite, broadcast to the declared ``shape`` (read-only)."""
    try:
        array = np.asarray(value, dtype=np.float64)
        default = np.broadcast_to(array, shape)
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{name}={value!r} must be finite numbers of the declared shape {shape!r} (or broadcast to it): the "
            "answer a call gives when fn fails"
        ) from None
    if not np.isfinite(default).all():
        raise InvalidArgument(f"{name}={value!r} must be finite: it is released, noised, when fn fails")
    return np.array(default)


def failure_kind(exc: BaseException) -> str:
    """Why a trusted fn failed, for the owner's record: :data:`SECRET_ACCESS` for a read of another Secret the
    library refused (a SecretAccess raised inside budgetcheck, not one fn made up), else :data:`FAILED`."""
    if isinstance(exc, SecretAccess):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and "/budgetcheck/" in frames[-1].filename:
            return SECRET_ACCESS
    return FAILED


def answer_bytes(shape: tuple[int, ...], count: int) -> int:
    """The size of a child's answer of ``count`` results of ``shape`` (its framing included): exactly what
    :func:`forked` reads back, at most :data:`MOST_BYTES`."""
    return 9 + count * (8 + 8 * len(shape) + 8 * math.prod(shape))


def check_answer_fits(shape: tuple[int, ...], count: int, name: str = "shape") -> None:
    """Refuse, before any charge, a declared shape whose ``count`` results a forked child could never send
    back (the call would be charged and then always give the default, whatever the data)."""
    if answer_bytes(shape, count) > MOST_BYTES:
        per_stream = f" for each of the {count} stacked streams" if count > 1 else ""
        raise InvalidArgument(
            f"{name}={shape!r}{per_stream} makes an answer of more than {MOST_BYTES:,} bytes, the most a forked fn "
            "may send back: declare a smaller result (or measure fewer streams at once)"
        )


def _kind_of(exc: BaseException) -> str:
    """:func:`failure_kind`, where asking the exception itself may raise (fn's class can make ``__class__``
    or ``__traceback__`` a property that raises an error of fn's choosing): then it is :data:`FAILED`."""
    try:
        return failure_kind(exc)
    except BaseException:  # noqa: BLE001 — an error fn built to escape is one more failure of fn
        return FAILED


def in_process(fn: Callable[[FloatArray], ArrayLike], payload: FloatArray) -> FloatArray | str:
    """fn on a read-only copy of the payload, here: its finite result, or the kind of failure."""
    copy = np.array(payload, dtype=np.float64)
    copy.setflags(write=False)
    try:
        result = np.asarray(fn(copy), dtype=np.float64)
    except BaseException as exc:  # noqa: BLE001 — whatever it was, it leaves without what it carried
        return _kind_of(exc)
    if not np.isfinite(result).all():
        return FAILED
    return result


_ISOLATING = threading.local()


def isolating() -> bool:
    """Whether this thread is forking :func:`forked`'s child, which only runs fn and never charges: the ledgers'
    fork hook then waits for no operation of another thread (a ledger busy at the fork is refused in the child)."""
    return bool(getattr(_ISOLATING, "active", False))


def forked(
    fn: Callable[[FloatArray], ArrayLike],
    payloads: Sequence[FloatArray],
    shape: tuple[int, ...],
    deadline: float,
    *,
    sandboxed: bool = True,
) -> list[FloatArray] | str:
    """fn on each payload in one freshly forked, sandboxed child: the finite float64 results of the declared
    ``shape``, or why there are none (:data:`NO_ANSWER`, :data:`NOT_FINITE`). The child is killed and reaped
    ``KILL_SHARE × deadline`` after the fork whatever it did; run it inside :func:`held` (``deadline``), which
    holds the return, and whatever the caller does with the outcome, to the deadline."""
    size = answer_bytes(shape, len(payloads))
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns on fork in a threaded process; the child only runs fn
        warnings.simplefilter("ignore", DeprecationWarning)
        start = time.monotonic()
        _ISOLATING.active = True  # the ledgers' fork hook waits for no other thread's operation (see isolating)
        try:
            pid = os.fork()
        finally:
            _ISOLATING.active = False
    if pid == 0:  # the child: never returns
        try:
            gc.disable()  # a collection would touch (and copy) every page of the parent's objects
            os.close(read_end)
            if sandboxed:
                sandbox.confine(write_end)
            message = _child(fn, payloads, shape)
            if message is not None:
                _send(write_end, message)
            while True:  # parked until the parent kills it at the deadline: its exit is not earlier
                time.sleep(MOST_DEADLINE)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        message = _receive(read_end, size, start + deadline * KILL_SHARE)
        _sleep_until(start + deadline * KILL_SHARE)
    finally:
        os.close(read_end)
        _end(pid)
    if message is None:
        return NO_ANSWER
    return _decode(message, len(payloads), shape)


@contextlib.contextmanager
def held(deadline: float | None) -> Iterator[None]:
    """Hold the end of the body to ``deadline`` seconds after its start (whether it returned or raised), with
    ``SIGCHLD`` blocked in this thread until then, so that a handler hears of a child's end only at the
    return. ``None``: no hold (in-process code)."""
    if deadline is None:
        yield
        return
    end = time.monotonic() + deadline
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        yield
    finally:
        _sleep_until(end)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _child(
    fn: Callable[[FloatArray], ArrayLike], payloads: Sequence[FloatArray], shape: tuple[int, ...]
) -> bytes | None:
    """The answer's bytes, or None when fn failed on any payload or returned another shape."""
    parts = [struct.pack("<bq", _OK, len(payloads))]
    for payload in payloads:
        outcome = in_process(fn, payload)
        if isinstance(outcome, str) or outcome.shape != shape:
            return None
        values = np.asarray(outcome, dtype="<f8", order="C")  # (ascontiguousarray would make a 0-d result 1-d)
        parts.append(struct.pack(f"<q{values.ndim}q", values.ndim, *values.shape) + values.tobytes())
    return b"".join(parts)


def _send(fd: int, message: bytes) -> None:
    view = memoryview(message)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int, size: int, until: float) -> bytes | None:
    """Exactly ``size`` bytes from the child, read until the monotonic time ``until``; None if they did not
    all come (it stopped, closed the pipe or overran). More bytes than that are never read."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks, left = [], size
    while left:
        wait = until - time.monotonic()
        if wait <= 0 or not poller.poll(wait * 1000.0):
            return None
        try:
            chunk = os.read(fd, min(left, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _end(pid: int) -> None:
    """Kill and reap the child (unreaped, its pid cannot be reused; gone already if SIGCHLD is ignored)."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _sleep_until(moment: float) -> None:
    while (left := moment - time.monotonic()) > 0:
        time.sleep(left)


def _decode(message: bytes, count: int, shape: tuple[int, ...]) -> list[FloatArray] | str:
    """Plain float64 arrays from the child's bytes, every number checked here (the child is not trusted):
    the framing must be exactly that of ``count`` results of the declared ``shape``."""
    status, n = struct.unpack_from("<bq", message)
    if status != _OK or n != count:
        return NO_ANSWER
    offset, size, results = 9, math.prod(shape), []
    for _ in range(count):
        framing = struct.unpack_from(f"<q{len(shape)}q", message, offset)
        if framing != (len(shape), *shape):
            return NO_ANSWER
        offset += 8 + 8 * len(shape)
        values = np.frombuffer(message, dtype="<f8", count=size, offset=offset).reshape(shape).astype(np.float64)
        offset += 8 * size
        if not np.isfinite(values).all():
            return NOT_FINITE
        results.append(values)
    return results
