"""Issue 42, item 1: the history a ledger hands out cannot change what it keeps, by any route.

Each test is one route a mechanism (or any caller holding the ledger) has to edit a past spend — the
arrays of a record, the record object, the tuple of records, an export, the audit's input, the
parameters the checks read — and asserts that the ledger's window sums, its later records, its export
and the audit of its records stay those of what was really charged. Before the fix a record's amounts
could be re-flagged writable, a mechanism zeroing its past spends was accepted up to 2ε in a window,
and ``audit_windows`` over the edited records said ok.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import budgetcheck as bc
from budgetcheck import WindowLedger

RUNS = 3
W = 4


def _spent_ledger(runs: int = RUNS) -> WindowLedger:
    """A ledger whose window [1, 4] is full: 0.5 at t = 1 and 0.5 at t = 2 in every run."""
    ledger = WindowLedger(epsilon=1.0, w=W, runs=runs, keep_records=True)
    ledger.spend(1, 0.5, purpose="first")
    ledger.spend(2, np.full(runs, 0.5), purpose="second")
    return ledger


def _assert_history_intact(ledger: WindowLedger) -> None:
    """The window is still full, the records and the export still say 0.5 + 0.5, and one ulp more is refused."""
    assert ledger.remaining(3).tolist() == [0.0] * ledger.runs
    assert [record.amounts.tolist() for record in ledger.records] == [[0.5] * ledger.runs] * 2
    exported = io.StringIO()
    ledger.export(exported)
    _, loaded = bc.load_lines(exported.getvalue().splitlines())
    assert [record.amounts.tolist() for record in loaded] == [[0.5] * ledger.runs] * 2
    with pytest.raises(bc.BudgetExceeded, match=r"would make window \[1, 3\]"):
        ledger.spend(3, 2.0**-1074, purpose="one ulp over")


def _rewrite_setflags(ledger: WindowLedger) -> None:
    amounts = ledger.records[0].amounts
    amounts.setflags(write=True)
    amounts[...] = 0.0


def _rewrite_base(ledger: WindowLedger) -> None:
    base: Any = ledger.records[1].amounts
    while isinstance(base, np.ndarray):  # every array the view leads to
        with pytest.raises(ValueError, match="WRITEABLE"):
            base.setflags(write=True)
        base = base.base
    with pytest.raises(TypeError):
        base[0] = 0  # the memory at the end of the chain: immutable bytes


def _rewrite_frombuffer(ledger: WindowLedger) -> None:
    again = np.frombuffer(ledger.records[0].amounts, dtype=np.float64)
    again.setflags(write=True)
    again[...] = 0.0


def _rewrite_memoryview(ledger: WindowLedger) -> None:
    view = memoryview(ledger.records[0].amounts)
    view.cast("B")[:8] = bytes(8)


def _rewrite_setstate(ledger: WindowLedger) -> None:
    for record in ledger.records:
        record.amounts.__setstate__((1, (RUNS,), np.dtype("f8"), False, bytes(8 * RUNS)))
        scale = record.noise_scale
        if scale is not None:
            scale.__setstate__((1, scale.shape, np.dtype("f8"), False, bytes(scale.nbytes)))


def _rewrite_dtype_and_strides(ledger: WindowLedger) -> None:
    amounts = ledger.records[1].amounts
    amounts.dtype = np.dtype(np.int64)  # the same bytes read as integers: the object changes, no memory
    amounts.shape = (RUNS,)


def _rewrite_object_setattr(ledger: WindowLedger) -> None:
    object.__setattr__(ledger.records[0], "amounts", np.zeros(RUNS))


def _rewrite_dict(ledger: WindowLedger) -> None:
    record = ledger.records[0]
    assert not hasattr(record, "__dict__")
    vars(record)["amounts"] = np.zeros(RUNS)


def _rewrite_tuple(ledger: WindowLedger) -> None:
    records: Any = ledger.records
    records[0] = bc.SpendRecord(t=1, purpose="first", amounts=np.zeros(RUNS))


def _rewrite_evolve(ledger: WindowLedger) -> None:
    record = ledger.records[0]
    record.evolve(amounts=np.zeros(RUNS))  # a new record: the one kept is unchanged


_ROUTES: dict[str, tuple[Callable[[WindowLedger], None], type[BaseException] | None]] = {
    "setflags on amounts": (_rewrite_setflags, ValueError),
    "setflags along .base": (_rewrite_base, None),
    "np.frombuffer of amounts": (_rewrite_frombuffer, ValueError),
    "a memoryview of amounts": (_rewrite_memoryview, TypeError),
    "ndarray.__setstate__ in place": (_rewrite_setstate, None),
    "assigning dtype and shape": (_rewrite_dtype_and_strides, None),
    "object.__setattr__ on a record": (_rewrite_object_setattr, AttributeError),
    "a record's __dict__": (_rewrite_dict, TypeError),
    "replacing an element of records": (_rewrite_tuple, TypeError),
    "evolve": (_rewrite_evolve, None),
}


@pytest.mark.parametrize("route", sorted(_ROUTES))
def test_no_route_edits_a_past_spend(route: str) -> None:
    """Every route to a record's amounts either raises or edits only the caller's own object."""
    ledger = _spent_ledger()
    rewrite, refused = _ROUTES[route]
    if refused is None:
        rewrite(ledger)
    else:
        with pytest.raises(refused):
            rewrite(ledger)
    _assert_history_intact(ledger)


def test_a_one_run_ledger_keeps_its_history_too() -> None:
    """One run keeps its window in integers; its records are as immutable as those of many runs."""
    ledger = _spent_ledger(runs=1)
    record = ledger.records[0]
    record.amounts.__setstate__((1, (1,), np.dtype("f8"), False, bytes(8)))
    with pytest.raises(AttributeError):
        object.__setattr__(record, "purpose", "rewritten")
    _assert_history_intact(ledger)


def test_a_mechanism_that_zeroes_its_past_spends_gets_no_second_epsilon() -> None:
    """The attack of the issue: after each spend the mechanism zeroes what it spent; before, every window
    reached 2ε and the audit of the same records said ok."""
    counts = np.full((12, 2), 50.0)

    class Forgetful:
        name = "Forgetful"

        def run(self, stream: bc.GuardedStream, ledger: WindowLedger) -> np.ndarray:
            out = np.zeros((ledger.runs, stream.length, stream.dimensions))
            refused = 0
            for secret in stream:
                try:
                    out[:, secret.t - 1] = ledger.laplace(secret, 0.5, purpose="publication")
                except bc.BudgetExceeded:
                    refused += 1
                for record in ledger.records:
                    for rewrite in (_try_setflags, _try_setattr, _try_setstate):
                        rewrite(record)
            assert refused  # the second spend of every window is refused
            return out

    execution = bc.execute(Forgetful(), counts, epsilon=1.0, w=W, runs=RUNS, seed=1)
    records = execution.ledger.records
    report = bc.audit_windows(records, epsilon=1.0, w=W, runs=RUNS)
    assert report.ok, report
    assert float(report.worst_ratio) <= 1.0
    assert all(record.amounts.tolist() == [0.5] * RUNS for record in records)
    spent = sum(float(record.amounts[0]) for record in records if record.t <= W)
    assert spent <= 1.0


def _try_setflags(record: bc.SpendRecord) -> None:
    try:
        amounts = record.amounts
        amounts.setflags(write=True)
        amounts[...] = 0.0
    except ValueError:
        pass


def _try_setattr(record: bc.SpendRecord) -> None:
    try:
        object.__setattr__(record, "amounts", np.zeros(RUNS))
    except AttributeError:
        pass


def _try_setstate(record: bc.SpendRecord) -> None:
    record.amounts.__setstate__((1, (RUNS,), np.dtype("f8"), False, bytes(8 * RUNS)))


def test_pickled_and_copied_records_are_as_immutable() -> None:
    """A pickle round trip or a copy rebuilds the record through its constructor: equal, and read-only."""
    ledger = _spent_ledger()
    for record in ledger.records:
        for again in (pickle.loads(pickle.dumps(record)), copy.copy(record), copy.deepcopy(record)):
            assert type(again) is bc.SpendRecord
            assert again == record
            assert again.amounts.tolist() == record.amounts.tolist()
            with pytest.raises(ValueError, match="WRITEABLE"):
                again.amounts.setflags(write=True)
            with pytest.raises(AttributeError):
                object.__setattr__(again, "amounts", np.zeros(RUNS))
    _assert_history_intact(ledger)


def test_a_laplace_series_hands_out_no_array_the_windows_read() -> None:
    """The series shares its budgets between records and windows: editing a record's view changes nothing."""
    counts = np.full((6, 2), 10.0)
    stream = bc.GuardedStream(counts)
    ledger = WindowLedger(epsilon=1.0, w=W, runs=RUNS, keep_records=True)
    ledger.laplace_series([stream.secret(1), stream.secret(2)], np.array([0.5, 0.5]))
    for record in ledger.records:
        record.amounts.__setstate__((1, (RUNS,), np.dtype("f8"), False, bytes(8 * RUNS)))
        assert record.noise_scale is not None
        with pytest.raises(ValueError, match="WRITEABLE"):
            record.noise_scale.setflags(write=True)
    assert ledger.remaining(3).tolist() == [0.0] * RUNS
    assert all(record.amounts.tolist() == [0.5] * RUNS for record in ledger.records)


def test_the_audit_reads_each_record_once() -> None:
    """A stand-in whose amounts answer differently at each read cannot pass the audit with a second answer."""

    class TwoFaced:
        t, purpose, sensitivity, noise_scale, sampler, vouched = 1, "two-faced", None, None, None, False

        def __init__(self) -> None:
            self.reads = 0

        @property
        def amounts(self) -> np.ndarray:
            self.reads += 1
            return np.full(RUNS, 2.0 if self.reads == 1 else 0.0)

    stand_in = TwoFaced()
    report = bc.audit_windows([stand_in], epsilon=1.0, w=W, runs=RUNS)  # type: ignore[list-item]
    assert stand_in.reads == 1
    assert not report.ok
    with pytest.raises(bc.InvalidArgument, match=r"records\[0\]=.* is not a spend record"):
        bc.audit_windows([object()], epsilon=1.0, w=W, runs=RUNS)  # type: ignore[list-item]


def test_the_checks_read_no_parameter_object_a_caller_holds() -> None:
    """``params`` and ``epsilon`` are copies: bending them past attrs' frozen guard moves no bound."""
    params = bc.WEventParams(1.0, W)
    ledger = WindowLedger(params, runs=RUNS, keep_records=True)
    object.__setattr__(params, "w", 1)
    object.__setattr__(ledger.params, "w", 1)
    object.__setattr__(ledger.params, "epsilon", 100.0)
    ledger.spend(1, 0.75, purpose="a")
    stream = bc.GuardedStream(np.full((6, 2), 3.0))
    ledger.bind(stream)
    with pytest.raises(bc.BudgetExceeded):  # a series checks its windows with w: still 4
        ledger.laplace_series([stream.secret(2), stream.secret(3)], np.array([0.25, 0.25]))
    assert ledger.params == bc.WEventParams(1.0, W)

    several = WindowLedger.with_epsilons(np.array([1.0, 0.5, 0.25]), W, keep_records=True)
    shown = several.epsilon
    assert isinstance(shown, np.ndarray)
    with pytest.raises(ValueError, match="WRITEABLE"):
        shown.setflags(write=True)
    shown.__setstate__((1, (3,), np.dtype("f8"), False, np.full(3, 100.0).tobytes()))
    several.spend(1, np.array([1.0, 0.5, 0.25]), purpose="all")
    with pytest.raises(bc.BudgetExceeded):
        several.spend(2, np.array([0.0, 0.0, 0.125]), purpose="over")
    assert np.asarray(several.epsilon).tolist() == [1.0, 0.5, 0.25]


def test_a_personalized_ledger_checks_against_its_own_copy_of_the_requirements() -> None:
    """Raising a class's ε on the caller's Requirement object neither admits a spend nor changes the header."""
    requirements = bc.RequirementSet.from_counts([((2, 1.0), 3), ((2, 0.5), 2)])
    ledger = bc.PersonalizedLedger(requirements, runs=2, keep_records=True)
    caps = [eps for _, eps, _ in ledger.header().classes]
    assert sorted(caps) == [0.5, 1.0]
    for requirement in (*requirements.classes, *ledger.requirements.classes):
        object.__setattr__(requirement, "epsilon", 100.0)
    ledger.spend(1, np.array(caps), purpose="full")
    with pytest.raises(bc.BudgetExceeded):
        ledger.spend(2, np.array([2.0**-1074, 2.0**-1074]), purpose="over")
    assert [eps for _, eps, _ in ledger.header().classes] == caps
