"""A stream read by a ledger it was never bound to: the first charged read binds it with ``bind``'s checks.

Attacks from a newcomer who skips ``ledger.bind(stream)``: non-integer counts on the default discrete
sampler (before, the charge passed and the sampler then failed with an AssertionError: spent, nothing
released, a traceback), a stacked stream on a ledger whose runs it does not divide, a second ledger
after the first read. Every refusal comes before the charge: the window, the records and the noise
are those of a ledger that never tried.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest

from budgetcheck import GuardedStream, InvalidArgument, SecretAccess, WEventParams, WindowLedger
from budgetcheck.stream.secret import Secret

FRACTIONS = np.array([[0.5, 1.25], [2.0, 3.0], [4.0, 1.0]])
OPERATIONS: dict[str, Callable[[WindowLedger, Secret], object]] = {
    "laplace": lambda ledger, secret: ledger.laplace(secret, 0.5),
    "laplace many runs": lambda ledger, secret: ledger.laplace(secret, np.array([0.5, 0.25])),
    "dissimilarity": lambda ledger, secret: ledger.dissimilarity(secret, np.zeros((ledger.runs, 2)), 0.5),
    "measure": lambda ledger, secret: ledger.measure(np.sum, secret, sensitivity=1.0, epsilon=0.5),
    "laplace_series": lambda ledger, secret: ledger.laplace_series([secret], [0.5]),
}


def _ledger(runs: int = 1, sampler: str = "discrete-laplace") -> WindowLedger:
    return WindowLedger(
        WEventParams(1.0, 2),
        runs=runs,
        seed=3,
        sampler=sampler,
        keep_records=True,
        trusted_code=True,
        allow_vouched=True,
    )


@pytest.mark.parametrize("name", list(OPERATIONS))
@pytest.mark.parametrize(
    "t", [1, 2]
)  # an integral row of a stream that is not: refused alike (bind's check is per stream)
def test_non_integer_counts_never_bound_are_refused_before_the_charge(name: str, t: int) -> None:
    runs = 2 if name == "laplace many runs" else 1
    ledger = _ledger(runs)
    stream = GuardedStream(FRACTIONS)
    with pytest.raises(InvalidArgument, match="not integers.*numpy-laplace"):
        OPERATIONS[name](ledger, stream.secret(t))
    assert not ledger.records and np.array_equal(ledger.remaining(3), np.ones(runs))
    # the ledger goes on as one that never tried (the discrete sampler's noise comes from the OS: not compared)
    assert ledger.laplace(GuardedStream(np.round(FRACTIONS)).secret(3), 0.5).shape == (runs, 2)
    assert len(ledger.records) == 1 and np.array_equal(ledger.remaining(3), np.full(runs, 0.5))


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_the_same_stream_on_numpy_laplace_is_bound_by_its_first_read(name: str) -> None:
    runs = 2 if name == "laplace many runs" else 1
    ledger = _ledger(runs, sampler="numpy-laplace")
    stream = GuardedStream(FRACTIONS)
    OPERATIONS[name](ledger, stream.secret(1))
    assert len(ledger.records) == 1
    with pytest.raises(SecretAccess):  # bound by that read: a second ledger would hide its spends
        _ledger(runs, sampler="numpy-laplace").laplace(stream.secret(2), 0.5)
    with pytest.raises(SecretAccess):
        _ledger(runs, sampler="numpy-laplace").bind(stream)


def test_integer_counts_never_bound_are_read_and_bound_on_the_discrete_sampler() -> None:
    ledger, stream = _ledger(), GuardedStream(np.round(FRACTIONS))
    released = ledger.laplace(stream.secret(1), 0.5)
    assert released.shape == (1, 2) and np.array_equal(released, np.round(released))
    with pytest.raises(SecretAccess):
        _ledger().laplace(stream.secret(2), 0.5)


def test_a_stacked_stream_never_bound_is_refused_by_a_ledger_whose_runs_it_does_not_divide() -> None:
    stream = GuardedStream.stacked([FRACTIONS, FRACTIONS + 1])
    ledger = _ledger(runs=3, sampler="numpy-laplace")
    with pytest.raises(InvalidArgument, match="multiple of 2"):
        ledger.laplace(stream.secret(1), 0.5)
    assert not ledger.records and np.array_equal(ledger.remaining(3), np.ones(3))
    # nothing drawn: the next release equals that of a ledger that never tried
    twin = _ledger(runs=3, sampler="numpy-laplace")
    plain, twin_plain = GuardedStream(FRACTIONS), GuardedStream(FRACTIONS)
    assert np.array_equal(ledger.laplace(plain.secret(2), 0.5), twin.laplace(twin_plain.secret(2), 0.5))
    assert _ledger(runs=4, sampler="numpy-laplace").laplace(stream.secret(1), 0.5).shape == (4, 2)


def test_a_secret_that_outlived_its_stream_is_checked_as_its_stream_was() -> None:
    """``ledger.laplace(GuardedStream(data).secret(1), ε)``: the stream is gone before the read; its
    secrets still carry what binding checks."""
    ledger = _ledger()
    secret = GuardedStream(FRACTIONS).secret(2)  # row 2 is integral; the stream is not
    gc.collect()
    with pytest.raises(InvalidArgument, match="not integers"):
        ledger.laplace(secret, 0.5)
    assert not ledger.records and np.array_equal(ledger.remaining(3), np.ones(1))
    stacked = GuardedStream.stacked([np.round(FRACTIONS), np.round(FRACTIONS)]).secret(1)
    gc.collect()
    with pytest.raises(InvalidArgument, match="multiple of 2"):
        _ledger(runs=3).laplace(stacked, 0.5)
