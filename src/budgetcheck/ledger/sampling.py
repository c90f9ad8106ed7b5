"""Optimal Budget Selection and the Sampling Mechanism's inclusion probabilities.

Du et al. 2025, Algorithm 1 (OBS) with the errors of Definitions 4.1-4.2: for a threshold θ,
err(θ) = Σ_{ε_c<θ} n_c p_c (1 − p_c) + (Σ_{ε_c<θ} n_c (1 − p_c))² + 2 s²/θ², with
p_c = (e^{ε_c} − 1)/(e^{θ} − 1) (Jorgensen et al. 2015). OBS picks the candidate ε_c with the
least error; ties go to the smallest ε (as the public artifact does). Vectorised over runs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import libm
from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]
# p is rounded down by this factor so that float error (expm1 and a division: < 3 ulp) can only
# lower a user's inclusion probability, never raise it above (e^{ε_i} − 1)/(e^{θ} − 1).
_DOWN = 1.0 - 2.0**-48


def _as_budgets(budgets: ArrayLike, classes: int) -> FloatArray:
    arr = np.asarray(budgets, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != classes:
        raise InvalidArgument(f"budgets must have shape (runs, {classes}) or ({classes},), got {arr.shape}")
    if (~np.isfinite(arr) | (arr < 0)).any():
        raise InvalidArgument(f"budgets must be finite and >= 0, got {arr!r}")
    return arr


def inclusion_probabilities(budgets: ArrayLike, theta: ArrayLike) -> FloatArray:
    """p_c = (e^{ε_c} − 1)/(e^{θ} − 1) for ε_c < θ (rounded down), 1 for ε_c >= θ, 0 for ε_c = 0."""
    b = np.asarray(budgets, dtype=np.float64)
    th = np.asarray(theta, dtype=np.float64)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = libm.expm1(b) / libm.expm1(th) * _DOWN
    p = np.where(b >= th, 1.0, ratio)
    return np.where((b > 0) & (th > 0), np.clip(p, 0.0, 1.0), 0.0)


def sampling_error(budgets: ArrayLike, counts: ArrayLike, theta: ArrayLike, sensitivity: float = 1.0) -> FloatArray:
    """err(θ) of Du et al. 2025, Eq. (1) + Eq. (2), per run (shape of θ)."""
    b = np.asarray(budgets, dtype=np.float64)
    n = np.asarray(counts, dtype=np.float64)
    th = np.asarray(theta, dtype=np.float64)
    p = inclusion_probabilities(b, th)
    below = b < th[..., None]
    variance = (below * n * p * (1.0 - p)).sum(axis=-1)
    bias = (below * n * (1.0 - p)).sum(axis=-1)
    with np.errstate(divide="ignore"):
        return np.asarray(variance + bias**2 + 2.0 * sensitivity**2 / th**2, dtype=np.float64)


def optimal_budget(budgets: ArrayLike, counts: ArrayLike, *, sensitivity: float = 1.0) -> tuple[FloatArray, FloatArray]:
    """OBS (Du et al. 2025, Algorithm 1) per run: (θ, err(θ)), each of shape (runs,).

    ``budgets`` holds ε_c per class (shape (classes,) or (runs, classes)), ``counts`` n_c. Only
    classes with users and a positive budget are candidates; a run with none gets θ = 0, err = inf.
    """
    n = np.asarray(counts, dtype=np.float64)
    b = _as_budgets(budgets, n.size)
    candidates = np.where((b > 0) & (n > 0), b, np.nan)  # (runs, K)
    safe = np.nan_to_num(candidates, nan=1.0)
    err = sampling_error(b[:, None, :], n, safe, sensitivity)  # (runs, K)
    err = np.where(np.isnan(candidates), np.inf, err)
    best = err.min(axis=1)
    tied = np.where((err == best[:, None]) & np.isfinite(err), candidates, np.inf)
    theta = tied.min(axis=1)
    return np.where(np.isfinite(theta), theta, 0.0), best
