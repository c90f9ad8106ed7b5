"""Exact sliding-window sums per run (the arithmetic behind every window check).

Amounts are Python integers in units of 2**-1127 (:mod:`budgetcheck.rounding`), so sums are exact.
The structure keeps, per run, the totals of the timestamps inside the current window and the
window sum, updated incrementally: a check costs O(runs) and does not grow with the stream length.
"""

from __future__ import annotations

import collections
from typing import final

import numpy as np
from numpy.typing import NDArray

ObjectArray = NDArray[np.object_]


def zeros(runs: int) -> ObjectArray:
    """An exact all-zero per-run vector (object array of Python ints)."""
    return np.zeros(runs, dtype=np.int64).astype(object)


@final
class ExactWindows:
    """Σ_{k=t−w+1}^{t} ε_k for every run, exactly; propose first, commit after the check passes."""

    __slots__ = ("_entries", "_sum", "_w")

    def __init__(self, w: int, runs: int) -> None:
        self._w = w
        # (timestamp, exact per-run totals) for the timestamps inside the current window with spends.
        self._entries: collections.deque[tuple[int, ObjectArray]] = collections.deque()
        self._sum = zeros(runs)

    @property
    def w(self) -> int:
        return self._w

    def prospective(self, t: int) -> tuple[ObjectArray, int]:
        """The exact sum of window [t−w+1, t−1] before a spend at t, and how many entries leave."""
        window = self._sum
        leaving = 0
        for entry_t, totals in self._entries:
            if entry_t > t - self._w:
                break
            window = window - totals
            leaving += 1
        return window, leaving

    def commit(self, t: int, added: ObjectArray, proposed: ObjectArray, leaving: int) -> None:
        """Record ``added`` at t; ``proposed``/``leaving`` come from :meth:`prospective` plus added."""
        for _ in range(leaving):
            self._entries.popleft()
        if self._entries and self._entries[-1][0] == t:
            last_t, totals = self._entries.pop()
            self._entries.append((last_t, totals + added))
        else:
            self._entries.append((t, added))
        self._sum = proposed
