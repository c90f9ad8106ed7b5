"""Exact sliding-window sums per run (the arithmetic behind every window check).

Amounts are exact integers in units of 2**-1127 (:mod:`budgetcheck.rounding`), held per run as
:class:`ExactVector` limbs, so sums are exact.
The structure keeps, per run, the totals of the timestamps inside the current window and the
window sum, updated incrementally: a check costs O(runs) and does not grow with the stream length.
"""

from __future__ import annotations

import collections
from typing import final

from budgetcheck._exact import ExactVector

zeros = ExactVector.zeros


@final
class ExactWindows:
    """Σ_{k=t−w+1}^{t} ε_k for every run, exactly; propose first, commit after the check passes."""

    __slots__ = ("_entries", "_past", "_runs", "_sum", "_w")

    def __init__(self, w: int, runs: int) -> None:
        self._w = w
        self._runs = runs
        # (timestamp, exact per-run totals) for the timestamps inside the current window with spends.
        self._entries: collections.deque[tuple[int, ExactVector]] = collections.deque()
        # Entries that left the window, kept for w − 1 more timestamps: a footprint charge at a
        # timestamp of the current window changes windows that reach that far back.
        self._past: collections.deque[tuple[int, ExactVector]] = collections.deque()
        self._sum = zeros(runs)

    @property
    def w(self) -> int:
        return self._w

    def prospective(self, t: int) -> tuple[ExactVector, int]:
        """The exact sum of window [t−w+1, t−1] before a spend at t, and how many entries leave."""
        window = self._sum
        leaving = 0
        for entry_t, totals in self._entries:
            if entry_t > t - self._w:
                break
            window = window - totals
            leaving += 1
        return window, leaving

    def commit(self, t: int, added: ExactVector, proposed: ExactVector, leaving: int) -> None:
        """Record ``added`` at t; ``proposed``/``leaving`` come from :meth:`prospective` plus added."""
        self._retire(t, leaving)
        if self._entries and self._entries[-1][0] == t:
            last_t, totals = self._entries.pop()
            self._entries.append((last_t, totals + added))
        else:
            self._entries.append((t, added))
        self._sum = proposed

    def footprint(self, t: int, added: dict[int, ExactVector]) -> list[tuple[int, ExactVector, ExactVector]]:
        """Charges at several timestamps s <= t: (end, sum before, sum after) of every window that changes.

        The windows that change are those ending in [min s, t] (later windows are checked by the
        spends that reach them). Needs every s >= t − w + 1 (older entries are not kept).
        """
        first = min(added)
        lo = first - self._w + 1
        before = self._dense(lo, t)
        after = list(before)
        for s, units in added.items():
            after[s - lo] = after[s - lo] + units
        sum_before = sum(before[: self._w], zeros(self._runs))
        sum_after = sum(after[: self._w], zeros(self._runs))
        windows = [(first, sum_before, sum_after)]
        for end in range(first + 1, t + 1):
            sum_before = sum_before + before[end - lo] - before[end - lo - self._w]
            sum_after = sum_after + after[end - lo] - after[end - lo - self._w]
            windows.append((end, sum_before, sum_after))
        return windows

    def commit_footprint(self, t: int, added: dict[int, ExactVector]) -> None:
        """Record charges at several timestamps (checked with :meth:`footprint`); t becomes the latest."""
        _, leaving = self.prospective(t)
        self._retire(t, leaving)
        merged = {s: totals for s, totals in self._entries}
        for s, units in added.items():
            merged[s] = merged.get(s, zeros(self._runs)) + units
        self._entries = collections.deque(sorted(merged.items(), key=lambda item: item[0]))
        self._sum = sum((totals for _, totals in self._entries), zeros(self._runs))

    def _retire(self, t: int, leaving: int) -> None:
        for _ in range(leaving):
            self._past.append(self._entries.popleft())
        while self._past and self._past[0][0] <= t - 2 * self._w + 1:
            self._past.popleft()

    def _dense(self, lo: int, hi: int) -> list[ExactVector]:
        """Exact per-run totals of every timestamp in [lo, hi] (zeros where nothing was spent)."""
        dense = [zeros(self._runs) for _ in range(lo, hi + 1)]
        for s, totals in (*self._past, *self._entries):
            if lo <= s <= hi:
                dense[s - lo] = totals
        return dense
