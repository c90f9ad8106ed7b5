"""Error metrics of the benchmark (Schäler et al. 2022, §2.3 and §4.4) and the MAE deterioration (§5.1).

MAE(Q(S_p), R) = 1/p Σ_t |Q(D_t) − r_t|, averaged over the d dimensions;
MRE = 1/p Σ_t |Q(D_t) − r_t| / max(Q(D_t), γ_d) with γ_d = bound · Σ_t Q(D_t)[d];
δ_MAE(m, c) = MAE(m, c) / min_{m'} MAE(m', c).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]


def truncate(releases: FloatArray) -> FloatArray:
    """max(0, round(r)): the post-processing applied to releases on real streams."""
    return np.maximum(0.0, np.round(releases))


def errors(truth: FloatArray, releases: FloatArray, mre_bound: float) -> tuple[FloatArray, FloatArray]:
    """(MAE, MRE) per run: ``truth`` (T, d), ``releases`` (runs, T, d)."""
    truth = np.asarray(truth, dtype=np.float64)
    if releases.ndim != 3 or releases.shape[1:] != truth.shape:
        raise InvalidArgument(
            f"releases must have shape (runs, {truth.shape[0]}, {truth.shape[1]}), got {releases.shape}"
        )
    gamma = mre_bound * truth.sum(axis=0)
    denominator = np.maximum(truth, gamma)
    # A dimension that is 0 everywhere has γ_d = 0: its relative error is undefined; such a
    # dimension falls back to γ_d = 1 (a count stream's smallest positive value).
    denominator = np.where(denominator > 0.0, denominator, 1.0)
    error = np.subtract(releases, truth, dtype=np.float64)
    np.abs(error, out=error)
    mae = error.mean(axis=(1, 2))
    error /= denominator  # in place: one (runs, T, d) temporary for both metrics
    return mae, error.mean(axis=(1, 2))


def deterioration(mae: FloatArray) -> FloatArray:
    """δ_MAE: each entry divided by the smallest along the last axis (the mechanisms axis)."""
    best = np.min(mae, axis=-1, keepdims=True)
    return np.asarray(mae / best, dtype=np.float64)
