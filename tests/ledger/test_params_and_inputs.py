"""Bad inputs get a clear error naming the argument and the value, and lose nothing."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from budgetcheck import GuardedStream, InvalidArgument, TimestampOrder, WEventParams, WindowLedger


@pytest.mark.parametrize(
    ("epsilon", "w", "match"),
    [
        (0.0, 3, r"epsilon=0\.0 must be a finite number > 0"),
        (-0.5, 3, r"epsilon=-0\.5 must be a finite number > 0"),
        (math.nan, 3, r"epsilon=nan must be a finite number > 0"),
        (math.inf, 3, r"epsilon=inf must be a finite number > 0"),
        ("1", 3, r"epsilon='1' must be a finite number > 0, not str"),
        (True, 3, r"epsilon=True must be a finite number > 0"),
        (1.0, 0, r"w=0 must be an integer >= 1"),
        (1.0, -2, r"w=-2 must be an integer >= 1"),
        (1.0, 2.5, r"w=2\.5 must be an integer >= 1"),
        (1.0, 2.0, r"w=2\.0 must be an integer >= 1"),
        (1.0, True, r"w=True must be an integer >= 1"),
    ],
)
def test_bad_privacy_parameters_are_refused_by_name(epsilon: object, w: object, match: str) -> None:
    """Each bad (ε, w) raises InvalidArgument naming the argument and its value."""
    with pytest.raises(InvalidArgument, match=match):
        WEventParams(epsilon=epsilon, w=w)  # type: ignore[arg-type]


def test_params_are_frozen_values() -> None:
    """Parameters are immutable and compare by value."""
    params = WEventParams(epsilon=1, w=3)
    assert params == WEventParams(epsilon=1.0, w=3)
    assert isinstance(params.epsilon, float)
    with pytest.raises(AttributeError):
        params.w = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([[1.0, 2.0], [3.0]], r"data is ragged: row 2 has 1 values, row 1 has 2"),
        ([[1.0, math.nan]], r"data has nan at timestamp t=1, dimension 1"),
        ([[1.0], [math.inf]], r"data has inf at timestamp t=2, dimension 0"),
        ([], r"at least one timestamp"),
        (np.zeros((2, 2, 2)), r"shape \(T, d\)"),
        ([["a"]], r"numbers only"),
        (
            np.array([[1 + 1j, 2.0]]),
            r"data must hold real numbers only, got an array of complex128 \(first value \(1\+1j\)\)",
        ),
        ([[1.0, 2 + 0j]], r"data must hold real numbers only, got an array of complex128"),
        (np.array([["1", "2"]]), r"data must hold real numbers only, got an array of <U1"),
        ([[1.0, None]], r"data must hold real numbers only, got None \(NoneType\) at index \(0, 1\)"),
        (5, r"data must be a sequence of rows, got int"),
    ],
)
def test_bad_streams_are_refused(data: object, match: str) -> None:
    """Ragged, NaN, infinite, empty, 3-D and non-numeric streams raise InvalidArgument; complex values
    (an imaginary part, even 0j) and numeric strings are refused, never converted."""
    with pytest.raises(InvalidArgument, match=match):
        GuardedStream(data)  # type: ignore[arg-type]


def test_one_dimensional_stream_is_a_column() -> None:
    """A flat sequence is a stream with d = 1."""
    stream = GuardedStream([1, 2, 3])
    assert (stream.length, stream.dimensions) == (3, 1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"runs": 0}, r"runs=0 must be an integer >= 1"),
        ({"runs": 1.5}, r"runs=1\.5 must be an integer >= 1"),
        ({"seed": -1}, r"seed=-1 must be an integer >= 0"),
        ({"runs": 2**24 + 1}, r"runs=16777217 is more than the 16,777,216 runs \(2\^24\) one ledger holds"),
        ({"runs": 10**12}, r"runs=1000000000000 is more than"),
    ],
)
def test_bad_ledger_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        WindowLedger(WEventParams(1.0, 3), **kwargs, sampler="numpy-laplace", keep_records=True)  # type: ignore[arg-type]


def test_ledger_needs_params_type() -> None:
    with pytest.raises(InvalidArgument, match=r"params=\(1\.0, 3\) must be a WEventParams"):
        WindowLedger((1.0, 3), sampler="numpy-laplace", keep_records=True)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("amount", "match"),
    [
        (-0.1, r"epsilon\[0\]=-0\.1 must be a finite number >= 0"),
        (math.nan, r"epsilon\[0\]=nan must be a finite number >= 0"),
        (math.inf, r"epsilon\[0\]=inf must be a finite number >= 0"),
        ([0.1, 0.1, 0.1], r"epsilon has shape \(3,\); the ledger accounts for 2 runs"),
        ("x", r"epsilon='x' must be a finite number >= 0"),
    ],
)
def test_bad_amounts_leave_the_ledger_unchanged(amount: object, match: str) -> None:
    """A refused amount raises and the ledger keeps its records and remaining budget."""
    ledger = WindowLedger(WEventParams(1.0, 3), runs=2, sampler="numpy-laplace", keep_records=True)
    ledger.spend(1, 0.25, purpose="publication")
    before = (ledger.records, ledger.remaining(1).tolist(), ledger.t)
    with pytest.raises(InvalidArgument, match=match):
        ledger.spend(2, amount, purpose="publication")  # type: ignore[arg-type]
    assert (ledger.records, ledger.remaining(1).tolist(), ledger.t) == before


def test_timestamps_never_go_backwards() -> None:
    """A spend before the latest timestamp is refused and changes nothing."""
    ledger = WindowLedger(WEventParams(1.0, 3), sampler="numpy-laplace", keep_records=True)
    ledger.spend(5, 0.1, purpose="publication")
    with pytest.raises(TimestampOrder, match=r"t=4 is before the ledger's latest timestamp 5"):
        ledger.spend(4, 0.1, purpose="publication")
    with pytest.raises(InvalidArgument, match=r"t=0 must be an integer >= 1"):
        ledger.remaining(0)
    assert len(ledger.records) == 1


def test_empty_purpose_is_refused() -> None:
    ledger = WindowLedger(WEventParams(1.0, 3), sampler="numpy-laplace", keep_records=True)
    with pytest.raises(InvalidArgument, match=r"purpose='' must be a non-empty string"):
        ledger.spend(1, 0.1, purpose="")


def test_runs_the_machine_cannot_allocate_are_an_invalid_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the 2^24 bound runs is accepted; a ledger whose window arrays do not fit on the machine is refused
    naming runs, never a MemoryError."""
    import budgetcheck.ledger.wevent as wevent
    from budgetcheck.ledger.validation import check_runs

    assert check_runs(2**24) == 2**24

    def no_memory(*args: object) -> object:
        raise MemoryError

    monkeypatch.setattr(wevent, "Exposures", no_memory)
    with pytest.raises(
        InvalidArgument, match=r"runs=4 is more runs than this machine can hold window sums for \(w=3\)"
    ):
        WindowLedger(WEventParams(1.0, 3), runs=4)


@pytest.mark.parametrize(
    "epsilon", [Fraction(1, 3), 2**53 + 1, np.longdouble(1) / 3, Fraction(1, 10)], ids=["1/3", "2^53+1", "ld", "1/10"]
)
def test_an_epsilon_no_double_equals_is_refused_as_amounts_are(epsilon: object) -> None:
    """The ledger's ε was rounded to the nearest double, which can lie above it (Fraction(1, 10) does):
    then a window could hold more than the exact ε. It is refused, naming it, as such amounts are; an ε
    a double equals (Fraction(1, 4), 3, float32) is kept exactly."""
    for build in (
        lambda: WindowLedger(epsilon=epsilon, w=2),
        lambda: WindowLedger.with_epsilons([1.0, epsilon], 2),
        lambda: WEventParams(epsilon, 2),
    ):
        with pytest.raises(InvalidArgument, match="no double equals it"):
            build()
    assert WindowLedger(epsilon=Fraction(1, 4), w=2).epsilon == 0.25
    assert WindowLedger(epsilon=3, w=2).epsilon == 3.0
    assert WindowLedger(epsilon=np.float32(0.1), w=2).epsilon == float(np.float32(0.1))
