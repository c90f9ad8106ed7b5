"""RecentRows (the AboveThreshold's footprint buffer) against a list of (t, row) pairs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgetcheck.ledger.recent import RecentRows


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40)), min_size=1, max_size=120), st.integers(1, 3))
def test_recent_rows_match_a_list(steps: list[tuple[int, int]], width: int) -> None:
    """Appending with gaps in t and forgetting up to a moving oldest gives the list's rows, oldest first."""
    recent, oracle, t, oldest = RecentRows(), [], 0, 0  # type: RecentRows, list[tuple[int, np.ndarray]], int, int
    for gap, lag in steps:
        t += gap
        row = np.full((2, width), float(t))
        recent.append(t, row)
        oracle.append((t, row))
        oldest = max(oldest, t - lag)
        recent.keep_from(oldest)
        oracle = [(s, r) for s, r in oracle if s >= oldest]
        stamps, values = recent.view()
        assert stamps.tolist() == [s for s, _ in oracle]
        np.testing.assert_array_equal(values, np.stack([r for _, r in oracle]))
        with pytest.raises(ValueError):
            values[0, 0, 0] = 1.0  # read-only


def test_recent_rows_view_before_any_row() -> None:
    with pytest.raises(ValueError, match="no rows"):
        RecentRows().view()
