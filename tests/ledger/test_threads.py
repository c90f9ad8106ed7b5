"""Threads sharing one ledger never overspend: a check and its commit are one step.

A live publisher serving requests from a thread pool shares its ledger between threads. Without a
lock, two threads could both pass the window check before either committed (a window of 1.2 and
1.5 with ε = 1 was seen, and an IndexError inside the exact sums). Here many threads race to spend
at one timestamp with the interpreter switching threads as often as it can: exactly as many spends
are accepted as fit, the window holds at most ε exactly, and every refusal is a BudgetExceeded.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np
import pytest

from budgetcheck import BudgetExceeded, GuardedStream, PersonalizedLedger, RequirementSet, WindowLedger

THREADS, ATTEMPTS = 8, 12


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _race(attempt: Callable[[int], None]) -> tuple[int, int, list[BaseException]]:
    """Every thread calls ``attempt(k)`` ATTEMPTS times at once; (accepted, refused, other errors)."""
    accepted, refused, errors = [0], [0], []
    start = threading.Barrier(THREADS)
    count = threading.Lock()

    def worker(k: int) -> None:
        start.wait()
        for _ in range(ATTEMPTS):
            try:
                attempt(k)
            except BudgetExceeded:
                with count:
                    refused[0] += 1
            except BaseException as exc:  # noqa: BLE001 - any other error is a finding
                with count:
                    errors.append(exc)
            else:
                with count:
                    accepted[0] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return accepted[0], refused[0], errors


@pytest.mark.parametrize("runs", [1, 2])
@pytest.mark.parametrize("operation", ["spend", "laplace", "dissimilarity"])
def test_racing_threads_fill_a_window_exactly_and_no_further(operation: str, runs: int) -> None:
    amount = 0.3  # three fit in ε = 1, a fourth does not
    ledger = WindowLedger(epsilon=1.0, w=2, runs=runs, seed=1, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.full((4, 3), 5.0))
    ledger.bind(stream)
    last = np.zeros((runs, 3))

    def attempt(k: int) -> None:
        if operation == "spend":
            ledger.spend(1, amount, purpose="reservation")
        elif operation == "laplace":
            ledger.laplace(stream.secret(1), amount)
        else:
            ledger.dissimilarity(stream.secret(1), last, amount)

    accepted, refused, errors = _race(attempt)
    assert errors == []
    assert accepted == 3 and refused == THREADS * ATTEMPTS - 3
    spent = sum((Fraction(float(r.amounts[0])) for r in ledger.records), Fraction(0))
    assert spent == 3 * Fraction(amount) <= 1
    assert all(len(r.amounts) == runs for r in ledger.records)
    left = ledger.remaining(1)
    assert (left >= 0).all() and (left <= float(1 - spent)).all()  # rounded down from the exact rest


def test_a_reader_never_sees_half_an_operation() -> None:
    """remaining() read while other threads spend is always one of the committed states."""
    ledger = WindowLedger(epsilon=1.0, w=4, runs=1, seed=1, sampler="numpy-laplace")
    amounts = 0.125
    seen: list[float] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(float(ledger.remaining(1)[0]))

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        accepted, _, errors = _race(lambda k: ledger.spend(1, amounts, purpose="reservation"))
    finally:
        done.set()
        watcher.join()
    assert errors == [] and accepted == 8
    assert set(seen) <= {1.0 - k * amounts for k in range(9)}


def test_personalized_classes_are_charged_one_thread_at_a_time() -> None:
    requirements = RequirementSet.from_counts([((2, 1.0), 3), ((3, 2.0), 2)])
    ledger = PersonalizedLedger(requirements, runs=1, seed=0, sampler="numpy-laplace")
    accepted, refused, errors = _race(lambda k: ledger.spend(1, [0.3, 0.6], purpose="reservation"))
    assert errors == []
    assert accepted == 3 and refused == THREADS * ATTEMPTS - 3
    assert (ledger.remaining(1) >= 0).all()
