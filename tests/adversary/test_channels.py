"""Outside attacks on a measured function's channels out of its process (issue 43, item 1).

Each attack is a mechanism written against the public API only: it hands ``measure`` a function that
sends the true value (``SECRET``, in one bin) out by a route other than its noisy answer, and then
tries to read it back in the mechanism's own process, exactly. Before the sandbox (a plain forked child)
every one of them recovered ``SECRET`` exactly; with the predictable transaction (seccomp, no inherited
descriptor or shared mapping, the declared default answer for any failure, the return held to a
deadline) none does:

==========================  ==========================================  ===========  ==========
attack                      route                                        before       after
==========================  ==========================================  ===========  ==========
file                        fn writes the value to a file                exact value  closed
inherited descriptor        fn writes to a pipe the mechanism opened     exact value  closed
socket                      fn sends a UDP datagram to the mechanism     exact value  closed
shared memory (named)       fn attaches a SharedMemory by name           exact value  closed
shared memory (inherited)   fn writes a SharedMemory mapped before fork  exact value  closed
mmap before fork            fn writes an anonymous shared mmap           exact value  closed
page cache                  fn reads pages of a file mapped before fork  exact value  closed
signal                      fn sends one real-time signal per set bit    exact value  closed
child process               a grandchild of fn lives on and reports      exact value  closed
failure bit                 fn fails or not on each of 20 bits           exact value  closed
running time                fn sleeps or not on each of 20 bits (x3)     exact value  closed
exit signal                 fn's process ends early or not (SIGCHLD)     exact value  closed
==========================  ==========================================  ===========  ==========

The running time is also measured as a channel: the mechanism's own timer (``perf_counter_ns`` around
the call) on two neighbouring inputs, one of which makes fn sleep, must not separate them (see
``test_the_mechanisms_timer_cannot_tell_neighbours_apart`` for the bound).
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

SECRET = 987654  # the true count in bin 0; 20 bits
BITS = 20


def _ledger(data: Any = None) -> tuple[bc.WindowLedger, list[bc.Secret]]:
    stream = bc.GuardedStream(np.array([[float(SECRET), 1.0]] * 3 * BITS) if data is None else data)
    ledger = bc.WindowLedger(epsilon=1e6, w=3 * BITS, sampler="numpy-laplace", allow_vouched=True, trusted_code=True)
    ledger.bind(stream)
    return ledger, list(stream)


def _measure(ledger: bc.WindowLedger, fn: Callable[[np.ndarray], Any], secret: bc.Secret) -> Any:
    """One call as a mechanism makes it (today's API: no deadline or default declared)."""
    try:
        return ledger.measure(fn, secret, sensitivity=1.0, epsilon=1e3)
    except bc.MeasurementFailed:
        return None


# --- attacks through the operating system --------------------------------------------------------------


def _file(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    target = tmp_path / "kept.txt"

    def fn(v: np.ndarray) -> float:
        target.write_text(str(int(v[0])))
        return 0.0

    _measure(ledger, fn, secrets[0])
    return int(target.read_text()) if target.exists() else None


def _inherited_descriptor(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)

    def fn(v: np.ndarray) -> float:
        os.write(write_end, struct.pack("<q", int(v[0])))
        return 0.0

    try:
        _measure(ledger, fn, secrets[0])
        try:
            data = os.read(read_end, 8)
        except BlockingIOError:
            return None
        return struct.unpack("<q", data)[0] if len(data) == 8 else None
    finally:
        os.close(read_end)
        os.close(write_end)


def _socket(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as server:
        server.bind(("127.0.0.1", 0))
        server.settimeout(0.5)
        address = server.getsockname()

        def fn(v: np.ndarray) -> float:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
                client.sendto(struct.pack("<q", int(v[0])), address)
            return 0.0

        _measure(ledger, fn, secrets[0])
        try:
            return int(struct.unpack("<q", server.recv(8))[0])
        except (TimeoutError, OSError):
            return None


def _shared_memory_by_name(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    block = shared_memory.SharedMemory(create=True, size=8)
    name = block.name
    block.close()  # not mapped here: fn must attach it by name
    try:

        def fn(v: np.ndarray) -> float:
            attached = shared_memory.SharedMemory(name=name)
            assert attached.buf is not None
            attached.buf[:8] = struct.pack("<q", int(v[0]))
            attached.close()
            return 0.0

        _measure(ledger, fn, secrets[0])
        reader = shared_memory.SharedMemory(name=name)
        assert reader.buf is not None
        value = struct.unpack("<q", bytes(reader.buf[:8]))[0]
        reader.close()
        return int(value) or None
    finally:
        cleanup = shared_memory.SharedMemory(name=name)
        cleanup.close()
        cleanup.unlink()


def _shared_memory_inherited(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    block = shared_memory.SharedMemory(create=True, size=8)
    mapped = block.buf  # mapped here, before the fork
    assert mapped is not None
    try:

        def fn(v: np.ndarray) -> float:
            mapped[:8] = struct.pack("<q", int(v[0]))
            return 0.0

        _measure(ledger, fn, secrets[0])
        return int(struct.unpack("<q", bytes(mapped[:8]))[0]) or None
    finally:
        block.close()
        block.unlink()


def _mmap_before_fork(tmp_path: Path) -> int | None:
    ledger, secrets = _ledger()
    shared = mmap.mmap(-1, 8)  # anonymous, MAP_SHARED: the forked child writes the same pages

    def fn(v: np.ndarray) -> float:
        shared[:8] = struct.pack("<q", int(v[0]))
        return 0.0

    _measure(ledger, fn, secrets[0])
    return int(struct.unpack("<q", shared[:8])[0]) or None


def _page_cache(tmp_path: Path) -> int | None:
    """A file mapped before the fork, evicted from the page cache: fn reads page k exactly when bit k is set,
    and the mechanism asks the kernel (mincore) which of its pages are resident now."""
    import ctypes

    spacing = mmap.PAGESIZE * 64  # beyond read-ahead and fault-around
    path = tmp_path / "cold.bin"
    path.write_bytes(os.urandom(spacing * BITS))
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        mapped = mmap.mmap(fd, spacing * BITS, flags=mmap.MAP_PRIVATE)
    finally:
        os.close(fd)
    mapped.madvise(mmap.MADV_RANDOM)
    ledger, secrets = _ledger()

    def fn(v: np.ndarray) -> float:
        return float(sum(mapped[bit * spacing] for bit in range(BITS) if int(v[0]) >> bit & 1))

    _measure(ledger, fn, secrets[0])
    resident = (ctypes.c_ubyte * (spacing * BITS // mmap.PAGESIZE))()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    anchor = ctypes.c_char.from_buffer(mapped)
    if libc.mincore(ctypes.addressof(anchor), spacing * BITS, resident) != 0:
        return None
    del anchor
    return sum(1 << bit for bit in range(BITS) if resident[bit * 64] & 1) or None


def _signal(tmp_path: Path) -> int | None:
    """One real-time signal (they queue, one per number) per set bit of the value, to the mechanism."""
    ledger, secrets = _ledger()
    received: set[int] = set()
    numbers = [signal.SIGRTMIN + i for i in range(BITS)]
    previous = {n: signal.signal(n, lambda number, frame: received.add(number - signal.SIGRTMIN)) for n in numbers}
    try:

        def fn(v: np.ndarray) -> float:
            for bit in range(BITS):
                if int(v[0]) >> bit & 1:
                    os.kill(os.getppid(), signal.SIGRTMIN + bit)
            return 0.0

        _measure(ledger, fn, secrets[0])
        time.sleep(0.2)  # the handlers run in this thread at the next bytecode
        return sum(1 << bit for bit in received) or None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _child_process(tmp_path: Path) -> int | None:
    """fn forks a grandchild that outlives the call and reports the value over a pipe fn creates."""
    ledger, secrets = _ledger()
    report = tmp_path / "report"
    os.mkfifo(report)
    box: list[bytes] = []

    def listen() -> None:
        with open(report, "rb") as fifo:  # the mechanism's own process waits for the grandchild
            box.append(fifo.read(8))

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()

    def fn(v: np.ndarray) -> float:
        value = int(v[0])
        if os.fork() == 0:
            try:
                time.sleep(0.05)
                with open(report, "wb") as fifo:
                    fifo.write(struct.pack("<q", value))
            finally:
                os._exit(0)
        return 0.0

    _measure(ledger, fn, secrets[0])
    listener.join(timeout=1.0)
    if listener.is_alive():  # unblock the listener: open the fifo for writing once, empty
        with open(report, "wb"):
            pass
        listener.join(timeout=1.0)
    return int(struct.unpack("<q", box[0])[0]) if box and len(box[0]) == 8 else None


# --- attacks through what the call itself shows --------------------------------------------------------


def _failure_bit(tmp_path: Path) -> int | None:
    """20 calls at ε = 1e-3 each: fn fails exactly when bit k of the value is set."""
    ledger, secrets = _ledger()
    value = 0
    for bit in range(BITS):

        def fn(v: np.ndarray, bit: int = bit) -> float:
            if int(v[0]) >> bit & 1:
                raise ValueError
            return 0.0

        try:
            ledger.measure(fn, secrets[bit], sensitivity=1.0, epsilon=1e-3)
        except bc.MeasurementFailed:
            value |= 1 << bit
    return value


def _running_time(tmp_path: Path) -> int | None:
    """60 calls: fn sleeps 100 ms exactly when bit k of the value is set; the mechanism times three calls per
    bit and keeps the median (a loaded machine's fork time varies by tens of milliseconds)."""
    warm, warm_secrets = _ledger()
    _measure(warm, np.sum, warm_secrets[0])  # a ledger's first charge compiles its kernels: not part of a call
    ledger, secrets = _ledger()
    times = []
    for bit in range(BITS):

        def fn(v: np.ndarray, bit: int = bit) -> float:
            if int(v[0]) >> bit & 1:
                time.sleep(0.1)
            return 0.0

        took = []
        for repeat in range(3):
            start = time.perf_counter_ns()
            _measure(ledger, fn, secrets[3 * bit + repeat])
            took.append(time.perf_counter_ns() - start)
        times.append(float(np.median(took)))
    cut = (min(times) + max(times)) / 2  # the two clusters' midpoint
    return sum(1 << bit for bit, took in enumerate(times) if took > cut)


def _exit_signal(tmp_path: Path) -> int | None:
    """20 calls: fn ends its process at once exactly when bit k is set; a SIGCHLD handler notes when."""
    warm, warm_secrets = _ledger()
    _measure(warm, np.sum, warm_secrets[0])  # a ledger's first charge compiles its kernels: not part of a call
    ledger, secrets = _ledger()
    heard: list[int] = []
    previous = signal.signal(signal.SIGCHLD, lambda number, frame: heard.append(time.perf_counter_ns()))
    delays = []
    try:
        for bit in range(BITS):

            def fn(v: np.ndarray, bit: int = bit) -> float:
                if int(v[0]) >> bit & 1:
                    os._exit(0)
                time.sleep(0.1)
                return 0.0

            heard.clear()
            start = time.perf_counter_ns()
            _measure(ledger, fn, secrets[bit])
            time.sleep(0.02)  # a handler runs at the next bytecode after the signal
            delays.append(heard[0] - start if heard else 0)
    finally:
        signal.signal(signal.SIGCHLD, previous)
    cut = (min(delays) + max(delays)) / 2
    return sum(1 << bit for bit, took in enumerate(delays) if took < cut)


ATTACKS = [
    _file,
    _inherited_descriptor,
    _socket,
    _shared_memory_by_name,
    _shared_memory_inherited,
    _mmap_before_fork,
    _page_cache,
    _signal,
    _child_process,
    _failure_bit,
    _running_time,
    _exit_signal,
]


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.__name__.strip("_"))
def test_no_channel_out_of_a_measured_function_carries_the_true_value(
    attack: Callable[[Path], int | None], tmp_path: Path
) -> None:
    """Before the sandbox each attack printed SECRET here; now what it reads back is not the value."""
    recovered = attack(tmp_path)
    assert recovered != SECRET, f"{attack.__name__} recovered the true value {recovered}"


def _timings(isolation: str, calls: int) -> tuple[list[int], list[int]]:
    """The mechanism's own timer around ``calls`` calls on each of two neighbouring streams (bin 0 holds 0 or
    1), interleaved so that the machine's load falls on both alike; fn sleeps 60 ms exactly on the second."""
    ledgers, secrets = [], []
    for value in (0.0, 1.0):
        ledger, stream_secrets = _ledger(np.array([[value, 1.0]] * calls))
        ledgers.append(ledger)
        secrets.append(stream_secrets)

    def fn(v: np.ndarray) -> float:
        if v[0] > 0.5:
            time.sleep(0.06)
        return 0.0

    times: tuple[list[int], list[int]] = ([], [])
    for t in range(calls):
        for side in (0, 1):
            start = time.perf_counter_ns()
            ledgers[side].measure(fn, secrets[side][t], sensitivity=1.0, epsilon=1e-3, isolation=isolation)
            times[side].append(time.perf_counter_ns() - start)
    return times


def _separation(first: list[int], second: list[int]) -> float:
    """The two-sample Kolmogorov–Smirnov distance: the best threshold classifier's balanced accuracy is (1 + it) / 2."""
    grid = np.sort(np.concatenate([first, second]))
    cdf = [np.searchsorted(np.sort(sample), grid, side="right") / len(sample) for sample in (first, second)]
    return float(np.abs(cdf[0] - cdf[1]).max())


def test_the_mechanisms_timer_cannot_tell_neighbours_apart() -> None:
    """The residual timing channel, measured: over 40 calls per neighbour the KS distance between the two
    distributions of the call's duration stays below 0.5, i.e. no threshold on the mechanism's own timer
    classifies better than 75 % (under no channel at all it exceeds 0.44 with probability 0.001 at this size,
    so the bound is generous for a loaded machine). Control: fn run in-process (no deadline), the same timer
    separates the neighbours perfectly, so the measurement would see the channel were it open."""
    held = _timings("fork", 40)
    assert _separation(*held) < 0.5, (np.median(held[0]), np.median(held[1]))
    assert min(min(held[0]), min(held[1])) >= 250_000_000  # both held to the default deadline of 0.25 s
    open_channel = _timings("trusted", 10)
    assert _separation(*open_channel) == 1.0


# --- what stays open (docs/explanation/predictable-transactions.md, "What is not closed") ---------------


def _failure_record(tmp_path: Path) -> int | None:
    """As ``_failure_bit``, but the mechanism reads the owner's record after each call."""
    ledger, secrets = _ledger()
    value = 0
    for bit in range(BITS):

        def fn(v: np.ndarray, bit: int = bit) -> float:
            if int(v[0]) >> bit & 1:
                raise ValueError
            return 0.0

        before = len(ledger.failures)
        ledger.measure(fn, secrets[bit], sensitivity=1.0, epsilon=1e-3)
        value |= (len(ledger.failures) > before) << bit
    return value


def _children_usage(tmp_path: Path) -> int | None:
    """fn burns 40 ms of CPU exactly when bit k is set; the mechanism reads RUSAGE_CHILDREN after each call."""
    import resource

    ledger, secrets = _ledger()
    used = []
    for bit in range(BITS):

        def fn(v: np.ndarray, bit: int = bit) -> float:
            if int(v[0]) >> bit & 1:
                end = time.thread_time() + 0.04
                while time.thread_time() < end:
                    pass
            return 0.0

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        _measure(ledger, fn, secrets[bit])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    cut = (min(used) + max(used)) / 2  # the two clusters' midpoint
    return sum(1 << bit for bit, took in enumerate(used) if took > cut)


@pytest.mark.xfail(strict=True, reason="open: ledger.failures and RUSAGE_CHILDREN are readable by the mechanism")
@pytest.mark.parametrize("attack", [_failure_record, _children_usage], ids=lambda a: a.__name__.strip("_"))
def test_what_a_process_can_still_observe_of_the_child(attack: Callable[[Path], int | None], tmp_path: Path) -> None:
    """The two residual channels the documentation names, shown end to end: each recovers the true value."""
    recovered = attack(tmp_path)
    assert recovered != SECRET, f"{attack.__name__} recovered the true value {recovered}"
