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

SMOOTHERS = ("median", "average", "james-stein")


def check_smoother(value: object) -> str:
    if value not in SMOOTHERS:
        raise InvalidArgument(f"smoother={value!r} must be one of {SMOOTHERS}")
    return str(value)


def smooth(values: FloatArray, smoother: str, noise_variance: float) -> FloatArray:
    """Smooth the newest entry of each group along axis 1 (NaN = not in the group).

    median / average: of the group's perturbed values (Chen et al. 2017, §4.3). james-stein: the
    newest value shrunk towards the group mean by the positive-part James–Stein factor
    1 − (k − 3)σ²/Σ(x − mean)² with σ² the perturbation's noise variance (k <= 3: the mean).
    """
    count = (~np.isnan(values)).sum(axis=1)
    total = np.nansum(values, axis=1)
    mean = total / np.maximum(count, 1)
    if smoother == "average":
        return np.asarray(mean, dtype=np.float64)
    if smoother == "median":
        ordered = np.sort(values, axis=1)  # NaN last
        low = np.take_along_axis(ordered, ((count - 1) // 2)[:, None], axis=1)[:, 0]
        high = np.take_along_axis(ordered, (count // 2)[:, None], axis=1)[:, 0]
        return np.asarray((low + high) / 2.0, dtype=np.float64)
    newest = values[:, -1]
    spread = np.nansum((values - mean[:, None]) ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.clip(1.0 - (count - 3) * noise_variance / spread, 0.0, 1.0)
    factor = np.where((count > 3) & (spread > 0), factor, 0.0)
    return np.asarray(mean + factor * (newest - mean), dtype=np.float64)


@attrs.define
class GroupHistory:
    """The perturbed releases of recent timestamps, shape (L, runs, d), to smooth over groups."""

    stamps: list[int] = attrs.field(factory=list)
    values: list[FloatArray] = attrs.field(factory=list)

    def step(
        self, test: ThresholdTest, secret: Secret, perturbed: FloatArray, thresholds: ArrayLike, smoother: str, noise_variance: float
    ) -> tuple[ThresholdAnswer, FloatArray]:
        """One grouper step: query the AboveThreshold on the group deviation, then smooth over the
        group holding t (a positive answer leaves t alone; a new instance starts a group at t)."""
        answer = test.query(secret, deviation, thresholds)
        starts = np.where(answer.above, secret.t, test.starts)
        self.add(secret.t, perturbed, int(starts.min()))
        return answer, self.smoothed(starts, smoother, noise_variance)

    def add(self, t: int, perturbed: FloatArray, oldest_needed: int) -> None:
        self.stamps.append(t)
        self.values.append(perturbed)
        while self.stamps and self.stamps[0] < oldest_needed:
            self.stamps.pop(0)
            self.values.pop(0)

    def smoothed(self, starts: IntArray, smoother: str, noise_variance: float) -> FloatArray:
        """Per (run, dim): smooth the releases of timestamps >= starts[run, dim] (the newest included)."""
        stamps = np.array(self.stamps)
        stacked = np.stack(self.values)  # (L, runs, d)
        inside = stamps[:, None, None] >= starts[None]
        masked = np.where(inside, stacked, np.nan)
        runs, d = starts.shape
        flat = np.moveaxis(masked, 0, -1).reshape(runs * d, -1)
        return smooth(flat, smoother, noise_variance).reshape(runs, d)
