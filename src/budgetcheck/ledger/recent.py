"""The rows of the most recent timestamps, oldest first, as one contiguous array (no per-step stacking).

An AboveThreshold instance reads every timestamp of its footprint at each query; keeping those rows
in a list and stacking them costs a copy of the whole footprint per timestamp. Here rows are written
once into a buffer that is compacted (or doubled) only when it fills, so appending is amortised O(1)
and :meth:`RecentRows.view` is a slice.
"""

from __future__ import annotations

from typing import final

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@final
class RecentRows:
    """Rows appended with increasing timestamps; :meth:`keep_from` forgets the older ones."""

    __slots__ = ("_high", "_low", "_stamps", "_values")

    def __init__(self) -> None:
        self._values: FloatArray | None = None
        self._stamps: IntArray = np.zeros(0, dtype=np.int64)
        self._low = 0
        self._high = 0

    def append(self, t: int, row: FloatArray) -> None:
        if self._values is None:
            self._values = np.empty((16, *row.shape))
            self._stamps = np.zeros(16, dtype=np.int64)
        if self._high == len(self._stamps):
            self._make_room()
        assert self._values is not None
        self._values[self._high] = row
        self._stamps[self._high] = t
        self._high += 1

    def keep_from(self, oldest: int) -> None:
        """Forget the rows of timestamps before ``oldest``."""
        self._low += int(np.searchsorted(self._stamps[self._low : self._high], oldest))

    def view(self) -> tuple[IntArray, FloatArray]:
        """(timestamps (L,), rows (L, *row shape)), oldest first; read-only views."""
        if self._values is None:
            raise ValueError("no rows yet")
        stamps, values = self._stamps[self._low : self._high], self._values[self._low : self._high]
        stamps.flags.writeable = False
        values.flags.writeable = False
        return stamps, values

    def _make_room(self) -> None:
        assert self._values is not None
        kept = self._high - self._low
        size = len(self._stamps) * 2 if 2 * kept > len(self._stamps) else len(self._stamps)
        values, stamps = np.empty((size, *self._values.shape[1:])), np.zeros(size, dtype=np.int64)
        values[:kept], stamps[:kept] = self._values[self._low : self._high], self._stamps[self._low : self._high]
        self._values, self._stamps, self._low, self._high = values, stamps, 0, kept
