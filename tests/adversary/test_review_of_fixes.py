"""A review of the fixes of 9c8b7b9..056e8c7: each test reproduces a defect they left or made.

Every test fails on 056e8c7. Guarantees asserted: a stream is bound to exactly one ledger once a
charged read has passed, and a refusal (BudgetExceeded or InvalidArgument) binds nothing; a measured
function's failure tells at most one bit; a PersonalizedLedger reads only streams whose classes fit its
requirement set; an amount no double equals is refused, never rounded; bad input is InvalidArgument.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import NDArray

import budgetcheck as bc
from binding_probe import bound_elsewhere
from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    SecretAccess,
    WEventParams,
    WindowLedger,
    deviation,
)
from budgetcheck.stream.secret import reveal

NUMPY = "numpy-laplace"
FloatArray = NDArray[np.float64]


def _ledger(epsilon: float = 1.0, w: int = 3, sampler: str = NUMPY) -> WindowLedger:
    return WindowLedger(
        WEventParams(epsilon, w),
        runs=1,
        seed=3,
        sampler=sampler,
        keep_records=True,
        trusted_code=True,
        allow_vouched=True,
    )


def _stream(rows: int = 5, d: int = 2) -> GuardedStream:
    return GuardedStream(np.zeros((rows, d)))


# -- a measured function's failure carries the data ---------------------------------------------


@pytest.mark.parametrize("isolation", ["fork", "trusted"])
def test_measure_failure_code_line_does_not_carry_the_data(isolation: str) -> None:
    """fn reads another Secret from a line it picks after reading the data: compile() with the name of
    any existing file and as many newlines as the count. The SecretAccess names that line, so the exact
    count comes out of a call charged 0.01, with no noise. The README allows one bit per call."""
    big = np.__file__.replace("__init__.py", "_core/fromnumeric.py")

    def fn(values: FloatArray) -> float:
        probe = GuardedStream(np.zeros((1, 1))).secret(1)
        code = compile("\n" * int(values[0]) + "reveal(probe)", big, "exec")
        exec(code, {"reveal": reveal, "probe": probe})  # noqa: S102 — the attack
        return 0.0

    seen = []
    for count in (1234.0, 1000.0):
        ledger = _ledger()
        secret = GuardedStream(np.array([[count, 5.0]])).secret(1)
        out = ledger.measure(fn, secret, sensitivity=1.0, epsilon=0.01, isolation=isolation)  # the default, noised
        seen.append((out.tolist(), [f.reason for f in ledger.failures]))
    assert seen[0] == seen[1], seen  # found: "...fromnumeric.py:1235" and ":1001"


# -- the undo of fresh claims ----------------------------------------------------------------------


def test_a_threshold_query_binding_is_not_undone_by_a_later_refusal() -> None:
    """ThresholdTest.query runs through _run_operation, not the journaled wrapper: the stream its
    charged read bound stays in _fresh_claims, and the next refused journaled operation (on any stream)
    unbinds it. A second ledger then reads the stream: its spends are hidden from the first."""
    ledger, stream = _ledger(), _stream(d=1)
    test = ledger.above_threshold(epsilon=0.5, sensitivity=2.0, cells=(1,))
    test.query(stream.secret(1), deviation, 1e9)  # charged: binds the stream
    with pytest.raises(BudgetExceeded):
        ledger.laplace(_stream().secret(1), 5.0)  # another stream, refused
    assert bound_elsewhere(stream)  # found: unbound, a fresh ledger binds and reads it


def test_a_refused_threshold_query_binds_nothing() -> None:
    """A refused first read through ThresholdTest.query left the stream bound (no undo on that path)."""
    ledger, stream = _ledger(epsilon=0.1), _stream(d=1)
    test = ledger.above_threshold(epsilon=0.5, sensitivity=2.0, cells=(1,))
    with pytest.raises(BudgetExceeded):
        test.query(stream.secret(1), deviation, 1e9)
    assert not bound_elsewhere(stream)


def test_a_refusal_inside_measure_does_not_unbind_the_measured_stream() -> None:
    """A trusted fn calls the ledger (reentrant lock) and catches its refusal: the inner undo clears the
    outer operation's fresh claim, so the measured stream, charged and read, is unbound afterwards."""
    ledger, measured, other = _ledger(), _stream(), _stream()
    ledger.bind(other)

    def fn(values: FloatArray) -> float:
        try:
            ledger.laplace(other.secret(1), 50.0)
        except BudgetExceeded:
            pass
        return float(values.sum())

    ledger.measure(fn, measured.secret(1), sensitivity=1.0, epsilon=0.5, isolation="trusted")
    assert len(ledger.records) == 1
    assert bound_elsewhere(measured)  # found: a second ledger reads it


REFUSED_AFTER_CLAIM: dict[str, Callable[[WindowLedger, GuardedStream], object]] = {
    "laplace purpose": lambda ledger, s: ledger.laplace(s.secret(1), 0.5, purpose=""),
    "laplace_bins epsilon": lambda ledger, s: ledger.laplace_bins(s.secret(1), np.array([0.5, -1.0])),
    "laplace_groups labels": lambda ledger, s: ledger.laplace_groups(s.secret(1), np.array([0, 5]), np.array([0.5])),
    "dissimilarity last": lambda ledger, s: ledger.dissimilarity(s.secret(1), np.full((1, 2), np.nan), 0.5),
    "measure purpose": lambda ledger, s: ledger.measure(np.sum, s.secret(1), sensitivity=1.0, epsilon=0.5, purpose=""),
    "footprint window": lambda ledger, s: ledger.measure_footprint(
        np.sum, [s.secret(1), s.secret(5)], sensitivity=1.0, epsilon=0.5
    ),
    "discrete scale": lambda ledger, s: _ledger(sampler="discrete-laplace").laplace(s.secret(1), 5e-324),
}


@pytest.mark.parametrize("name", list(REFUSED_AFTER_CLAIM))
def test_an_invalid_argument_after_the_claim_binds_nothing(name: str) -> None:
    """The undo runs on BudgetExceeded only: an InvalidArgument raised after _check_secret (purpose,
    bin budgets, labels, last_release, the window of a footprint, the discrete sampler's scale) leaves the
    stream bound to a ledger that charged nothing; the right ledger is then refused the stream."""
    stream = _stream()
    with pytest.raises(InvalidArgument):
        REFUSED_AFTER_CLAIM[name](_ledger(), stream)
    assert not bound_elsewhere(stream)


# -- PersonalizedLedger and a stream of another requirement set -----------------------------------

REQ = bc.RequirementSet.from_counts([((2, 1.0), 3), ((3, 2.0), 2)])  # 5 users
SMALL = bc.RequirementSet.from_counts([((2, 1.0), 1), ((3, 2.0), 1)])  # 2 users, the same 2 classes
BINS = np.array([[0, 0, 0, 0, 0], [1, 1, 1, 0, -1]])


@pytest.mark.parametrize("op", ["local_report", "local_report_groups"])
def test_a_personalized_stream_of_another_requirement_set_is_refused_before_the_charge(op: str) -> None:
    """Only the number of classes is checked: class counts above the ledger's class sizes (and bins of
    other users) are charged, then numpy raises ValueError ('n < 0', a broadcast error)."""
    ledger = bc.PersonalizedLedger(SMALL, runs=1, seed=1, sampler=NUMPY, keep_records=True)
    secret = bc.PersonalizedStream(REQ, BINS, dimensions=3).secret(1)
    with pytest.raises((InvalidArgument, SecretAccess)):
        if op == "local_report":
            ledger.local_report(secret, np.array([1.0, 2.0]))
        else:
            ledger.local_report_groups(secret, np.ones((1, 2, 1)), groups=1)
    assert not ledger.records


# -- exact amounts and bad input -------------------------------------------------------------------


def test_an_integer_beyond_2_53_beside_a_float_is_not_rounded() -> None:
    """numpy converts [0.0, 2**53 + 1] to float64 (2**53): kind 'f' passes _exact_doubles untouched, so a
    spend of 2**53 + 1 is charged as 2**53 and fits epsilon = 2**53."""
    ledger = WindowLedger(WEventParams(float(2**53), 2), runs=2, seed=1, sampler=NUMPY, keep_records=True)
    with pytest.raises((InvalidArgument, BudgetExceeded)):
        ledger.spend(1, [0.0, 2**53 + 1], purpose="over epsilon")
    assert not ledger.records


def test_measure_at_the_largest_sensitivity_is_an_invalid_argument() -> None:
    """On the discrete sampler sensitivity=1.7976931348623157e308 (finite, accepted) raises OverflowError
    from the grid's float(Δ + γ): a traceback, not InvalidArgument naming the argument."""
    ledger, secret = _ledger(sampler="discrete-laplace"), _stream().secret(1)
    with pytest.raises(InvalidArgument):
        ledger.measure(np.sum, secret, sensitivity=float(np.finfo(np.float64).max), epsilon=1.0, isolation="trusted")
    assert not ledger.records
