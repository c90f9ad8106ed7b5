"""A one-run WindowLedger keeps its window sums as plain Python integers (ledger/scalar_windows.py):
attacked at the edge of ε against an exact Fraction oracle and against the many-run windows (limbs
and their float pre-check) given the same spends in every run (Kellaris et al. 2014, Theorem 3)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import BudgetExceeded, GuardedStream, WindowLedger, audit_windows
from budgetcheck.ledger.scalar_windows import ScalarWindows
from budgetcheck.ledger.windows import ExactWindows

TINY = 2.0**-1074  # the smallest subnormal
EPSILONS = st.sampled_from([1.0, 0.1, 1 / 3, 0.1 + 0.2, 7.0, 2.0**-1000, 2.0**-1022, 3 * TINY, 1e300])


def _left(epsilon: Fraction, totals: dict[int, Fraction], w: int, t: int) -> Fraction:
    return epsilon - sum((v for k, v in totals.items() if t - w < k <= t), Fraction(0))


def _floor_double(value: Fraction) -> float:
    """The largest double <= value (value >= 0 within the double range)."""
    near = float(value)
    return math.nextafter(near, -math.inf) if Fraction(near) > value else near


@st.composite
def edge_cases(draw: st.DrawFn) -> tuple[float, int, list[tuple[int, str, float]]]:
    """ε, w (up to 2^40) and steps (gap, kind, value): a spend of ``value`` x remaining, remaining one
    ulp over or under, a subnormal, or a tiny share of ε repeated."""
    epsilon = draw(EPSILONS)
    w = draw(st.sampled_from([1, 2, 3, 7, 64, 10**6, 2**40]))
    kinds = st.sampled_from(["fraction", "remaining", "ulp over", "ulp under", "subnormal", "tiny", "epsilon"])
    steps = [
        (draw(st.sampled_from([0, 0, 1, 1, 2, w, w + 1])), draw(kinds), draw(st.floats(0.0, 1.0)))
        for _ in range(draw(st.integers(1, 40)))
    ]
    return epsilon, w, steps


def _amount(kind: str, value: float, left: float, epsilon: float) -> float:
    if kind == "fraction":
        return left * value
    if kind == "remaining":
        return left
    if kind == "ulp over":
        return math.nextafter(left, math.inf)
    if kind == "ulp under":
        return math.nextafter(left, -math.inf) if left > 0 else 0.0
    if kind == "subnormal":
        return TINY * (1 + int(value * 8))
    if kind == "tiny":
        return epsilon * 2.0**-60
    return epsilon


@settings(max_examples=80, deadline=None)
@given(edge_cases())
def test_one_run_decides_every_edge_spend_as_the_exact_oracle(
    case: tuple[float, int, list[tuple[int, str, float]]],
) -> None:
    """Every spend is accepted iff the exact window sum stays <= ε; remaining(t) is the largest double
    <= what is left (spending it is never refused; one ulp more is refused when it is over); a
    refusal changes nothing; the one-run and the two-run ledgers agree on every decision and sum."""
    epsilon, w, steps = case
    one = WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace", keep_records=True)
    two = WindowLedger(epsilon=epsilon, w=w, runs=2, sampler="numpy-laplace")
    assert isinstance(one._windows, ScalarWindows) and isinstance(two._windows, ExactWindows)
    exact_epsilon, totals, t = Fraction(epsilon), dict[int, Fraction](), 1
    for gap, kind, value in steps:
        t += gap
        left = float(one.remaining(t)[0])
        assert left == _floor_double(_left(exact_epsilon, totals, w, t))
        assert two.remaining(t).tolist() == [left, left]
        amount = _amount(kind, value, left, epsilon)
        fits = _left(exact_epsilon, totals, w, t) >= Fraction(amount)
        before = (one.window_sum(t), one.t, len(one.records), one.refusals)
        if fits:
            one.spend(t, amount, purpose="p")
            two.spend(t, amount, purpose="p")
            totals[t] = totals.get(t, Fraction(0)) + Fraction(amount)
        else:
            with pytest.raises(BudgetExceeded):
                one.spend(t, amount, purpose="p")
            with pytest.raises(BudgetExceeded):
                two.spend(t, amount, purpose="p")
            assert (one.window_sum(t), one.t, len(one.records)) == before[:3] and one.refusals == before[3] + 1
        exact = _left(exact_epsilon, totals, w, t)
        assert Fraction(one.window_sum(t)[0], 2**1127) == exact_epsilon - exact
        assert two.window_sum(t) == one.window_sum(t) * 2
    assert audit_windows(one.records, epsilon=epsilon, w=w, runs=1).ok


def test_many_tiny_spends_fill_the_window_exactly() -> None:
    """4,096 spends of ε/4096 (exact) fill one window to ε; then the smallest subnormal is refused,
    and after the window moves on it fits again; the same with float-inexact shares of 1/3."""
    for epsilon, parts in ((1.0, 4096), (1 / 3, 3000)):
        w = parts
        ledger = WindowLedger(epsilon=epsilon, w=w, sampler="numpy-laplace")
        share = float(Fraction(epsilon) / parts)  # rounded to nearest: the sum may be one ulp-ish over
        spent = Fraction(0)
        for t in range(1, parts + 1):
            if spent + Fraction(share) <= Fraction(epsilon):
                ledger.spend(t, share, purpose="tiny")
                spent += Fraction(share)
            else:
                with pytest.raises(BudgetExceeded):
                    ledger.spend(t, share, purpose="tiny")
        left = Fraction(epsilon) - spent
        assert float(ledger.remaining(parts)[0]) == _floor_double(left)
        if left == 0:
            with pytest.raises(BudgetExceeded):
                ledger.spend(parts, TINY, purpose="over")
        ledger.spend(parts + 1, float(ledger.remaining(parts + 1)[0]), purpose="after")
        assert Fraction(ledger.window_sum(parts + 1)[0], 2**1127) <= Fraction(epsilon)


def test_refused_series_and_footprint_leave_a_one_run_ledger_as_it_was() -> None:
    """The operations that copy, rebuild or look back (laplace_series, measure_footprint) keep the
    one-run sums exact and atomic, as the two-run ledger does."""
    stream_one = GuardedStream(np.ones((12, 2)))
    stream_two = GuardedStream(np.ones((12, 2)))
    one = WindowLedger(epsilon=1.0, w=4, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    two = WindowLedger(epsilon=1.0, w=4, runs=2, sampler="numpy-laplace", trusted_code=True, allow_vouched=True)
    one.bind(stream_one)
    two.bind(stream_two)
    for ledger, stream in ((one, stream_one), (two, stream_two)):
        ledger.laplace_series([stream.secret(t) for t in (1, 2, 3)], np.array([0.25, 0.25, 0.25]))
        with pytest.raises(BudgetExceeded):  # window [1, 4] would hold 0.75 + 0.5
            ledger.laplace_series([stream.secret(t) for t in (4, 5)], np.array([0.5, 0.5]))
        assert ledger.t == 3 and ledger.window_sum(4)[0] == 3 * 2**1125
        ledger.measure_footprint(
            lambda values: values.sum(axis=0),
            [stream.secret(3), stream.secret(4)],
            sensitivity=2.0,
            epsilon=0.125,
            isolation="trusted",
            shape=2,
        )  # window [1, 4] holds 0.25 + 0.25 + 0.375 + 0.125 = ε exactly
        with pytest.raises(BudgetExceeded):  # the smallest subnormal more at t = 2 and t = 4 is over
            ledger.measure_footprint(
                lambda values: values.sum(axis=0),
                [stream.secret(2), stream.secret(4)],
                sensitivity=2.0,
                epsilon=TINY,
                shape=2,
                isolation="trusted",
            )
        assert ledger.remaining(4)[0] == 0.0 and ledger.remaining(5)[0] == 0.25 and ledger.remaining(6)[0] == 0.5
    assert [one.window_sum(t)[0] for t in (4, 5, 6)] == [two.window_sum(t)[0] for t in (4, 5, 6)]
