"""Shared by the data-adaptive tests: the mechanisms under test, a bound ledger, the brute-force
window sums, and generated sequences of growing groups (AboveThreshold and smoothing)."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st

from budgetcheck import GuardedStream, WEventParams, WindowLedger
from mechanisms import AdaPub, DSATw, FASTw, PeGaSus, RescueDP


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


ADAPTIVE = [
    FASTw(),
    FASTw(sampling_ratio=0.075),
    DSATw(),
    DSATw(sample_rate=0.15),
    RescueDP(),
    RescueDP(grouping=False),
    AdaPub(),
    AdaPub(grouping=False),
    PeGaSus(),
    PeGaSus(smoother="james-stein"),
]


def bound_ledger(
    epsilon: float = 1.0, w: int = 4, runs: int = 1, data: object = None
) -> tuple[WindowLedger, list[object]]:
    ledger = WindowLedger(
        WEventParams(epsilon, w),
        runs=runs,
        seed=3,
        sampler="numpy-laplace",
        keep_records=True,
        trusted_code=True,
        allow_vouched=True,
    )  # the owner allows the footprints and statistics these tests run
    stream = GuardedStream(np.arange(24.0).reshape(8, 3) if data is None else data)
    ledger.bind(stream)
    return ledger, list(stream)


def window_sums(records: object, w: int, runs: int) -> list[Fraction]:
    """The largest window sum per run, brute force over every window."""
    totals: dict[int, list[Fraction]] = {}
    for record in records:  # type: ignore[attr-defined]
        row = totals.setdefault(record.t, [Fraction(0)] * runs)
        for r in range(runs):
            row[r] += Fraction(float(record.amounts[r]))
    horizon = max(totals, default=0)
    return [
        max(
            (
                sum((totals.get(s, [Fraction(0)] * runs)[r] for s in range(e - w + 1, e + 1)), Fraction(0))
                for e in range(1, horizon + 1)
            ),
            default=Fraction(0),
        )
        for r in range(runs)
    ]
