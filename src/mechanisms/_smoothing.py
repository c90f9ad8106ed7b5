"""Group smoothers over released values (PeGaSus's Smoother, AdaPub's cluster median): post-processing.

A group is, per run and dimension, the timestamps [start, t] of an AboveThreshold footprint (or
{t} alone). The history holds the *perturbed* releases of the last timestamps, never true data.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import InvalidArgument, Secret, ThresholdAnswer, ThresholdTest, deviation

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

SMOOTHERS = ("median", "average", "james-stein")
# Ranks [0, 8) of the history are updated for every row (most groups are shorter); the tiers
# [8, 32), [32, 128), … for the rows whose group reaches them.
_FIRST_RANKS = 8


def check_smoother(value: object) -> str:
    if value not in SMOOTHERS:
        raise InvalidArgument(f"smoother={value!r} must be one of {SMOOTHERS}")
    return str(value)


def smooth(values: FloatArray, smoother: str, noise_variance: float) -> FloatArray:
    """Smooth the newest entry of each group along axis 1 (NaN = not in the group).

    median / average: of the group's perturbed values (Chen et al. 2017, §4.3). james-stein: the
    newest value shrunk towards the group mean (:func:`shrunk`).
    """
    count = (~np.isnan(values)).sum(axis=1)
    if smoother == "median":
        ordered = np.sort(values, axis=1)  # NaN last
        low = np.take_along_axis(ordered, ((count - 1) // 2)[:, None], axis=1)[:, 0]
        high = np.take_along_axis(ordered, (count // 2)[:, None], axis=1)[:, 0]
        return np.asarray((low + high) / 2.0, dtype=np.float64)
    mean = np.nansum(values, axis=1) / np.maximum(count, 1)
    spread = np.nansum((values - mean[:, None]) ** 2, axis=1)
    return shrunk(smoother, values[:, -1], count, mean, spread, noise_variance)


def shrunk(smoother: str, newest: FloatArray, count: IntArray, mean: FloatArray, spread: FloatArray,
           noise_variance: float) -> FloatArray:
    """average: the group mean; james-stein: the newest value shrunk towards the mean by the
    positive-part James–Stein factor 1 − (k − 3)σ²/Σ(x − mean)², σ² the perturbation's noise
    variance (k <= 3: the mean)."""
    if smoother == "average":
        return np.asarray(mean, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a tiny spread: factor 0 after the clip
        factor = np.clip(1.0 - (count - 3) * noise_variance / spread, 0.0, 1.0)
    factor = np.where((count > 3) & (spread > 0), factor, 0.0)
    return np.asarray(mean + factor * (newest - mean), dtype=np.float64)


@attrs.define
class GroupHistory:
    """Per run and dimension, the perturbed releases of the group holding t, kept sorted.

    Groups only grow by t or restart at t, so each step inserts one value per row (O(group length),
    no sort and no stacking of the history); ``+inf`` pads each group beyond its size. The history
    is stored rank-major, (capacity, rows): the k-th smallest value of every row is one contiguous
    array, so an insertion works on whole contiguous blocks. ``capacity`` bounds a group's length
    (the AboveThreshold's ``max_footprint``).
    """

    capacity: int
    ranked: FloatArray | None = None  # (capacity, runs · d): ranked[k, row] = the row's k-th smallest, +inf padded
    sizes: IntArray | None = None  # (runs · d,)
    newest: FloatArray | None = None  # (runs · d,): t's releases

    def step(
        self, test: ThresholdTest, secret: Secret, perturbed: FloatArray, thresholds: ArrayLike, smoother: str, noise_variance: float
    ) -> tuple[ThresholdAnswer, FloatArray]:
        """One grouper step: query the AboveThreshold on the group deviation, then smooth over the
        group holding t (a positive answer leaves t alone; a new instance starts a group at t)."""
        answer = test.query(secret, deviation, thresholds)
        self.add(perturbed, answer.above | answer.opened)
        return answer, self.smoothed(smoother, noise_variance).reshape(perturbed.shape)

    def add(self, perturbed: FloatArray, restart: BoolArray) -> None:
        """Insert t's releases; rows where ``restart`` hold begin a new group {t}.

        Inserting v into an ascending row is, rank by rank, new[k] = max(min(old[k], v),
        old[k − 1]) (old[−1] = −inf): three whole-block operations, no search. Applied beyond a
        row's size it keeps the +inf padding, so ranks 0-7 are done for every row at once, ranks
        8-31 for the rows whose group is that long, ranks 32-127 for fewer rows still, and so on.
        """
        values = np.asarray(perturbed, dtype=np.float64).reshape(-1)
        if self.ranked is None or self.sizes is None:
            self.ranked = np.full((self.capacity, values.size), np.inf)
            self.sizes = np.zeros(values.size, dtype=np.int64)
        ranked, sizes, self.newest = self.ranked, self.sizes, values
        restarted = np.flatnonzero(restart.reshape(-1))
        if restarted.size:
            ranked[: int(sizes[restarted].max()), restarted] = np.inf  # beyond a group's size it is +inf already
            sizes[restarted] = 0
        if (sizes >= self.capacity).any():
            raise InvalidArgument(f"a group outgrew capacity={self.capacity}: the grouper must close groups at that length")
        tiers, low, longest = [], _FIRST_RANKS, int(sizes.max())
        while low <= longest:  # some group reaches rank `low` once t is inserted
            tiers.append((low, min(4 * low, self.capacity)))
            low *= 4
        edges = [ranked[low - 1].copy() for low, _ in tiers]  # the rank before each tier, before any insertion
        _insert(ranked[:_FIRST_RANKS], values, np.full(values.size, -np.inf))
        for (low, high), edge in zip(tiers, edges, strict=True):
            rows = np.flatnonzero(sizes >= low)
            block = ranked[low:high, rows]
            _insert(block, values[rows], edge[rows])
            ranked[low:high, rows] = block
        sizes += 1

    def smoothed(self, smoother: str, noise_variance: float) -> FloatArray:
        """The smoothed release of every row's group (see :func:`smooth`), shape (runs · d,)."""
        if self.ranked is None or self.sizes is None or self.newest is None:
            raise InvalidArgument("no group holds a release yet")
        sizes, rows = self.sizes, np.arange(self.sizes.size)
        if smoother == "median":
            ranked = self.ranked
            return np.asarray((ranked[(sizes - 1) // 2, rows] + ranked[sizes // 2, rows]) / 2.0, dtype=np.float64)
        inside = np.arange(int(sizes.max()))[:, None] < sizes
        head = np.where(inside, self.ranked[: inside.shape[0]], 0.0)
        mean = head.sum(axis=0) / sizes
        spread = np.where(inside, (head - mean) ** 2, 0.0).sum(axis=0)
        return shrunk(smoother, self.newest, sizes, mean, spread, noise_variance)


def _insert(block: FloatArray, values: FloatArray, before: FloatArray) -> None:
    """Insert ``values`` (one per column) into the ascending columns of ``block`` (ranks × rows)
    in place; ``before`` is, per column, the entry of the rank just before the block's first (−inf for rank 0).
    The last entry of a full block falls off (the caller's block is deep enough for every group)."""
    previous = np.empty_like(block)
    previous[0] = before
    previous[1:] = block[:-1]
    np.minimum(block, values, out=block)
    np.maximum(block, previous, out=block)
