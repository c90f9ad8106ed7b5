"""The window pre-check's double-double bound (ledger/windows.py) against exact rational sums.

The pre-check may only say "allowed" when the exact window sum with the new spend is <= ε; these
tests drive it where a bound is tightest: windows filled to ε within a few ulps, exactly to ε, one
ulp over, subnormal and huge amounts, and entries of several spends leaving together.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck import BudgetExceeded, WEventParams, WindowLedger
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.windows import ExactWindows, _add_above, _bound_after, _double_double_above

finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False) | st.sampled_from(
    [0.0, -0.0, 2.0**-1074, -(2.0**-1074), 2.0**-1022, 1.0, 1 / 3, 0.1, -0.1, 1e300]
)


def _exact(pair: tuple[float, float]) -> Fraction:
    return Fraction(pair[0]) + Fraction(pair[1])


@settings(max_examples=200, deadline=None)
@given(finite, finite, finite)
def test_each_step_bounds_the_exact_sum_from_above_and_stays_normalised(hi: float, lo: float, x: float) -> None:
    """hi' + lo' >= hi + lo + x, exactly, and hi' is hi' + lo' rounded to nearest; from a normalised
    pair the excess is one rounding of the low word (a relative 2**-102 of the larger of hi and hi + x)."""
    hi, lo = _add_above(hi, 0.0, lo)  # the pair as the pre-check keeps it
    assert float(Fraction(hi) + Fraction(lo)) == hi
    result = _add_above(hi, lo, x)
    if not all(math.isfinite(v) for v in result):  # an overflow: the check then fails (tested below)
        return
    exact = Fraction(hi) + Fraction(lo) + Fraction(x)
    assert _exact(result) >= exact
    assert float(_exact(result)) == result[0]  # correctly rounded sum of the pair: normalised
    scale = max(abs(hi), abs(hi + x))
    assert _exact(result) - exact <= Fraction(scale) / 2**102 + Fraction(2.0**-1074)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from([1.0, 0.1, 1 / 3, 0.7, 2.0**-20, 1e300, 2.0**-1060]),
    st.integers(1, 130),
    st.integers(1, 3),
    st.lists(st.integers(-3, 3), min_size=1, max_size=3),
    st.data(),
)
def test_the_pre_check_allows_only_what_the_exact_sum_allows(
    epsilon: float, w: int, parts: int, nudges: list[int], data: st.DataObject
) -> None:
    """w timestamps of ``parts`` spends each, every one ε/(w·parts) rounded down (a fixed share:
    the window ends a few ulps under ε), slid on; then a spend nudged by a few ulps around what is
    exactly left. Whenever the kernel says "within", the exact rational sum is <= ε."""
    share = Fraction(epsilon) / (w * parts)
    amount = float(share)
    if Fraction(amount) > share:
        amount = math.nextafter(amount, 0.0)
    windows = ExactWindows(w, 1)
    exact: dict[int, Fraction] = {}
    for t in range(1, w + data.draw(st.integers(1, 3))):
        for _ in range(parts):
            skipping = windows._skip > 0
            quick = windows.quick_check(t, np.array([amount]), epsilon)
            total = sum((v for k, v in exact.items() if k > t - w), Fraction(0)) + Fraction(amount)
            if quick is None:
                assert skipping or total > Fraction(epsilon) * (1 - Fraction(1, 2**75))  # undecided only near ε
                added = ExactVector.from_floats(np.array([amount]))
                window, leaving = windows.prospective(t)
                assert total <= Fraction(epsilon)
                windows.commit(t, np.array([amount]), added, window + added, leaving)
            else:
                assert total <= Fraction(epsilon)
                assert _exact((quick[0][0, 0], quick[0][1, 0])) >= total
                windows.commit_quick(t, np.array([amount]), *quick)
            exact[t] = exact.get(t, Fraction(0)) + Fraction(amount)
    t = w + 3
    left = Fraction(epsilon) - sum((v for k, v in exact.items() if k > t - w), Fraction(0))
    base = float(left) if left > 0 else 0.0
    for nudge in nudges:
        probe = base
        for _ in range(abs(nudge)):
            probe = math.nextafter(probe, math.inf if nudge > 0 else 0.0)
        quick = windows.quick_check(t, np.array([probe]), epsilon)
        if quick is not None:
            assert Fraction(probe) <= left, f"allowed {probe!r} with {left} left"


def test_a_window_exactly_at_epsilon_is_decided_and_one_ulp_over_is_not() -> None:
    """0.5 + 0.25 + 0.25 = 1 exactly: allowed without the exact check; 0.25 + one ulp: never allowed."""
    windows = ExactWindows(3, 1)
    for t, amount in ((1, 0.5), (2, 0.25)):
        quick = windows.quick_check(t, np.array([amount]), 1.0)
        assert quick is not None
        windows.commit_quick(t, np.array([amount]), *quick)
    assert windows.quick_check(3, np.array([math.nextafter(0.25, 1.0)]), 1.0) is None
    windows._skip = 0
    assert windows.quick_check(3, np.array([0.25]), 1.0) is not None
    ledger = WindowLedger(WEventParams(1.0, 3), runs=1, sampler="numpy-laplace")
    ledger.spend(1, 0.5, purpose="a")
    ledger.spend(2, 0.25, purpose="a")
    before = ledger.window_sum(3)
    try:
        ledger.spend(3, math.nextafter(0.25, 1.0), purpose="a")
        raise AssertionError("one ulp over ε was allowed")
    except BudgetExceeded:
        pass
    assert ledger.window_sum(3) == before
    ledger.spend(3, 0.25, purpose="a")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1e10), min_size=1, max_size=6), st.data())
def test_the_bound_rebuilt_from_an_exact_sum_encloses_it_tightly(values: list[float], data: st.DataObject) -> None:
    """After an exact commit the pre-check restarts from the exact sum: hi + lo >= it, and within a
    relative 2**-78 (the 2**-40 of ExactVector's float bounds, applied to the remainder as well)."""
    runs = data.draw(st.integers(1, 3))
    exact = ExactVector.zeros(runs)
    rows = [np.array([data.draw(st.sampled_from(values)) for _ in range(runs)]) for _ in values]
    for row in rows:
        exact = exact + ExactVector.from_floats(row)
    pair = _double_double_above(exact)
    for r in range(runs):
        value = Fraction(exact[r], 2**1127)
        assert _exact((pair[0, r], pair[1, r])) >= value
        assert _exact((pair[0, r], pair[1, r])) - value <= value * Fraction(1, 2**78) + Fraction(2.0**-1059)


def test_an_overflowing_bound_fails_the_check() -> None:
    """Amounts whose sum leaves the doubles: inf or NaN in the bound, never "within"."""
    big = np.finfo(np.float64).max
    out = np.empty((2, 1))
    assert not _bound_after(np.array([[big], [0.0]]), np.empty((0, 1)), np.array([big]), np.array([np.inf]), out)
    assert not _bound_after(np.array([[big], [0.0]]), np.empty((0, 1)), np.array([big]), np.array([big]), out)


def test_fixed_share_windows_filled_to_epsilon_stay_on_the_pre_check() -> None:
    """PeGaSus' and AdaPub's shape: every timestamp spends ε/w rounded down (and two parts of it), so
    every window ends a few ulps under ε. The double-double bound decides each of them without the
    exact check (a float bound with a rounding per operation could not, after a few windows)."""
    for epsilon, w in ((1.0, 120), (0.1, 40), (1 / 3, 7)):
        ledger = WindowLedger.with_epsilons(np.array([epsilon, epsilon / 2]), w, sampler="numpy-laplace")
        half = epsilon / (2 * w)
        half = half if Fraction(half) <= Fraction(epsilon) / (2 * w) else math.nextafter(half, 0.0)
        parts = [half, half]
        exact_path = 0
        original = ExactWindows.prospective

        def counted(self: ExactWindows, t: int) -> tuple[ExactVector, int]:
            nonlocal exact_path
            exact_path += 1
            return original(self, t)

        ExactWindows.prospective = counted  # type: ignore[method-assign]
        try:
            for t in range(1, 4 * w):
                for p in parts:
                    ledger.spend(t, np.array([p, p / 2]), purpose="fixed share")
        finally:
            ExactWindows.prospective = original  # type: ignore[method-assign]
        assert exact_path == 0
        window = ledger.window_sum(4 * w - 1)
        assert Fraction(window[0], 2**1127) <= Fraction(epsilon)
        assert Fraction(window[0], 2**1127) > Fraction(epsilon) * (1 - Fraction(1, 2**40))
