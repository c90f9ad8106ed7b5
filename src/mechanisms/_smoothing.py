"""Group smoothers over released values (PeGaSus's Smoother, AdaPub's cluster median): post-processing.

A group is, per run and dimension, the timestamps [start, t] of an AboveThreshold footprint (or
{t} alone). The history holds the *perturbed* releases of the last timestamps, never true data.
"""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import InvalidArgument, RankedRows, Secret, ThresholdAnswer, ThresholdTest, deviation

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

SMOOTHERS = ("median", "average", "james-stein")


def check_smoother(value: object) -> str:
    if value not in SMOOTHERS:
        raise InvalidArgument(f"smoother={value!r} must be one of {SMOOTHERS}")
    return str(value)


def smooth(values: FloatArray, smoother: str, noise_variance: float | FloatArray) -> FloatArray:
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


def shrunk(
    smoother: str,
    newest: FloatArray,
    count: IntArray,
    mean: FloatArray,
    spread: FloatArray,
    noise_variance: float | FloatArray,
) -> FloatArray:
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
    """Per run and dimension, the perturbed releases of the group holding t, kept sorted
    (:class:`budgetcheck.RankedRows`: one insertion per row and step, no sort and no stacking of
    the history). ``capacity`` bounds a group's length (the AboveThreshold's ``max_footprint``).
    """

    capacity: int
    groups: RankedRows | None = None
    newest: FloatArray | None = None  # (runs · d,): t's releases

    def step(
        self,
        test: ThresholdTest,
        secret: Secret,
        perturbed: FloatArray,
        thresholds: ArrayLike,
        smoother: str,
        noise_variance: float | FloatArray,
    ) -> tuple[ThresholdAnswer, FloatArray]:
        """One grouper step: query the AboveThreshold on the group deviation, then smooth over the
        group holding t (a positive answer leaves t alone; a new instance starts a group at t)."""
        answer = test.query(secret, deviation, thresholds)
        self.add(perturbed, answer.above | answer.opened)
        return answer, self.smoothed(smoother, noise_variance).reshape(perturbed.shape)

    def add(self, perturbed: FloatArray, restart: BoolArray) -> None:
        """Insert t's releases; rows where ``restart`` hold begin a new group {t}."""
        if self.groups is None:
            self.groups = RankedRows(self.capacity)
        self.newest = np.asarray(perturbed, dtype=np.float64).reshape(-1)
        self.groups.insert(self.newest, restart)

    def smoothed(self, smoother: str, noise_variance: float | FloatArray) -> FloatArray:
        """The smoothed release of every row's group (see :func:`smooth`), shape (runs · d,)."""
        if self.groups is None or self.newest is None:
            raise InvalidArgument("no group holds a release yet")
        if smoother == "median":
            return self.groups.median()
        sizes = self.groups.sizes
        inside = np.arange(int(sizes.max()))[:, None] < sizes
        head = np.where(inside, self.groups.ranked[: inside.shape[0]], 0.0)
        mean = head.sum(axis=0) / sizes
        spread = np.where(inside, (head - mean) ** 2, 0.0).sum(axis=0)
        return shrunk(smoother, self.newest, sizes, mean, spread, noise_variance)
