"""A second review of the fixes b98d401 and 7e053ce: each test reproduces a defect they left or made.

Every test fails on 7e053ce. Guarantees asserted: a refusal (BudgetExceeded or InvalidArgument) changes
nothing, not even the binding of a stream, whatever the ledger committed or caught up with before it
refused; a PersonalizedLedger takes no stream of another requirement set, bind included; an amount no
double equals is refused, never rounded, in any sequence a caller may pass.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from binding_probe import bound_elsewhere
from budgetcheck import (
    BudgetExceeded,
    GuardedStream,
    InvalidArgument,
    WEventParams,
    WindowLedger,
)
from budgetcheck.durable.ledger_file import open_ledger

NUMPY = "numpy-laplace"


def _ledger(epsilon: float = 1.0, w: int = 3, runs: int = 1) -> WindowLedger:
    return WindowLedger(WEventParams(epsilon, w), runs=runs, seed=3, sampler=NUMPY, keep_records=True)


def _stream(rows: int = 5, d: int = 2) -> GuardedStream:
    return GuardedStream(np.zeros((rows, d)))


# -- a refusal after a commit rolled back, or after a catch-up, leaves the stream bound -------------


def test_a_series_refused_part_way_binds_nothing() -> None:
    """laplace_series with runs that spend differently is charged stamp by stamp (_charge_each): the
    first stamp's _commit counts in _charges, the second is refused and the first rolled back, but the
    count stays moved, so _unbind_fresh sees a committed spend and keeps the binding of a stream that
    was never charged nor read. The right ledger is then refused the stream."""
    ledger, stream = _ledger(runs=2), _stream()
    with pytest.raises(BudgetExceeded):
        ledger.laplace_series([stream.secret(1), stream.secret(2)], np.array([[0.5, 0.1], [0.6, 0.1]]))
    assert not ledger.records
    assert not bound_elsewhere(stream)  # found: bound to the ledger that refused


@pytest.mark.parametrize("refusal", ["budget", "purpose"])
def test_a_refusal_after_catching_up_another_writer_binds_nothing(refusal: str, tmp_path: Path) -> None:
    """A durable ledger's operation first applies what other writers committed (Transaction._locked,
    after the mark): each applied row goes through _commit and moves _charges, so a refusal or a bad
    argument that follows keeps the binding the refused operation made. Two writers of one file are
    the documented setup."""
    path = tmp_path / "ledger.db"
    first = open_ledger(path, _ledger())
    second = open_ledger(path, _ledger())
    try:
        second.spend(1, 0.1, purpose="the other writer")
        stream = _stream()
        if refusal == "budget":
            with pytest.raises(BudgetExceeded):
                first.laplace(stream.secret(1), 5.0)
        else:
            with pytest.raises(InvalidArgument):
                first.laplace(stream.secret(1), 0.5, purpose="")
        assert not bound_elsewhere(stream)  # found: bound to the writer that refused
    finally:
        first.close()
        second.close()


# -- a PersonalizedLedger and a stream of another requirement set ------------------------------------

REQ = bc.RequirementSet.from_counts([((2, 1.0), 3), ((3, 2.0), 2)])  # 5 users
SMALL = bc.RequirementSet.from_counts([((2, 1.0), 1), ((3, 2.0), 1)])  # 2 users, the same 2 classes
BINS = np.array([[0, 0, 0, 0, 0], [1, 1, 1, 0, -1]])


def test_bind_refuses_a_personalized_stream_of_another_requirement_set() -> None:
    """_check_class_secret compares requirement sets, but PersonalizedLedger.bind does not: it binds a
    stream every operation of that ledger then refuses, and the ledger of the stream's own requirement
    set is locked out of it (SecretAccess)."""
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=3)
    wrong = bc.PersonalizedLedger(SMALL, runs=1, seed=1, sampler=NUMPY)
    with pytest.raises(InvalidArgument):
        wrong.bind(stream)  # found: accepted
    right = bc.PersonalizedLedger(REQ, runs=1, seed=1, sampler=NUMPY, keep_records=True)
    right.local_report(stream.secret(1), np.array([1.0, 2.0]))
    assert len(right.records) == 1


def test_a_grouped_report_given_a_bad_argument_fixes_no_partition() -> None:
    """local_report_groups fixes the partition (_divide) before _charge_local checks the purpose; the
    undo runs on BudgetExceeded only, so a blank purpose leaves the ledger split into 2 groups and a
    later valid report with 3 groups is refused."""
    ledger = bc.PersonalizedLedger(REQ, runs=1, seed=1, sampler=NUMPY, keep_records=True)
    stream = bc.PersonalizedStream(REQ, BINS, dimensions=3)
    with pytest.raises(InvalidArgument):
        ledger.local_report_groups(stream.secret(1), np.ones((1, 2, 2)), groups=2, purpose="")
    assert ledger.groups == 1  # found: 2
    ledger.local_report_groups(stream.secret(1), np.ones((1, 2, 3)), groups=3)
    assert len(ledger.records) == 1


def test_a_refused_held_release_fixes_no_intrusion_model() -> None:
    """held_laplace fixes the intrusion model (_fix_model) before _reserve checks the window: a refused
    hold still changes the ledger, and a later held release under the other model is refused."""
    ledger, stream = _ledger(), _stream()
    with pytest.raises(BudgetExceeded):
        ledger.held_laplace(stream.secret(1), 5.0, True, intrusions="single")
    assert ledger.intrusions is None  # found: "single"


# -- exact amounts ---------------------------------------------------------------------------------

ROUNDED: dict[str, Callable[[], Any]] = {
    "0-d array in a list": lambda: [0.0, np.array(2**53 + 1)],
    "0-d arrays in a tuple": lambda: (np.array(0.0), np.array(2**53 + 1)),
    "deque": lambda: collections.deque([0.0, 2**53 + 1]),
}


@pytest.mark.parametrize("name", list(ROUNDED))
def test_an_integer_beyond_2_53_is_not_rounded_in_any_sequence(name: str) -> None:
    """float_array checks lists and tuples as given (np.array(value, dtype=object)), but a 0-d array
    inside stays an ndarray element, which _inexact passes (not Rational, not np.integer); a deque (or
    any other sequence numpy reads) is not a list: numpy's rounding passes. A spend of 2**53 + 1 is
    then charged as 2**53 and fits epsilon = 2**53."""
    ledger = WindowLedger(WEventParams(float(2**53), 2), runs=2, seed=1, sampler=NUMPY, keep_records=True)
    with pytest.raises((InvalidArgument, BudgetExceeded)):
        ledger.spend(1, ROUNDED[name](), purpose="over epsilon")
    assert not ledger.records
