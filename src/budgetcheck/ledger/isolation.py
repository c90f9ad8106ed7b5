"""A user's function run where nothing it does survives the call: a freshly forked process per call.

``measure`` and ``measure_footprint`` hand ``fn`` the true values. In-process, fn could keep them
(a closure, a global, a class or module attribute, ``os.environ``, ``sys.modules``, a thread that
outlives the call, an object returned whose ``__float__`` or ``__array__`` re-reads them later).
Here fn runs in a child forked for this one call: every object it changes is the child's copy,
gone when the child exits (``os._exit``: no atexit handler, no flush, every thread ends). The
child sends back only bytes — each result's ndim, shape and float64 values, or that it failed —
and the parent builds plain float64 arrays from them (no unpickling, no object of the child's ever
enters the parent), checking shape, size and finiteness itself.

A failure is one fixed word, :data:`FAILED`, whatever fn did (raised any exception, exited, returned
non-finite values or another shape, wrote into the pipe): which of these happened may depend on the
data, so it is not told. Only a read of another Secret is named, without its code line (a mistake to fix,
not a value).

What a process cannot hide from the operating system (files, sockets, shared memory, pipes it
inherited, signals to its parent, a grandchild it forks) is not stopped here: that needs an OS
sandbox (seccomp, Landlock, a container); see the README's threat model.

``isolation="trusted"`` runs fn in-process (no fork) for code one trusts: faster, and fn's side
effects survive (so nothing but the statistical audit can catch a leak).
"""

from __future__ import annotations

import gc
import math
import os
import struct
import threading
import traceback
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.errors import InvalidArgument, SecretAccess

FloatArray = NDArray[np.float64]
FORK = "fork"
TRUSTED = "trusted"
ISOLATIONS = (FORK, TRUSTED)
MOST_BYTES = 1 << 28  # the largest answer a child may send (256 MiB): larger ones are refused, not read
MOST_DIMENSIONS = 32
SECRET_ACCESS = "read a Secret outside its charge"
FAILED = "failed"  # every other failure of fn: one word, whatever it was (see the module docstring)
_OK, _FAILED = 0, 1


def check_isolation(value: object) -> str:
    if value not in ISOLATIONS:
        raise InvalidArgument(
            f"isolation={value!r} must be 'fork' (fn runs in a forked process per call, the default) "
            "or 'trusted' (fn runs in this process: only for code you trust)"
        )
    if value == FORK and not hasattr(os, "fork"):
        raise InvalidArgument(
            "isolation='fork' needs os.fork (POSIX); on this platform pass isolation='trusted' knowingly"
        )
    return str(value)


def failure_kind(exc: BaseException) -> str:
    """Why fn failed, without anything fn chose: :data:`FAILED` (never the exception's class, message or
    arguments: a choice among classes is a side channel too), or, for a read of another Secret that the
    library refused (a SecretAccess raised inside budgetcheck, not one fn made up), :data:`SECRET_ACCESS`
    alone: not where (fn can choose the file and line a read is reported at, and so spell the data)."""
    if isinstance(exc, SecretAccess):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and "/budgetcheck/" in frames[-1].filename:
            return SECRET_ACCESS
    return FAILED


def answer_bytes(shape: tuple[int, ...], count: int) -> int:
    """The size of a child's answer of ``count`` results of ``shape`` (its framing included): what
    :func:`forked` reads back, at most :data:`MOST_BYTES`."""
    return 9 + count * (8 + 8 * len(shape) + 8 * math.prod(shape))


def check_answer_fits(shape: tuple[int, ...], count: int, name: str = "shape") -> None:
    """Refuse, before any charge, a declared shape whose ``count`` results a forked child could never send
    back (the call would be charged and then always fail, whatever the data)."""
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
    """fn on a read-only copy of the payload, here (``isolation='trusted'``): its finite result, or the kind
    of failure."""
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


def forked(fn: Callable[[FloatArray], ArrayLike], payloads: Sequence[FloatArray]) -> list[FloatArray] | str:
    """fn on each payload in one freshly forked child: the finite float64 results, or the kind of the first failure."""
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns on fork in a threaded process; the child only runs fn
        warnings.simplefilter("ignore", DeprecationWarning)
        _ISOLATING.active = True  # the ledgers' fork hook waits for no other thread's operation (see isolating)
        try:
            pid = os.fork()
        finally:
            _ISOLATING.active = False
    if pid == 0:  # the child: never returns
        try:
            gc.disable()  # a collection would touch (and copy) every page of the parent's objects
            os.close(read_end)
            _send(write_end, _child(fn, payloads))
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        message = _receive(read_end)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if message is None:  # it exited or was killed: its exit status is fn's to choose, so it is not told
        return FAILED
    return _decode(message, len(payloads))


def _child(fn: Callable[[FloatArray], ArrayLike], payloads: Sequence[FloatArray]) -> bytes:
    parts = [struct.pack("<bq", _OK, len(payloads))]
    for payload in payloads:
        outcome = in_process(fn, payload)
        if isinstance(outcome, str):
            text = outcome.encode("utf-8", "replace")[:4096]
            return struct.pack("<bq", _FAILED, len(text)) + text
        values = np.asarray(outcome, dtype="<f8", order="C")  # (ascontiguousarray would make a 0-d result 1-d)
        parts.append(struct.pack(f"<q{values.ndim}q", values.ndim, *values.shape) + values.tobytes())
    return b"".join(parts)


def _send(fd: int, message: bytes) -> None:
    data = struct.pack("<q", len(message)) + message
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _receive(fd: int) -> bytes | None:
    """The child's one length-prefixed message (then stop reading: a grandchild holding the pipe cannot stall us)."""
    head = _read_exactly(fd, 8)
    if head is None:
        return None
    (size,) = struct.unpack("<q", head)
    if not 0 <= size <= MOST_BYTES:
        return b"\x01" + struct.pack("<q", 0)  # refused unread: reported as a failure below
    return _read_exactly(fd, size)


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _known_failure(text: str) -> str:
    """The child's failure text, if it is a read of another Secret (the fixed text); anything else is
    :data:`FAILED` (fn may have written a message of its own into the pipe: a free text could spell the data)."""
    return SECRET_ACCESS if text == SECRET_ACCESS else FAILED


def _decode(message: bytes, count: int) -> list[FloatArray] | str:
    """Plain float64 arrays from the child's bytes, every number checked here (the child is not trusted)."""
    try:
        status, n = struct.unpack_from("<bq", message)
        offset = 9
        if status == _FAILED:
            if not n:
                return FAILED  # an answer too large to read
            return _known_failure(message[offset : offset + n].decode("utf-8", "replace"))
        if status != _OK or n != count:
            return FAILED
        results = []
        for _ in range(count):
            (ndim,) = struct.unpack_from("<q", message, offset)
            if not 0 <= ndim <= MOST_DIMENSIONS:
                return FAILED
            shape = struct.unpack_from(f"<{ndim}q", message, offset + 8)
            offset += 8 + 8 * ndim
            size = int(np.prod(shape, dtype=np.int64)) if ndim else 1
            if min(shape, default=0) < 0 or offset + 8 * size > len(message):
                return FAILED
            values = np.frombuffer(message, dtype="<f8", count=size, offset=offset).reshape(shape).astype(np.float64)
            offset += 8 * size
            if not np.isfinite(values).all():
                return FAILED
            results.append(values)
    except (struct.error, ValueError):
        return FAILED
    if offset != len(message):
        return FAILED
    return results
