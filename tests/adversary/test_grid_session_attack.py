"""Attacks from outside on the grid session (``budgetcheck.ledger.grid``, issue 45 item 1).

A session keeps a ledger's state as flat arrays during the benchmark's pass. It must not be a way around
the ledger: an over-spend through it is refused with the ledger (records, windows, noise generator)
unchanged, one ulp over the exact budget is refused and what is left exactly is never refused, bad amounts
and last releases are named, a secret of another stream or an earlier timestamp is refused, and a ledger
used directly in the middle of a session sees every spend the session committed. Each operation is also
compared with the ledger's own, value for value.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from budgetcheck import BudgetExceeded, GuardedStream, InvalidArgument, WindowLedger
from budgetcheck.ledger import grid
from budgetcheck.ledger.errors import SecretAccess, TimestampOrder
from budgetcheck.ledger.grid import GridSession, grid_session, grid_sessions
from budgetcheck.ledger.noise import NUMPY

RUNS = 6
W = 4
PURPOSES = ("dissimilarity", "publication")


def _data(length: int = 12, d: int = 3) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 30, size=(length, d)).astype(np.float64)


def _pair(
    epsilon: float = 1.0, seed: int = 9
) -> tuple[WindowLedger, GridSession, GuardedStream, WindowLedger, GuardedStream]:
    """A ledger with a session over its stream, and a twin ledger on the same data and seed without one."""
    data = _data()
    ledger = WindowLedger(epsilon=epsilon, w=W, runs=RUNS, seed=seed, sampler=NUMPY, keep_records=True)
    twin = WindowLedger(epsilon=epsilon, w=W, runs=RUNS, seed=seed, sampler=NUMPY, keep_records=True)
    stream, twin_stream = GuardedStream(data), GuardedStream(data)
    ledger.bind(stream)
    twin.bind(twin_stream)
    with grid_sessions():
        session = grid_session(ledger, stream, PURPOSES)
    assert session is not None
    return ledger, session, stream, twin, twin_stream


def _exact_window(ledger: WindowLedger, t: int) -> list[Fraction]:
    totals = [Fraction(0)] * ledger.runs
    for record in ledger.records:
        if t - ledger.w < record.t <= t:
            totals = [a + Fraction(float(x)) for a, x in zip(totals, record.amounts.tolist(), strict=True)]
    return totals


def test_only_inside_grid_sessions_and_never_by_construction() -> None:
    ledger, stream = WindowLedger(epsilon=1.0, w=W, runs=RUNS, sampler=NUMPY), GuardedStream(_data())
    ledger.bind(stream)
    assert grid_session(ledger, stream, PURPOSES) is None  # outside the runner's block: the ledger's path
    with pytest.raises(TypeError):
        GridSession()


def test_no_session_over_a_ledger_that_is_not_fresh_in_memory_and_numpy() -> None:
    stream = GuardedStream(_data())
    used = WindowLedger(epsilon=1.0, w=W, runs=RUNS, sampler=NUMPY)
    used.bind(stream)
    used.spend(1, 0.1, purpose="before")
    discrete = WindowLedger(epsilon=1.0, w=W, runs=RUNS, sampler="discrete-laplace")
    one_run = WindowLedger(epsilon=1.0, w=W, runs=1, sampler=NUMPY)
    unbound = WindowLedger(epsilon=1.0, w=W, runs=RUNS, sampler=NUMPY)
    many = WindowLedger(epsilon=1.0, w=W, runs=grid.MOST_RUNS + 1, sampler=NUMPY)  # per-run work dominates there
    with grid_sessions():
        assert grid_session(used, stream, PURPOSES) is None
        for ledger in (discrete, one_run, many):
            other = GuardedStream(_data())
            ledger.bind(other)
            assert grid_session(ledger, other, PURPOSES) is None
        assert grid_session(unbound, GuardedStream(_data()), PURPOSES) is None  # its stream is not bound to it


def test_operations_release_what_the_ledger_releases() -> None:
    ledger, session, stream, twin, twin_stream = _pair()
    last = np.random.default_rng(2).random((RUNS, 3)) * 17.0  # not integers: the sum's order shows
    share = np.full(RUNS, 0.125)
    for t in range(1, 9):
        a = session.dissimilarity(stream.secret(t), last, share)
        b = twin.dissimilarity(twin_stream.secret(t), last, share)
        assert a.tobytes() == b.tobytes()
        spent = np.where(np.arange(RUNS) % 2 == t % 2, 0.25, 0.0)
        a = session.laplace(stream.secret(t), spent)
        b = twin.laplace(twin_stream.secret(t), spent, purpose="publication")
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    assert not session.closed and session.operations == 16
    assert [r.to_json() for r in ledger.records] == [r.to_json() for r in twin.records]
    assert session.closed  # reading the records handed the ledger its state


def test_an_overspend_through_the_session_is_refused_and_changes_nothing() -> None:
    ledger, session, stream, twin, twin_stream = _pair()
    for t in (1, 2):
        session.laplace(stream.secret(t), np.full(RUNS, 0.375))
        twin.laplace(twin_stream.secret(t), np.full(RUNS, 0.375))
    over = np.full(RUNS, 0.25)
    over[3] = 0.25 + 2.0**-52  # one ulp over what is left, in one run
    with pytest.raises(BudgetExceeded) as refused:
        session.laplace(stream.secret(3), over)
    assert refused.value.run == 3
    with pytest.raises(BudgetExceeded):
        twin.laplace(twin_stream.secret(3), over)
    assert [r.to_json() for r in ledger.records] == [r.to_json() for r in twin.records]  # nothing recorded
    assert ledger.t == twin.t == 2
    # nothing drawn either: the next release is the twin's, value for value
    assert (
        session.laplace(stream.secret(3), np.full(RUNS, 0.25)).tobytes()
        == twin.laplace(twin_stream.secret(3), np.full(RUNS, 0.25)).tobytes()
    )
    assert _exact_window(ledger, 3) == [Fraction(1)] * RUNS


def test_what_is_left_exactly_is_never_refused_by_the_session() -> None:
    """Amounts that leave each window exactly at ε, taken from an exact oracle: every one is committed by
    the session itself (it stays open), whatever the order of the window's ulps."""
    epsilon = 0.7
    ledger, session, stream, _, _ = _pair(epsilon)
    spent: list[list[Fraction]] = []
    rng = np.random.default_rng(3)
    for t in range(1, 13):
        window = [sum((row[r] for row in spent[max(0, t - W) : t - 1]), Fraction(0)) for r in range(RUNS)]
        left = [Fraction(epsilon) - x for x in window]
        amounts = np.array([math.nextafter(float(x), 0.0) if Fraction(float(x)) > x else float(x) for x in left])
        if t % 3:  # now and then a fraction of it, so windows hold uneven sums
            amounts = amounts * rng.random(RUNS)
        amounts = np.maximum(amounts, 0.0)
        assert all(Fraction(float(a)) <= x for a, x in zip(amounts, left, strict=True))
        session.laplace(stream.secret(t), amounts)
        spent.append([Fraction(float(a)) for a in amounts])
    assert session.operations == 12
    for t in range(1, 13):
        assert all(total <= Fraction(epsilon) for total in _exact_window(ledger, t))


def test_one_ulp_over_the_exact_budget_after_many_small_spends_is_refused() -> None:
    epsilon = 1.0
    ledger, session, stream, _, _ = _pair(epsilon)
    for t in range(1, 4):
        session.dissimilarity(stream.secret(t), np.zeros((RUNS, 3)), np.full(RUNS, 0.1))
    left = Fraction(epsilon) - 3 * Fraction(0.1)
    at = float(left)
    if Fraction(at) > left:
        at = math.nextafter(at, 0.0)
    with pytest.raises(BudgetExceeded):
        session.laplace(stream.secret(3), np.full(RUNS, math.nextafter(at, 1.0)))
    session.laplace(stream.secret(3), np.full(RUNS, at))  # exactly what is left (or the double below it)
    assert all(total <= Fraction(epsilon) for total in _exact_window(ledger, 3))


@pytest.mark.parametrize("bad", [np.nan, -0.25, np.inf, -0.0])
def test_bad_amounts_are_named_and_change_nothing(bad: float) -> None:
    ledger, session, stream, twin, _ = _pair()
    amounts = np.full(RUNS, 0.1)
    amounts[2] = bad
    if bad == 0.0:  # −0.0 is a valid "nothing": the ledger's path takes it
        session.laplace(stream.secret(1), amounts)
        assert ledger.records[-1].amounts[2] == 0.0
        return
    with pytest.raises(InvalidArgument, match="epsilon"):
        session.laplace(stream.secret(1), amounts)
    assert ledger.records == () and ledger.t == 0


def test_a_non_finite_last_release_is_named() -> None:
    ledger, session, stream, _, _ = _pair()
    last = np.zeros((RUNS, 3))
    last[1, 2] = np.nan
    with pytest.raises(InvalidArgument, match="last_release"):
        session.dissimilarity(stream.secret(1), last, np.full(RUNS, 0.1))
    assert ledger.records == ()


def test_secrets_out_of_order_or_of_another_stream_are_refused() -> None:
    ledger, session, stream, _, _ = _pair()
    session.laplace(stream.secret(5), np.full(RUNS, 0.1))
    with pytest.raises(TimestampOrder):
        session.laplace(stream.secret(4), np.full(RUNS, 0.1))
    other = GuardedStream(_data())
    WindowLedger(epsilon=1.0, w=W, runs=RUNS).bind(other)
    with pytest.raises(SecretAccess):
        session.laplace(other.secret(6), np.full(RUNS, 0.1))
    assert [r.t for r in ledger.records] == [5]


def test_the_ledger_used_directly_mid_session_sees_every_spend() -> None:
    """A direct operation takes the session's state first (it is the ledger's in-flight commit): the
    window check then counts the spends the session committed."""
    ledger, session, stream, _, _ = _pair()
    session.laplace(stream.secret(1), np.full(RUNS, 0.75))
    with pytest.raises(BudgetExceeded):
        ledger.spend(2, 0.5, purpose="direct")
    assert session.closed
    ledger.spend(2, 0.25, purpose="direct")
    with pytest.raises(BudgetExceeded):  # the session hands every later operation to the ledger
        session.laplace(stream.secret(3), np.full(RUNS, 0.25))
    assert [r.purpose for r in ledger.records] == ["publication", "direct"]


class _Uniforms:
    """A generator stand-in that hands out given uniforms, zeros included (numpy skips a zero uniform)."""

    def __init__(self, values: list[float]) -> None:
        self._values = list(values)

    def random(self, count: int) -> np.ndarray:
        taken, self._values = self._values[:count], self._values[count:]
        return np.array(taken, dtype=np.float64)


def test_zero_uniforms_are_skipped_as_numpy_skips_them() -> None:
    """The session's draws past a zero uniform (probability 2**-53 each) are laplace_draws' doubles."""
    from budgetcheck.ledger.noise import laplace_draws

    values = [0.25, 0.0, 0.75, 0.0, 0.0] + np.random.default_rng(4).random(30).tolist()
    values[12] = 0.0
    ledger, session, stream, _, _ = _pair()
    ledger._rng = _Uniforms(values)  # type: ignore[assignment]
    amounts = np.full(RUNS, 0.5)
    released = session.laplace(stream.secret(1), amounts)
    scale = 1.0 / 0.5  # the identity's sensitivity 1 over ε = 0.5, one double up
    expected = laplace_draws(_Uniforms(values), (RUNS, 3)) * np.nextafter(scale, np.inf)  # type: ignore[arg-type]
    with_data = expected + _data()[0]
    assert released.tobytes() == with_data.tobytes()


def test_bin_budgets_charge_their_maximum_and_refuse_one_ulp_over() -> None:
    ledger, session, stream, twin, twin_stream = _pair()
    budgets = np.tile([0.25, 0.5, 0.125], (RUNS, 1))
    a = session.laplace_bins(stream.secret(1), budgets)
    b = twin.laplace_bins(twin_stream.secret(1), budgets)
    assert a.tobytes() == b.tobytes()
    over = budgets.copy()
    over[4, 2] = 0.5 + 2.0**-53  # the window then holds 0.5 + this: one ulp over ε = 1 in run 4
    with pytest.raises(BudgetExceeded) as refused:
        session.laplace_bins(stream.secret(2), over)
    assert refused.value.run == 4
    nan = budgets.copy()
    nan[1, 1] = np.nan
    with pytest.raises(InvalidArgument, match="epsilon"):
        session.laplace_bins(stream.secret(2), nan)
    assert [r.to_json() for r in ledger.records] == [r.to_json() for r in twin.records]
