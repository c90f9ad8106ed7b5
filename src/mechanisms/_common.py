"""Pieces shared by the built-in mechanisms; they use budgetcheck's public API only."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]


def truncate(values: FloatArray) -> FloatArray:
    """The benchmark's FILTERING by truncation: max(0, round(p)) (Schäler et al. 2022, §2.2)."""
    return np.maximum(0.0, np.round(values))


def filtered(values: FloatArray, enabled: bool) -> FloatArray:
    """Apply truncation when ``enabled``; otherwise return the perturbed values unchanged."""
    return truncate(values) if enabled else values


def empty_releases(runs: int, length: int, dimensions: int) -> FloatArray:
    """The (runs, T, d) output array of a mechanism."""
    return np.zeros((runs, length, dimensions), dtype=np.float64)
