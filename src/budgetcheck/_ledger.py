"""The w-event budget ledger (Kellaris et al. 2014, Theorem 3).

Every window of w consecutive timestamps may spend at most ε in total. The ledger keeps, per run,
the exact total spent at each timestamp of the current window (Python integers in units of
2**-1127, so sums are exact) and the exact window sum, updated incrementally: the cost of a spend
is O(R) and does not grow with the stream length. A spend is checked *before* any noise is drawn
(reserve -> draw -> commit); a refused spend raises :class:`BudgetExceeded` and changes nothing,
not even the state of the noise generator.
"""

from __future__ import annotations

from typing import final

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck._core import LaplaceReleases
from budgetcheck._errors import BudgetExceeded, InvalidArgument
from budgetcheck._params import WEventParams
from budgetcheck._records import LedgerHeader, SpendRecord
from budgetcheck._windows import ExactWindows, ObjectArray

FloatArray = NDArray[np.float64]


@final
class WindowLedger(LaplaceReleases):
    """Accounts for ``runs`` independent runs of a mechanism under w-event ε-privacy.

    Amounts are scalars (same for every run) or arrays of shape (runs,); 0 means the run spends
    nothing. All noise comes from one ``numpy.random.Generator`` seeded with ``seed``.
    """

    __slots__ = ("_eps_units", "_params", "_windows")

    def __init__(self, params: WEventParams, *, runs: int = 1, seed: int = 0) -> None:
        if not isinstance(params, WEventParams):
            raise InvalidArgument(f"params={params!r} must be a WEventParams(epsilon=..., w=...)")
        super().__init__(runs=runs, seed=seed)
        self._params = params
        self._eps_units = rounding.to_units(params.epsilon)
        self._windows = ExactWindows(params.w, self._runs)

    @property
    def params(self) -> WEventParams:
        return self._params

    def remaining(self, t: int) -> FloatArray:
        """What each run can still spend at timestamp t, rounded down (safe to spend in full)."""
        window, _ = self._windows.prospective(self._check_t(t))
        return rounding.units_to_float_down_array(self._eps_units - window)

    def window_sum(self, t: int) -> tuple[int, ...]:
        """The exact sum of window [t-w+1, t] per run, in units of 2**-1127 (for auditors)."""
        window, _ = self._windows.prospective(self._check_t(t))
        return tuple(int(v) for v in window.tolist())

    def header(self) -> LedgerHeader:
        return LedgerHeader(notion="w-event", epsilon=self._params.epsilon, w=self._params.w, runs=self._runs)

    def __repr__(self) -> str:
        p = self._params
        return f"WindowLedger(epsilon={p.epsilon!r}, w={p.w}, runs={self._runs}, t={self._t}, records={len(self._records)})"

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check every run's window [t-w+1, t] exactly, then commit; refuse atomically."""
        added = rounding.to_units_array(amounts)
        window, leaving = self._windows.prospective(t)
        proposed: ObjectArray = window + added
        over = np.flatnonzero((proposed > self._eps_units).astype(bool))
        if over.size:
            self._refusals += 1
            self._refuse(t, amounts, window, proposed, int(over[0]), record.purpose)
        self._windows.commit(t, added, proposed, leaving)
        self._commit(t, record)

    def _refuse(self, t: int, amounts: FloatArray, window: ObjectArray, proposed: ObjectArray, run: int, purpose: str) -> None:
        w, eps = self._params.w, self._params.epsilon
        raise window_exceeded(
            what=f"spend of {float(amounts[run])!r} at t={t} (purpose {purpose!r}{_run_text(run, self._runs)})",
            t=t, w=w, epsilon=eps, eps_units=self._eps_units, window=int(window[run]), proposed=int(proposed[run]), run=run,
            remaining_call=f"ledger.remaining({t})",
        )


def _run_text(run: int, runs: int) -> str:
    return f", run {run}" if runs > 1 else ""


def window_exceeded(
    *, what: str, t: int, w: int, epsilon: float, eps_units: int, window: int, proposed: int, run: int, remaining_call: str
) -> BudgetExceeded:
    """The error for a spend that would push window [t−w+1, t] over ε (names window, sum, excess, remaining)."""
    start = max(1, t - w + 1)
    total = rounding.units_to_float_near(proposed)
    excess = rounding.units_to_fraction(proposed - eps_units)
    left = rounding.units_to_float_down(max(0, eps_units - window))
    return BudgetExceeded(
        f"{what} would make window [{start}, {t}] sum to {total!r} > epsilon={epsilon!r} "
        f"(over by {float(excess):.3g}); {remaining_call} is {left!r}",
        run=run,
        window=(start, t),
        window_sum=total,
        epsilon=epsilon,
    )
