"""Issue 42, item 3: a process forked while another thread is inside a charged operation can charge.

Before the fix 22 of 25 children hung: the ledger's lock was inherited held by a thread the child does
not have. A fork now waits for the operations under way (the child's copy of the ledger is then whole)
and the child's lock is free; the child's noise is drawn afresh.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck import WindowLedger

_CHILD_SECONDS = 30.0  # a generous bound for a child's one charge on a loaded machine (it hangs forever if broken)


def _fork() -> int:
    """os.fork from a process with threads (Python 3.12+ warns that the child may deadlock: that is the test)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _wait(pid: int) -> int | None:
    """The child's exit status, or None (after killing it) if it did not exit within _CHILD_SECONDS."""
    deadline = time.monotonic() + _CHILD_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _hammer(ledger: WindowLedger, stop: threading.Event, errors: list[BaseException]) -> None:
    """Spends at the ledger's latest timestamp or the next, as fast as the lock lets it, until stopped."""
    amounts = np.linspace(1e-9, 1e-8, ledger.runs)
    try:
        while not stop.is_set():
            try:
                ledger.spend(ledger.t + 1, amounts, purpose="thread")
            except bc.TimestampOrder:  # another thread moved the clock between the read and the spend
                pass
    except BaseException as exc:  # reported by the test
        errors.append(exc)


@pytest.mark.parametrize("runs", [1, 4])
def test_children_forked_while_threads_charge_can_charge(runs: int) -> None:
    """25 forks while 3 threads spend: every child charges once more and exits 0."""
    ledger = WindowLedger(epsilon=1e9, w=8, runs=runs, keep_records=True)
    stop, errors = threading.Event(), []
    threads = [threading.Thread(target=_hammer, args=(ledger, stop, errors)) for _ in range(3)]
    for thread in threads:
        thread.start()
    statuses = []
    try:
        while ledger.t < 20:  # the threads are under way
            time.sleep(0.001)
        for _ in range(25):
            pid = _fork()
            if pid == 0:  # the child: one charge, then its verdict as exit status
                code = 1
                try:
                    before = len(ledger.records)
                    ledger.spend(ledger.t + 1, np.full(runs, 1e-6), purpose="child")
                    sums_agree = ledger.window_sum(ledger.t) == _sum_of_records(ledger)
                    code = 0 if len(ledger.records) == before + 1 and sums_agree else 2
                finally:
                    os._exit(code)
            statuses.append(_wait(pid))
            if statuses[-1] is None:  # hung: the others would too
                break
            time.sleep(0.002)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors, errors
    assert statuses == [0] * 25, statuses


def _sum_of_records(ledger: WindowLedger) -> tuple[int, ...]:
    """The window sum at the latest t recomputed from the records (exact units), to compare with the ledger's."""
    from budgetcheck import rounding

    t, w = ledger.t, ledger.w
    totals = [0] * ledger.runs
    for record in ledger.records:
        if t - w < record.t <= t:
            for run, value in enumerate(np.broadcast_to(record.amounts, (ledger.runs,)).tolist()):
                totals[run] += rounding.to_units(value)
    return tuple(totals)


def test_a_child_draws_noise_of_its_own() -> None:
    """Parent and child release the same counts after the fork: their noise differs (redrawn in the child)."""
    ledger = WindowLedger(epsilon=1.0, w=2, runs=1)
    stream = bc.GuardedStream(np.zeros((2, 16)))
    ledger.bind(stream)
    ledger.laplace(stream.secret(1), 1e-3)
    read_end, write_end = os.pipe()
    pid = _fork()
    if pid == 0:
        try:
            os.write(write_end, ledger.laplace(stream.secret(2), 1e-3).tobytes())
        finally:
            os._exit(0)
    os.close(write_end)
    child = np.frombuffer(os.read(read_end, 1 << 16), dtype=np.float64)
    os.close(read_end)
    assert _wait(pid) == 0
    mine = ledger.laplace(stream.secret(2), 1e-3).reshape(-1)
    assert child.shape == mine.shape == (16,)
    assert not np.array_equal(child, mine)


def test_a_ledger_still_busy_after_the_wait_is_refused_in_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread inside an operation that does not finish while the fork waits: the child refuses that ledger
    cleanly (LedgerCorrupt) instead of waiting forever or charging on a half-made copy."""
    from budgetcheck.ledger import core

    monkeypatch.setattr(core, "_FORK_WAIT", 0.05)
    ledger = WindowLedger(epsilon=1.0, w=4, runs=2, trusted_code=True, allow_vouched=True)
    stream = bc.GuardedStream(np.ones((3, 2)))
    ledger.bind(stream)
    inside, release = threading.Event(), threading.Event()

    def slow(values: np.ndarray) -> float:
        inside.set()
        release.wait(_CHILD_SECONDS)
        return float(values.sum())

    options = {"sensitivity": 2.0, "epsilon": 0.5, "isolation": "trusted"}
    worker = threading.Thread(target=ledger.measure, args=(slow, stream.secret(1)), kwargs=options)
    worker.start()
    try:
        assert inside.wait(_CHILD_SECONDS)
        pid = _fork()
        if pid == 0:
            code = 3
            try:
                ledger.spend(2, 0.25, purpose="child")
            except bc.LedgerCorrupt as exc:
                code = 0 if "forked while another thread was inside an operation" in str(exc) else 4
            finally:
                os._exit(code)
        status = _wait(pid)
    finally:
        release.set()
        worker.join()
    assert status == 0
    ledger.spend(2, 0.25, purpose="parent")  # the parent's ledger is whole and free
    assert ledger.remaining(2).tolist() == [0.25, 0.25]
