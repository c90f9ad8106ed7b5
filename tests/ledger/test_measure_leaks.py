"""A measured function cannot carry the data out in a failure (verify issue, class 4; issue 43): whatever
it does, the call gives the declared default answer, noised like any other, and raises nothing — so there
is no message, argument, cause, context or traceback frame to carry it, and not even the fact that it
failed reaches the mechanism's call (it is recorded in ``ledger.failures`` for the ledger's owner)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import budgetcheck as bc

SECRET_VALUE = 987654.0  # what the true stream holds and an attacker tries to read back


def _holds_the_data(value: Any, depth: int = 0) -> bool:
    if depth > 3:
        return False
    if isinstance(value, np.ndarray):
        return value.dtype.kind == "f" and bool((value == SECRET_VALUE).any())
    if isinstance(value, (list, tuple)):
        return any(_holds_the_data(v, depth + 1) for v in value)
    if isinstance(value, float):
        return value == SECRET_VALUE
    return isinstance(value, str) and "987654" in value


def _raising_with_the_data(values: np.ndarray) -> float:
    raise ValueError(values.copy(), f"leaked {values.tolist()}")


def _returning_nan_with_the_data(values: np.ndarray) -> np.ndarray:
    return np.concatenate([[np.nan], values.ravel()])


class _Exit(BaseException):
    pass


def _raising_a_base_exception(values: np.ndarray) -> float:
    raise _Exit(values.copy())


@pytest.mark.parametrize("fn", [_raising_with_the_data, _returning_nan_with_the_data, _raising_a_base_exception])
@pytest.mark.parametrize("operation", ["measure", "measure_footprint", "stacked"])
def test_nothing_of_the_data_leaves_with_a_failed_measurement(fn: Any, operation: str) -> None:
    data = np.array([[SECRET_VALUE, 3.0], [SECRET_VALUE, 5.0]])
    ledger = bc.WindowLedger(
        epsilon=1.0,
        w=2,
        runs=2 if operation == "stacked" else 1,
        sampler="numpy-laplace",
        trusted_code=True,
        allow_vouched=True,
    )
    stream = bc.GuardedStream.stacked([data, data]) if operation == "stacked" else bc.GuardedStream(data)
    ledger.bind(stream)
    first = next(iter(stream))
    if operation == "measure_footprint":
        out = ledger.measure_footprint(fn, [first], sensitivity=1.0, epsilon=0.5, default=-1.0)
    else:
        out = ledger.measure(fn, first, sensitivity=1.0, epsilon=0.5, default=-1.0)
    assert out.shape == (ledger.runs,) and np.abs(out + 1.0).max() < 200.0  # the default, noised at scale 2
    assert not _holds_the_data(out) and not _holds_the_data(list(ledger.failures))
    (failure,) = ledger.failures
    assert (
        failure.t == 1
        and "987654" not in failure.reason
        and failure.operation == operation.replace("stacked", "measure")
    )
    assert ledger.t == 1  # the charge stands: the data was read


def test_a_working_measurement_is_unchanged() -> None:
    ledger = bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", seed=3, trusted_code=True, allow_vouched=True)
    stream = bc.GuardedStream(np.array([[4.0, 6.0]]))
    ledger.bind(stream)
    (secret,) = stream
    out = ledger.measure(lambda v: v.mean(), secret, sensitivity=1.0, epsilon=0.5)
    expected = 5.0 + np.random.default_rng(3).laplace(0.0, 2.0, (1,))
    np.testing.assert_allclose(out, expected)


def _failing_in_every_way(count: int, may_exit: bool) -> Any:
    """fn that picks, from the data, how to fail: an exception class, an exit status, a wrong shape, a NaN,
    a made-up SecretAccess. Any of these told apart would carry log2(choices) bits per call, unnoised."""
    import os

    def fn(values: np.ndarray) -> Any:
        kind = int(values[0]) % count
        if kind == 0:
            raise ZeroDivisionError
        if kind == 1:
            raise KeyError("k")
        if kind == 2 and may_exit:  # in a forked child only: in-process it would end the test run
            os._exit(int(values[0]) % 256)
        if kind == 2:
            raise SystemExit(int(values[0]))
        if kind == 3:
            return np.zeros(int(values[0]))  # a shape that is the count
        if kind == 4:
            return np.nan
        raise bc.SecretAccess(f"made up at t={int(values[0])}")

    return fn


@pytest.mark.parametrize("isolation", ["fork", "trusted"])
@pytest.mark.parametrize("operation", ["measure", "measure_footprint"])
def test_every_way_fn_can_fail_reads_the_same(isolation: str, operation: str) -> None:
    """Whatever fn does on the data, the call gives the same release (the default, with the same seeded noise)
    and one recorded reason, and the charge stands."""
    releases, reasons = set(), set()
    for value in range(6):
        stream = bc.GuardedStream(np.array([[float(value), 1.0]]))
        ledger = bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
        ledger.bind(stream)
        (secret,) = stream
        if operation == "measure":
            out = ledger.measure(
                _failing_in_every_way(6, isolation == "fork"),
                secret,
                sensitivity=1.0,
                epsilon=0.5,
                isolation=isolation,
            )
        else:
            out = ledger.measure_footprint(
                _failing_in_every_way(6, isolation == "fork"),
                [secret],
                sensitivity=1.0,
                epsilon=0.5,
                isolation=isolation,
            )
        releases.add(out.tobytes())
        reasons.update(failure.reason for failure in ledger.failures)
        assert ledger.t == 1 and len(ledger.failures) == 1
    assert len(releases) == 1 and len(reasons) == 1, (releases, reasons)


def test_the_release_has_the_declared_shape_whatever_the_data() -> None:
    """The shape is declared before the data is read: fn's result must have it, else the default of that shape;
    a declared shape is what comes back, (runs, *shape)."""
    stream = bc.GuardedStream(np.array([[5.0, 7.0], [6.0, 7.0]]))
    ledger = bc.WindowLedger(epsilon=1.0, w=2, runs=3, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    first, second = stream
    assert ledger.measure(np.cumsum, first, sensitivity=2.0, epsilon=0.25, shape=(2,)).shape == (3, 2)
    assert ledger.measure(np.cumsum, second, sensitivity=2.0, epsilon=0.25, shape=2).shape == (3, 2)
    wrong = ledger.measure(np.cumsum, second, sensitivity=2.0, epsilon=0.25, shape=(1, 2), default=[[-50.0, 50.0]])
    assert wrong.shape == (3, 1, 2) and (wrong[..., 0] < 0).all() and (wrong[..., 1] > 0).all()  # (2,) is not (1, 2)
    assert ledger.measure(np.cumsum, second, sensitivity=2.0, epsilon=0.25).shape == (3,)  # () by default
    assert len(ledger.failures) == 2


@pytest.mark.parametrize("shape", [(-1,), (2.0,), "2", None, True, (1,) * 33, (1 << 30,)])
def test_a_bad_declared_shape_is_refused_before_the_charge(shape: Any) -> None:
    stream = bc.GuardedStream(np.array([[5.0, 7.0]]))
    ledger = bc.WindowLedger(epsilon=1.0, w=2, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)
    (secret,) = stream
    with pytest.raises(bc.InvalidArgument, match=r"shape="):
        ledger.measure(np.sum, secret, sensitivity=1.0, epsilon=0.5, shape=shape)
    with pytest.raises(bc.InvalidArgument, match=r"shape="):
        ledger.measure_footprint(np.sum, [secret], sensitivity=1.0, epsilon=0.5, shape=shape)
    assert ledger.t == 0 and ledger.remaining(1).tolist() == [1.0]


class _Escaping(Exception):
    """An error built to get out of measure with a type of fn's choosing: asking its class raises."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # type: ignore[override]
        raise LookupError("the count, spelled as a type")


@pytest.mark.parametrize("isolation", ["fork", "trusted"])
def test_an_error_whose_class_raises_is_one_more_failure(isolation: str) -> None:
    """failure_kind asks the exception what it is; an error whose ``__class__`` raises must not leave with the
    error it raises instead (in-process, its type and message were fn's choice after reading the data)."""
    stream = bc.GuardedStream(np.array([[3.0]]))
    ledger = bc.WindowLedger(epsilon=1.0, w=1, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    ledger.bind(stream)

    def fn(values: np.ndarray) -> float:
        raise _Escaping(str(values))

    out = ledger.measure(fn, next(iter(stream)), sensitivity=1.0, epsilon=0.5, isolation=isolation)
    assert out.shape == (1,) and len(ledger.failures) == 1 and "3.0" not in ledger.failures[0].reason
