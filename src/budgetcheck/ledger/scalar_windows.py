"""Exact sliding-window sums of a single run: Python integers, no limbs and no float pre-check.

Kellaris et al. 2014, Theorem 3: every window [t−w+1, t] spends at most ε. With one run the exact
window sum is one Python integer in units of 2**-1127 (:mod:`budgetcheck.rounding`); an addition or
a comparison of such integers costs less than keeping a float bound certified, so every check is the
exact one and ``remaining`` is exact too. The interface is :class:`~budgetcheck.ledger.windows.ExactWindows`'
(values cross it as one-run :class:`ExactVector`), so the ledger runs one code path for any number of runs.
"""

from __future__ import annotations

import collections
from typing import final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.exact import ExactVector

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@final
class ScalarWindows:
    """Σ_{k=t−w+1}^{t} ε_k of one run, exactly: (t, units) per timestamp with spends, and their sum."""

    __slots__ = ("_entries", "_past", "_sum", "_w")

    def __init__(self, w: int) -> None:
        self._w = w
        self._entries: collections.deque[tuple[int, int]] = collections.deque()  # inside the current window
        # left the window, kept for w − 1 more timestamps (a footprint charge reaches windows that far back)
        self._past: collections.deque[tuple[int, int]] = collections.deque()
        self._sum = 0  # Σ units of _entries

    @property
    def w(self) -> int:
        return self._w

    def copy(self) -> ScalarWindows:
        other = ScalarWindows(self._w)
        other._entries, other._past = collections.deque(self._entries), collections.deque(self._past)
        other._sum = self._sum
        return other

    def window_units(self, t: int) -> tuple[int, int]:
        """The exact sum of window [t−w+1, t−1] before a spend at t, and how many entries leave."""
        window, leaving, oldest = self._sum, 0, t - self._w
        for s, units in self._entries:
            if s > oldest:
                break
            window -= units
            leaving += 1
        return window, leaving

    def prospective(self, t: int) -> tuple[ExactVector, int]:
        window, leaving = self.window_units(t)
        return ExactVector.from_int(window), leaving

    def spend_units(self, t: int, units: int, bound: int) -> bool:
        """Commit ``units`` at t if window [t−w+1, t] stays <= ``bound`` (exactly); else change nothing."""
        checked = self.check_units(t, units, bound)
        if checked is None:
            return False
        self.commit_units(t, *checked)
        return True

    def check_units(self, t: int, units: int, bound: int) -> tuple[int, tuple[int, int]] | None:
        """Whether ``units`` at t keep window [t−w+1, t] <= ``bound`` (exactly): then (the window sum after,
        the entry of t after) for :meth:`commit_units`; else None. Changes nothing."""
        entries, window, oldest = self._entries, self._sum, t - self._w
        for s, held in entries:
            if s > oldest:
                break
            window -= held
        if window + units > bound:
            return None
        last = entries[-1] if entries else None
        return window + units, (t, last[1] + units) if last is not None and last[0] == t else (t, units)

    def commit_units(self, t: int, after: int, entry: tuple[int, int]) -> None:
        """Commit what :meth:`check_units` gave. Idempotent for the same ``entry`` object: interrupted half way
        (a signal handler that raised), calling it again completes it (the ledger's in-flight operation)."""
        entries, past, oldest = self._entries, self._past, t - self._w
        while entries and entries[0][0] <= oldest:
            leaving = entries[0]
            if not (past and past[-1] is leaving):
                past.append(leaving)
            entries.popleft()
        horizon = oldest - self._w + 1
        while past and past[0][0] <= horizon:
            past.popleft()
        if not (entries and entries[-1] is entry):
            if entries and entries[-1][0] == t:
                entries[-1] = entry
            else:
                entries.append(entry)
        self._sum = after

    def commit(self, t: int, amounts: FloatArray, added: ExactVector, proposed: ExactVector, leaving: int) -> None:
        """Record ``added`` at t; ``proposed``/``leaving`` come from :meth:`prospective` plus added."""
        self._retire(t, leaving)
        self._add(t, added[0])
        self._sum = proposed[0]

    def footprint(self, t: int, added: dict[int, ExactVector]) -> list[tuple[int, ExactVector, ExactVector]]:
        """Charges at several timestamps s <= t: (end, sum before, sum after) of every window ending in
        [min s, t] (needs every s >= t − w + 1; older entries are not kept)."""
        first = min(added)
        # the kept totals in (first − w, t], by timestamp: the cost follows the entries and t − first, not w
        before = {s: units for s, units in (*self._past, *self._entries) if first - self._w < s <= t}
        after = dict(before)
        for s, vector in added.items():
            after[s] = after.get(s, 0) + vector[0]
        sum_before = sum(units for s, units in before.items() if s <= first)
        sum_after = sum(units for s, units in after.items() if s <= first)
        windows = [(first, sum_before, sum_after)]
        for end in range(first + 1, t + 1):
            sum_before += before.get(end, 0) - before.get(end - self._w, 0)
            sum_after += after.get(end, 0) - after.get(end - self._w, 0)
            windows.append((end, sum_before, sum_after))
        return [(end, ExactVector.from_int(b), ExactVector.from_int(a)) for end, b, a in windows]

    def commit_footprint(self, t: int, added: dict[int, ExactVector]) -> None:
        """Record charges at several timestamps (checked with :meth:`footprint`); t becomes the latest."""
        merged = dict((*self._past, *self._entries))
        for s, vector in added.items():
            merged[s] = merged.get(s, 0) + vector[0]
        self._rebuild(t, merged)

    def shared_totals(self, runs: IntArray | None = None) -> dict[int, int]:
        """The exact total of every timestamp kept (current window and the w − 1 before it): {t: units}."""
        return dict((*self._past, *self._entries))

    def replace(self, t: int, totals: list[dict[int, int]], groups: list[IntArray | None]) -> None:
        """Make the state that of exact totals {s: units} (one group: the one run), t the latest."""
        (kept,) = totals
        self._rebuild(t, kept)

    def _rebuild(self, t: int, totals: dict[int, int]) -> None:
        kept = sorted((s, units) for s, units in totals.items() if s > t - 2 * self._w + 1)
        self._past = collections.deque((s, units) for s, units in kept if s <= t - self._w)
        self._entries = collections.deque((s, units) for s, units in kept if s > t - self._w)
        self._sum = sum(units for _, units in self._entries)

    def _add(self, t: int, units: int) -> None:
        if self._entries and self._entries[-1][0] == t:
            self._entries[-1] = (t, self._entries[-1][1] + units)
        else:
            self._entries.append((t, units))

    def _retire(self, t: int, leaving: int) -> None:
        for _ in range(leaving):
            self._past.append(self._entries.popleft())
        while self._past and self._past[0][0] <= t - 2 * self._w + 1:
            self._past.popleft()
