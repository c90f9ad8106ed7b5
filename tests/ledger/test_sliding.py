"""FloatOps.slide: a rule's window with a running total (budgetcheck.ledger.sliding) against exact sums."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck.ledger.sliding import SlidingValues
from budgetcheck.ops import EXACT, FLOAT

budgets = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1e6, allow_subnormal=True),
    st.sampled_from([1 / 3, 1 / 240, 2.0**-1074, 0.1]),
)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 3),
    st.lists(st.lists(budgets, min_size=3, max_size=3), min_size=1, max_size=40),
    st.booleans(),
)
def test_the_sliding_sum_bounds_the_exact_window_sum_without_drift(
    length: int, runs: int, steps: list[list[float]], scalars: bool
) -> None:
    window: tuple[object, ...] = tuple(0.0 for _ in range(length))
    exact: list[list[Fraction]] = [[Fraction(0)] * runs for _ in range(length)]
    largest = Fraction(0)  # the largest window sum so far: the running total's rounding scales with it
    for values in steps:
        newest = float(values[0]) if scalars else np.array(values[:runs])
        window = FLOAT.slide(window, newest)
        exact = [*exact[1:], [Fraction(float(np.broadcast_to(newest, (runs,))[r])) for r in range(runs)]]
        assert isinstance(window, SlidingValues) and len(window) == length
        total = np.broadcast_to(FLOAT.sum_up(window), (runs,))
        assert np.ndim(FLOAT.sum_up(window)) == (0 if scalars else 1)
        for run in range(runs):
            true = sum((item[run] for item in exact), Fraction(0))
            largest = max(largest, true)
            assert Fraction(float(total[run])) >= true
            # No drift: a few ulps of the largest recent sum per slide since the last fresh sum
            # (at most ``length`` slides), plus sum_up's own slack.
            slack = true * Fraction(2 * (length + 2), 2**53) + largest * Fraction(4 * (length + 1), 2**52)
            assert Fraction(float(total[run])) <= true + slack + Fraction(2) ** -1070


@given(st.integers(1, 6), st.lists(st.lists(st.integers(0, 1), min_size=2, max_size=2), min_size=1, max_size=30))
def test_sliding_counters_are_counted_exactly(length: int, flags: list[list[int]]) -> None:
    window: tuple[object, ...] = tuple(np.zeros(2, dtype=np.int64) for _ in range(length))
    for pair in flags:
        window = FLOAT.slide(window, np.array(pair, dtype=np.int64))
        np.testing.assert_array_equal(FLOAT.count(window), np.sum(np.stack(list(window)), axis=0))


def test_an_empty_window_stays_empty_and_other_back_ends_slide_plain_tuples() -> None:
    assert FLOAT.slide((), 1.0) == ()
    assert EXACT.slide((Fraction(1), Fraction(2)), Fraction(3)) == (Fraction(2), Fraction(3))
    assert EXACT.count([1, 0, 1]) == 2
    slid = FLOAT.slide((0.5, 0.25), 0.125)
    assert tuple(slid) == (0.25, 0.125) and type(FLOAT.slide(slid, 1.0)) is SlidingValues


def test_a_long_stream_does_not_drift() -> None:
    window: tuple[object, ...] = (0.0, 0.0, 0.0)
    for _ in range(1000):
        window = FLOAT.slide(window, np.array([0.1, 1 / 3]))
    exact = [3 * Fraction(0.1), 3 * Fraction(1 / 3)]
    for total, true in zip(FLOAT.sum_up(window), exact, strict=True):
        assert true <= Fraction(float(total)) <= true * (1 + Fraction(16, 2**52))


def test_ghost_state_is_skipped_by_the_float_back_end_and_fails_loudly_if_read() -> None:
    import pytest

    from budgetcheck.ops import GHOST, per_run
    from budgetcheck.proving import RuleEnv
    from mechanisms.rules import BARule

    rule, env = BARule(), RuleEnv(1.0, 4)
    assert rule.initial(EXACT, env) == (1, 1, (0.0, 0.0, 0.0))
    state = per_run(rule.initial(FLOAT, env), 3)
    assert state[2] is GHOST and state[0].shape == (3,)
    state = rule.advance(
        FLOAT, env, state, np.array([True, False, True]), rule.charges(FLOAT, env, state, np.full(3, True))
    )
    assert state[2] is GHOST
    with pytest.raises(TypeError, match="ghost"):
        GHOST[0]
    with pytest.raises(TypeError, match="ghost"):
        bool(GHOST)
