"""Growing groups of values kept sorted per row: PeGaSus's and AdaPub's groups (Chen et al. 2017, §4.2-4.3).

Each row (a run and cell) holds one group, which only grows by one value a step or restarts with
it. The values are stored rank-major, (capacity, rows), ascending and padded with +inf, so that
the k-th smallest value of every row is one contiguous array and every update works on whole
blocks: ranks [0, 16) for every row, the tiers [16, 64), [64, 256), … as one slice when a third
of the rows or more reach them, else only for the rows that do (groups are mostly short). Used for the smoother's medians over released
values (post-processing) and, inside :class:`budgetcheck.ThresholdTest`, for the group deviation
of true values without re-reading the whole group at every step.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck._errors import InvalidArgument
from budgetcheck._validation import check_positive_int

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

_FIRST_RANKS = 16


def _capacity(value: object) -> int:
    return check_positive_int(value, "capacity")


@attrs.define
class RankedRows:
    """Per row, the values of its current group in ascending order (see the module docstring).

    ``ranked[k, row]`` is the row's k-th smallest value for k < ``sizes[row]`` and +inf beyond, up to
    the end of the last tier the group reaches (later ranks may keep an earlier group's values);
    ``totals[row]`` is the group's sum. ``capacity`` bounds a group's size.
    """

    capacity: int = attrs.field(converter=_capacity)
    ranked: FloatArray = attrs.field(init=False, factory=lambda: np.empty((0, 0)))
    sizes: IntArray = attrs.field(init=False, factory=lambda: np.zeros(0, dtype=np.int64))
    totals: FloatArray = attrs.field(init=False, factory=lambda: np.zeros(0))
    _tier_rows: list[tuple[int, int, IntArray | None]] = attrs.field(init=False, factory=list)

    def insert(self, values: ArrayLike, restart: ArrayLike) -> None:
        """Add one value to every row's group; rows where ``restart`` holds begin a new group with it.

        Inserting v into an ascending row is, rank by rank, new[k] = max(min(old[k], v), old[k − 1])
        (old[−1] = −inf): three block operations and no search. Beyond a row's size this keeps
        the +inf padding. A tier is cleared for a row when its group enters it; a tier that a third
        of the rows or more reach is updated as one slice, else only for the rows that reach it.
        """
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        again = np.asarray(restart, dtype=np.bool_).reshape(-1)
        if self.sizes.size == 0:
            self.ranked = np.full((self.capacity, flat.size), np.inf)
            self.sizes, self.totals = np.zeros(flat.size, dtype=np.int64), np.zeros(flat.size)
        if flat.size != self.sizes.size or again.size != flat.size:
            raise InvalidArgument(f"values of {flat.size} rows and restart of {again.size} for {self.sizes.size} rows")
        ranked, sizes = self.ranked, np.where(again, 0, self.sizes)
        tiers = list(self._tiers(sizes))  # refuses a group beyond capacity before anything changes
        ranked[:_FIRST_RANKS, np.flatnonzero(again)] = np.inf  # later tiers are cleared when a group next reaches them
        self._tier_rows = tiers
        # the rank before each later tier, before any insertion
        edges = [ranked[low - 1].copy() if rows is None else ranked[low - 1, rows] for low, _, rows in tiers[1:]]
        _insert(ranked[: tiers[0][1]], flat, None)
        for (low, high, rows), edge in zip(tiers[1:], edges, strict=True):
            if rows is None:  # as one slice: the rows short of the tier shuffle values no one reads
                ranked[low:high, np.flatnonzero(sizes == low)] = np.inf  # entering: what an earlier group left goes
                _insert(ranked[low:high], flat, edge)
            else:
                block = ranked[low:high, rows]
                block[:, sizes[rows] == low] = np.inf
                _insert(block, flat[rows], edge)
                ranked[low:high, rows] = block
        self.sizes = sizes + 1
        self.totals = np.where(again, flat, self.totals + flat)

    def median(self) -> FloatArray:
        """Every row's group median (the mean of the two middle values of an even group), shape (rows,)."""
        sizes, rows = self.sizes, np.arange(self.sizes.size)
        return np.asarray((self.ranked[(sizes - 1) // 2, rows] + self.ranked[sizes // 2, rows]) / 2.0, dtype=np.float64)

    def deviation(self) -> FloatArray:
        """Every row's Σ_i |c_i − mean| over its group (PeGaSus's deviation), shape (rows,).

        With m the mean, Σ_i |c_i − m| = 2 Σ_{c_i < m} (m − c_i) (the parts above and below m
        balance), so each tier costs a subtraction, a maximum and a sum; +inf padding adds 0.
        """
        mean = self.totals / np.maximum(self.sizes, 1)
        result = np.zeros(self.sizes.size)
        for low, high, rows in self._tier_rows:  # the rows whose group reaches each tier (None: as one slice)
            if rows is None:  # every row; the rows short of the tier (which may hold old values) add nothing
                part = np.maximum(mean - self.ranked[low:high], 0.0).sum(axis=0)
                result += part if low == 0 else np.where(self.sizes > low, part, 0.0)
            else:
                result[rows] += np.maximum(mean[rows] - self.ranked[low:high, rows], 0.0).sum(axis=0)
        return 2.0 * result

    def _tiers(self, sizes: IntArray) -> Iterator[tuple[int, int, IntArray | None]]:
        """(low, high, rows) of every tier of ranks [low, high) that some row with ``sizes`` reaches once
        one more value is in: [0, 16), then [16, 64), [64, 256), … with the rows of size >= low, or
        None when a third of the rows or more reach it: the tier is then one slice."""
        low, longest = _FIRST_RANKS, int(sizes.max()) if sizes.size else 0
        if longest >= self.capacity:
            raise InvalidArgument(f"a group outgrew capacity={self.capacity}: close groups at that length")
        yield 0, min(_FIRST_RANKS, self.capacity), None
        while low <= longest and low < self.capacity:
            rows = np.flatnonzero(sizes >= low)
            yield low, min(4 * low, self.capacity), None if 3 * rows.size >= sizes.size else rows
            low *= 4


def _insert(block: FloatArray, values: FloatArray, before: FloatArray | None) -> None:
    """Insert ``values`` (one per column) into the ascending columns of ``block`` (ranks × rows)
    in place; ``before`` is, per column, the entry of the rank just before the block's first (None:
    the block starts at rank 0). The last entry of a full block falls off (the caller's block is
    deep enough for every group)."""
    previous = block[:-1].copy()
    np.minimum(block, values, out=block)
    np.maximum(block[1:], previous, out=block[1:])
    if before is not None:
        np.maximum(block[0], before, out=block[0])
