"""The w-event budget ledger (Kellaris et al. 2014, Theorem 3).

Every window of w consecutive timestamps may spend at most ε in total. The ledger keeps, per run,
the exact total spent at each timestamp of the current window (Python integers in units of
2**-1127, so sums are exact) and the exact window sum, updated incrementally: the cost of a spend
is O(R) and does not grow with the stream length. A spend is checked *before* any noise is drawn
(reserve -> draw -> commit); a refused spend raises :class:`BudgetExceeded` and changes nothing,
not even the state of the noise generator.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck._errors import BudgetExceeded, InvalidArgument, TimestampOrder
from budgetcheck._params import WEventParams
from budgetcheck._records import LedgerHeader, SpendRecord, dump_lines
from budgetcheck._secret import Secret, charged, claim
from budgetcheck._stream import GuardedStream
from budgetcheck._validation import check_amounts, check_bin_amounts, check_label, check_positive_int, check_sensitivity

FloatArray = NDArray[np.float64]
ObjectArray = NDArray[np.object_]
SAMPLER = "numpy-laplace"


@final
class WindowLedger:
    """Accounts for ``runs`` independent runs of a mechanism under w-event ε-privacy.

    Amounts are scalars (same for every run) or arrays of shape (runs,); 0 means the run spends
    nothing. All noise comes from one ``numpy.random.Generator`` seeded with ``seed``.
    """

    __slots__ = ("_entries", "_eps_units", "_params", "_records", "_refusals", "_rng", "_runs", "_t", "_window")

    def __init__(self, params: WEventParams, *, runs: int = 1, seed: int = 0) -> None:
        if not isinstance(params, WEventParams):
            raise InvalidArgument(f"params={params!r} must be a WEventParams(epsilon=..., w=...)")
        self._params = params
        self._runs = check_positive_int(runs, "runs")
        self._rng = np.random.default_rng(check_positive_int(seed, "seed", minimum=0))
        self._eps_units = rounding.to_units(params.epsilon)
        self._t = 0
        # (timestamp, exact per-run totals) for timestamps inside the current window with spends.
        self._entries: collections.deque[tuple[int, ObjectArray]] = collections.deque()
        self._window: ObjectArray = np.zeros(self._runs, dtype=np.int64).astype(object)
        self._records: list[SpendRecord] = []
        self._refusals = 0

    # -- read-only views -------------------------------------------------------------------
    @property
    def params(self) -> WEventParams:
        return self._params

    @property
    def runs(self) -> int:
        return self._runs

    @property
    def t(self) -> int:
        """The latest timestamp charged so far (0 before the first spend)."""
        return self._t

    @property
    def records(self) -> tuple[SpendRecord, ...]:
        """Every accepted spend, in order (immutable records)."""
        return tuple(self._records)

    @property
    def refusals(self) -> int:
        """How many spends this ledger refused (each left the ledger unchanged otherwise)."""
        return self._refusals

    def remaining(self, t: int) -> FloatArray:
        """What each run can still spend at timestamp t, rounded down (safe to spend in full)."""
        t = self._check_t(t)
        window, _ = self._prospective(t)
        left = self._eps_units - window
        return rounding.units_to_float_down_array(left)

    def window_sum(self, t: int) -> tuple[int, ...]:
        """The exact sum of window [t-w+1, t] per run, in units of 2**-1127 (for auditors)."""
        t = self._check_t(t)
        window, _ = self._prospective(t)
        return tuple(int(v) for v in window.tolist())

    def bind(self, stream: GuardedStream) -> None:
        """Make this ledger the only one that may read ``stream`` (``execute`` does this first).

        A mechanism that opened a second ledger to read the stream would keep its spends out of
        this ledger's record; after binding, that raises :class:`SecretAccess`.
        """
        if not isinstance(stream, GuardedStream):
            raise InvalidArgument(f"stream must be a GuardedStream, got {type(stream).__name__}")
        stream._bind(self)

    # -- charging ------------------------------------------------------------------------------
    def spend(self, t: int, epsilon: ArrayLike, *, purpose: str) -> None:
        """Charge ``epsilon`` at timestamp t without reading any data (e.g. a reservation)."""
        t = self._check_t(t)
        amounts = check_amounts(epsilon, self._runs)
        purpose = check_label(purpose)
        self._charge(t, amounts, SpendRecord(t=t, purpose=purpose, amounts=amounts))

    def laplace(
        self,
        secret: Secret,
        epsilon: ArrayLike,
        *,
        sensitivity: float = 1.0,
        purpose: str = "publication",
    ) -> FloatArray:
        """Release the secret plus Laplace noise of scale sensitivity/ε (rounded up), per run.

        Returns shape (runs, *secret.shape); rows of runs with ε = 0 are NaN (nothing released).
        """
        amounts = check_amounts(epsilon, self._runs)
        scale = self._reserve(secret, amounts, amounts, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            return self._noisy(values, amounts, scale)

    def laplace_bins(
        self,
        secret: Secret,
        epsilon: ArrayLike,
        *,
        sensitivity: float = 1.0,
        purpose: str = "publication",
    ) -> FloatArray:
        """Release each bin of a histogram with its own budget; charge the maximum over bins.

        ``epsilon`` has shape (runs, d) (or (d,), the same for every run), d = secret.shape[-1].
        In the one-bin-per-person model a person sits in one bin per timestamp, so releasing bin j
        at ε_{t,j} costs the person max_j ε_{t,j} at t (accounting rules §2). Bins with ε = 0 are
        NaN (not released). Returns shape (runs, d).
        """
        self._check_secret(secret)
        bins = int(secret.shape[-1]) if secret.shape else 1
        budgets = check_bin_amounts(epsilon, self._runs, bins)
        scale = self._reserve(secret, budgets.max(axis=1), budgets, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            return self._noisy(values, budgets, scale)

    def dissimilarity(
        self,
        secret: Secret,
        last_release: ArrayLike,
        epsilon: ArrayLike,
        *,
        purpose: str = "dissimilarity",
    ) -> FloatArray:
        """Noisy mean absolute difference between the secret and each run's last release.

        Kellaris et al. 2014, Figure 2 lines 3-4: sensitivity 1/d, Laplace scale (1/d)/ε. Returns
        shape (runs,); NaN for runs with ε = 0.
        """
        self._check_secret(secret)
        amounts = check_amounts(epsilon, self._runs)
        last = np.asarray(last_release, dtype=np.float64)
        expected = (self._runs, *secret.shape)
        if last.shape != expected or not np.isfinite(last).all():
            raise InvalidArgument(f"last_release must be finite with shape {expected}, got shape {last.shape}")
        scale = self._reserve(secret, amounts, amounts, 1.0 / int(np.prod(secret.shape)), purpose)
        with charged(secret) as values:
            distance = np.abs(last - values).reshape(self._runs, -1).mean(axis=1)
            return self._noisy(distance, amounts, scale, per_run=True)

    def measure(
        self,
        fn: Callable[[FloatArray], ArrayLike],
        secret: Secret,
        *,
        sensitivity: float,
        epsilon: ArrayLike,
        purpose: str = "measurement",
    ) -> FloatArray:
        """Noisy fn(values): the caller vouches that fn has L1 sensitivity ``sensitivity``.

        fn sees a read-only copy of the payload and runs once, and only if some run pays (ε > 0);
        its finite result gets Laplace noise of scale sensitivity/ε per run. Returns shape
        (runs, *fn_output.shape).
        """
        if not callable(fn):
            raise InvalidArgument(f"fn={fn!r} must be callable")
        amounts = check_amounts(epsilon, self._runs)
        if not amounts.any():
            raise InvalidArgument("measure with epsilon=0 for every run would read the data without paying for it")
        scale = self._reserve(secret, amounts, amounts, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            copy = np.array(values)
            copy.setflags(write=False)
            result = np.asarray(fn(copy), dtype=np.float64)
        if not np.isfinite(result).all():
            raise InvalidArgument(f"measure: fn returned non-finite values {result!r}")
        return self._noisy(result, amounts, scale)

    # -- export --------------------------------------------------------------------------------
    def header(self) -> LedgerHeader:
        return LedgerHeader(notion="w-event", epsilon=self._params.epsilon, w=self._params.w, runs=self._runs)

    def jsonl(self) -> Iterator[str]:
        """The header and every record as JSON lines (for ``budgetcheck audit``)."""
        return dump_lines(self.header(), self._records)

    def export(self, target: str | Path | IO[str]) -> None:
        """Write :meth:`jsonl` to a path or an open text file."""
        if isinstance(target, (str, Path)):
            with open(target, "w", encoding="utf-8") as handle:
                self.export(handle)
            return
        for line in self.jsonl():
            target.write(line + "\n")

    def __repr__(self) -> str:
        p = self._params
        return f"WindowLedger(epsilon={p.epsilon!r}, w={p.w}, runs={self._runs}, t={self._t}, records={len(self._records)})"

    # -- internals -----------------------------------------------------------------------------
    def _check_t(self, t: object) -> int:
        t = check_positive_int(t, "t")
        if t < self._t:
            raise TimestampOrder(f"t={t} is before the ledger's latest timestamp {self._t}: timestamps never go backwards")
        return t

    def _check_secret(self, secret: object) -> int:
        """The timestamp of a secret this ledger may read (type, order and stream binding checked)."""
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a GuardedStream, got {type(secret).__name__}")
        t = self._check_t(secret.t)
        claim(secret, self)
        return t

    def _reserve(
        self, secret: Secret, amounts: FloatArray, budgets: FloatArray, sensitivity: float, purpose: str
    ) -> FloatArray:
        """Charge ``amounts`` at the secret's timestamp for a Laplace release at ``budgets``.

        Returns the noise scales sensitivity/budget, rounded up. Raises before anything is read.
        """
        t = self._check_secret(secret)
        purpose = check_label(purpose)
        scale = rounding.scale_up(sensitivity, budgets)
        record = SpendRecord(
            t=t, purpose=purpose, amounts=amounts, sensitivity=sensitivity, noise_scale=scale, sampler=SAMPLER
        )
        self._charge(t, amounts, record)
        return scale

    def _prospective(self, t: int) -> tuple[ObjectArray, int]:
        """The exact window sum at t and how many entries would leave the window (no mutation)."""
        window = self._window
        leaving = 0
        for entry_t, totals in self._entries:
            if entry_t > t - self._params.w:
                break
            window = window - totals
            leaving += 1
        return window, leaving

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check every run's window [t-w+1, t] exactly, then commit; refuse atomically."""
        added = rounding.to_units_array(amounts)
        window, leaving = self._prospective(t)
        proposed: ObjectArray = window + added
        over = np.flatnonzero((proposed > self._eps_units).astype(bool))
        if over.size:
            self._refusals += 1
            self._refuse(t, amounts, window, proposed, int(over[0]), record.purpose)
        for _ in range(leaving):
            self._entries.popleft()
        if self._entries and self._entries[-1][0] == t:
            last_t, totals = self._entries.pop()
            self._entries.append((last_t, totals + added))
        else:
            self._entries.append((t, added))
        self._window = proposed
        self._t = t
        self._records.append(record)

    def _refuse(
        self, t: int, amounts: FloatArray, window: ObjectArray, proposed: ObjectArray, run: int, purpose: str
    ) -> None:
        w, eps = self._params.w, self._params.epsilon
        start = max(1, t - w + 1)
        total = rounding.units_to_float_near(int(proposed[run]))
        excess = rounding.units_to_fraction(int(proposed[run]) - self._eps_units)
        left = rounding.units_to_float_down(max(0, self._eps_units - int(window[run])))
        run_text = f", run {run}" if self._runs > 1 else ""
        raise BudgetExceeded(
            f"spend of {float(amounts[run])!r} at t={t} (purpose {purpose!r}{run_text}) would make window "
            f"[{start}, {t}] sum to {total!r} > epsilon={eps!r} (over by {float(excess):.3g}); "
            f"ledger.remaining({t}) is {left!r}",
            run=run,
            window=(start, t),
            window_sum=total,
            epsilon=eps,
        )

    def _noisy(
        self, values: NDArray[np.float64], budgets: FloatArray, scale: FloatArray, *, per_run: bool = False
    ) -> FloatArray:
        """values + Laplace noise for every run (values already per run if ``per_run``); NaN where unpaid.

        ``budgets``/``scale`` have shape (runs,) or (runs, bins). Noise is drawn for every entry, so
        a run's noise does not depend on what the other runs paid.
        """
        shape = values.shape if per_run else (self._runs, *values.shape)
        noise = self._rng.laplace(0.0, 1.0, size=shape)
        extra = (1,) * (len(shape) - budgets.ndim)
        paid = (budgets > 0.0).reshape(budgets.shape + extra)
        out = np.asarray(values + noise * np.where(paid, scale.reshape(scale.shape + extra), 0.0), dtype=np.float64)
        out[np.broadcast_to(~paid, shape)] = np.nan
        return out
