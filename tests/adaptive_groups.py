"""Generated sequences of growing groups, shared by the AboveThreshold and smoothing tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import strategies as st


def growing_groups(
    data: Any, rows: int, capacity: int, most_steps: int
) -> Iterator[tuple[np.ndarray, np.ndarray, list[list[float]], np.ndarray]]:
    """Drawn steps of groups that grow by one value a row or restart (at the first step, at capacity,
    and at random in the rows that are not sticky, so some grow past ranks 16 and 64): (values,
    restart, the groups in time order, those groups as a NaN-padded matrix) after each step."""
    groups: list[list[float]] = [[] for _ in range(rows)]
    values = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, 1.0, -1.0])
    sticky = data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows), label="sticky")
    for step in range(data.draw(st.integers(1, most_steps))):
        new = np.array(data.draw(st.lists(values, min_size=rows, max_size=rows)))
        restart = np.array(
            [
                step == 0 or len(g) == capacity or not sticky[row] and data.draw(st.booleans(), label="restart")
                for row, g in enumerate(groups)
            ]
        )
        for row, group in enumerate(groups):
            groups[row] = [new[row]] if restart[row] else [*group, new[row]]
        width = max(len(g) for g in groups)
        yield new, restart, groups, np.array([[np.nan] * (width - len(g)) + g for g in groups])
