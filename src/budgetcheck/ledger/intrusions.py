"""Pan-private accounting: what an intrusion into the mechanism's memory can read (Kellaris et al. 2014, §4.5).

A pan-private mechanism (Dwork et al. 2010) keeps, between the arrival of D_t and its decision, a
*held* value: c_t initialised with its Laplace noise before the data is added (the curator cannot
keep D_t: it passes once). Published, the held value is the release and costs its budget once. Not
published, it stays in memory until discarded: an intrusion at t reads it, which is equivalent to
publishing it (§4.5), so its budget is an *exposure* at t, a potential charge.

Two intrusion models:

- ``"single"`` (one unannounced intrusion in the stream's lifetime). The adversary reads one
  timestamp's memory, which the curator does not know. Our reading of §4.5: for every window W of
  w timestamps, Σ_{t∈W} ε_t + max_{s∈W} x_s <= ε, with x_s the exposure of s (0 where nothing was
  held, or where the held value was published: the adversary then reads what was released). The
  ledger checks it at every spend and every hold; the sketch's own arithmetic ("ε/6 + ε/3 = ε/2")
  is this condition for one exposed timestamp per window.
- ``"announced"`` (several intrusions, each detected just after it occurs). An announced intrusion
  at t forces the held value at t to be published (charged as a spend); an unannounced timestamp is
  never read, so a discarded held value costs nothing and the condition is the w-event one.

Exposures are kept exactly (integer units of :mod:`budgetcheck.rounding`) for the last 2w − 1 timestamps
(a footprint measurement rechecks windows ending up to w − 1 back).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.ledger.errors import InvalidArgument

FloatArray = NDArray[np.float64]
ObjectArray = NDArray[np.object_]

SINGLE = "single"
ANNOUNCED = "announced"
MODELS = (SINGLE, ANNOUNCED)
EXPOSURE = "intrusion exposure"  # the purpose of an exposure record; reserved (a spend may not use it)


def check_model(value: object) -> str:
    """An intrusion model: ``"single"`` or ``"announced"``."""
    if value not in MODELS:
        raise InvalidArgument(f"intrusions={value!r} must be one of {list(MODELS)}")
    return str(value)


class Exposures:
    """The exposures x_s of the last 2w − 1 timestamps, per run, in exact units."""

    __slots__ = ("_held", "_runs", "_w")

    def __init__(self, w: int, runs: int) -> None:
        self._w = w
        self._runs = runs
        self._held: dict[int, ObjectArray] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def add(self, t: int, amounts: FloatArray) -> None:
        """Record exposures at t (several holds at one t: the adversary reads them all, so they add)."""
        units = rounding.to_units_array(amounts)
        previous = self._held.get(t)
        self._held[t] = units if previous is None else previous + units
        # kept for 2w − 1 timestamps: a footprint charge read at t' >= t rechecks windows ending as early as
        # t' − w + 1, which reach back to t' − 2w + 2
        for old in [s for s in self._held if s <= t - 2 * self._w + 1]:
            del self._held[old]

    def largest(self, t: int) -> ObjectArray:
        """max_{s ∈ [t−w+1, t]} x_s per run (0 without exposures), exact units."""
        out: ObjectArray = np.zeros(self._runs, dtype=object)
        for s, units in self._held.items():
            if t - self._w < s <= t:
                out = np.maximum(out, units)
        return out

    def copy(self) -> Exposures:
        other = Exposures(self._w, self._runs)
        other._held = dict(self._held)
        return other


def as_mask(value: Any, runs: int, name: str = "publish") -> NDArray[np.bool_]:
    """A per-run boolean: a bool or an array of shape (runs,) of bools."""
    mask = np.asarray(value)
    if mask.dtype != np.bool_ or mask.shape not in ((), (runs,)):
        raise InvalidArgument(f"{name} must be a bool or a boolean array of shape ({runs},), got {value!r}")
    return np.broadcast_to(mask, (runs,)).copy()
