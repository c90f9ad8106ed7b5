"""Artificial seasonal streams: the data generator of Schäler, Hütter, Schäler 2022, Algorithm 2.

Each season has a diced length sl ~ G(s, 2) and a diced minimum ~ G(8, 2) (G: normal with mean
and standard deviation); the stream grows by the factor e for ⌊sl/2⌋ timestamps and shrinks
symmetrically; the prefix of length p is scaled so that its maximum is the amplitude a. The paper
uses e = 1.5, the authors' public harness 1.3.

Choices where Algorithm 2 is silent (documented, tested): a season length is rounded to the
nearest integer and at least 2; a season minimum below 1 is raised to 1 (it is 3.5 standard
deviations below the mean, so this almost never happens, and a minimum ≤ 0 would make the
multiplicative season flat or negative).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from budgetcheck import libm
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.validation import check_epsilon, check_positive_int

PAPER_GROWTH = 1.5
HARNESS_GROWTH = 1.3


def seasonal_stream(
    length: int, season: int, amplitude: float, *, growth: float = PAPER_GROWTH, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Q(D_1..D_p) of Algorithm 2, shape (p, 1); max = amplitude, min > 0."""
    length = check_positive_int(length, "length")
    season = check_positive_int(season, "season")
    amplitude = check_epsilon(amplitude, "amplitude")
    growth = check_epsilon(growth, "growth")
    if growth <= 1.0:
        raise InvalidArgument(f"growth={growth!r} must be > 1 (the exponential growth factor e)")
    values: list[float] = []
    while len(values) < length:
        half = max(2, int(round(rng.normal(season, 2.0)))) // 2
        minimum = max(1.0, float(rng.normal(8.0, 2.0)))
        rising = minimum * libm.powers(growth, half + 1)
        values.extend(rising)
        values.extend(rising[-2::-1][:half])
    stream = np.asarray(values[:length], dtype=np.float64)
    return np.asarray(stream / stream.max() * amplitude, dtype=np.float64).reshape(length, 1)
