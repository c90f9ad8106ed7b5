"""The w-event budget ledger (Kellaris et al. 2014, Theorem 3).

Every window of w consecutive timestamps may spend at most ε in total. The ledger keeps, per run,
the exact total spent at each timestamp of the current window (integers in units of 2**-1127,
held per run as int64 limbs by :class:`~budgetcheck.ledger.exact.ExactVector`, so sums are exact) and
the exact window sum, updated incrementally: the cost of a spend is O(R) and does not grow with
the stream length. A spend is checked *before* any noise is drawn
(reserve -> draw -> commit); a refused spend raises :class:`BudgetExceeded` and changes nothing,
not even the state of the noise generator.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.ledger.core import (
    LaplaceReleases,
    check_result_shape,
    journaled,
    locked,
)
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument, LedgerCorrupt
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.intrusions import ANNOUNCED, EXPOSURE, SINGLE, Exposures, as_mask, check_model
from budgetcheck.ledger.isolation import (
    DEFAULT_DEADLINE,
    FORK,
    check_answer_fits,
    check_deadline,
    check_default,
    check_isolation,
)
from budgetcheck.ledger.noise import DISCRETE
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.params import WEventParams
from budgetcheck.ledger.queries import Identity, LinearQuery
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, fresh_view, frozen
from budgetcheck.ledger.scalar_windows import ScalarWindows
from budgetcheck.ledger.threshold import ThresholdTest
from budgetcheck.ledger.validation import (
    check_amount_rows,
    check_amounts,
    check_epsilons,
    check_label,
    check_sensitivity,
)
from budgetcheck.ledger.windows import ExactWindows
from budgetcheck.stream.secret import Secret, charged, claim, stacked_rows

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
ObjectArray = NDArray[np.object_]
_MOST_GROUPS = 64  # distinct ε up to which a series on a ledger of several ε is checked per group of runs


@final
class WindowLedger(LaplaceReleases):
    """Accounts for ``runs`` independent runs of a mechanism under w-event ε-privacy.

    Amounts are scalars (same for every run) or arrays of shape (runs,); 0 means the run spends
    nothing. All noise comes from one ``numpy.random.Generator`` seeded with ``seed``.

    Example:
        Every window of w = 3 timestamps may spend ε = 1 in all; a spend one ulp over is refused
        and changes nothing:

        >>> from budgetcheck import BudgetExceeded, WindowLedger
        >>> ledger = WindowLedger(epsilon=1.0, w=3)  # the same as WindowLedger(WEventParams(1.0, 3))
        >>> ledger.spend(1, 0.75, purpose="publication")
        >>> try:
        ...     ledger.spend(3, 0.5, purpose="publication")
        ... except BudgetExceeded as refused:
        ...     print(refused)
        spend of 0.5 at t=3 (purpose 'publication') would make window [1, 3] sum to 1.25 > epsilon=1.0 ...
        >>> ledger.spend(3, float(ledger.remaining(3)[0]), purpose="publication")  # never refused
    """

    __slots__ = (
        "_announced",
        "_eps_bound",
        "_eps_units",
        "_epsilon",
        "_exposures",
        "_held_until",
        "_intruder",
        "_intrusions",
        "_params",
        "_windows",
    )
    _stacking = True

    def __init__(
        self,
        params: WEventParams | None = None,
        *,
        epsilon: float | None = None,
        w: int | None = None,
        runs: int = 1,
        seed: int = 0,
        sampler: str = DISCRETE,
        keep_records: bool = False,
        trusted_code: bool = False,
        allow_vouched: bool = False,
    ) -> None:
        if params is None:  # WindowLedger(epsilon=1.0, w=3), as one would write it
            if epsilon is None or w is None:
                raise InvalidArgument(
                    f"give epsilon and w (got epsilon={epsilon!r}, w={w!r}) or params=WEventParams(epsilon, w)"
                )
            params = WEventParams(epsilon, w)
        elif epsilon is not None or w is not None:
            raise InvalidArgument(f"give either params={params!r} or epsilon and w, not both")
        if not isinstance(params, WEventParams):
            raise InvalidArgument(f"params={params!r} must be a WEventParams(epsilon=..., w=...)")
        super().__init__(
            runs=runs,
            seed=seed,
            sampler=sampler,
            keep_records=keep_records,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
        # a copy no caller holds (``params`` hands out another): the window checks never read an object that
        # a caller can change, even past attrs' frozen guard with object.__setattr__
        self._params = WEventParams(params.epsilon, params.w)
        self._epsilon: float | FloatArray = self._params.epsilon
        self._eps_units: int | ObjectArray = rounding.to_units(params.epsilon)
        self._eps_bound = ExactVector.from_int(rounding.to_units(params.epsilon))
        try:
            self._windows = _windows(params.w, self._runs)
            self._exposures = Exposures(params.w, self._runs)
        except MemoryError:
            raise InvalidArgument(
                f"runs={self._runs} is more runs than this machine can hold window sums for (w={params.w}); "
                "use fewer runs per ledger"
            ) from None
        self._intrusions: str | None = None
        self._announced: set[int] = set()
        self._held_until = 0
        self._intruder: tuple[int, list[FloatArray]] | None = None  # a verifier's intruder: (t, what it read)

    @classmethod
    def with_epsilons(
        cls,
        epsilons: ArrayLike,
        w: int,
        *,
        seed: int = 0,
        sampler: str = DISCRETE,
        keep_records: bool = False,
        trusted_code: bool = False,
        allow_vouched: bool = False,
    ) -> WindowLedger:
        """A ledger of ``len(epsilons)`` runs in which run r is held to w-event ``epsilons[r]``-privacy
        (the benchmark runs the ε of several settings in one pass). Every check is the same as
        for one ε, run by run; :attr:`epsilon` is then the per-run array (a float when all agree).
        """
        budgets = check_epsilons(epsilons)
        ledger = cls(
            WEventParams(float(budgets.max()), w),
            runs=budgets.size,
            seed=seed,
            sampler=sampler,
            keep_records=keep_records,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
        if (budgets != budgets[0]).any():
            ledger._epsilon = frozen(budgets)  # immutable bytes; ``epsilon`` hands out fresh views of them
            ledger._eps_units = rounding.to_units_array(budgets)
            ledger._eps_bound = ExactVector.from_floats(budgets)
        return ledger

    @property
    def params(self) -> WEventParams:
        """(ε, w); refused on a ledger whose runs have different ε (read :attr:`epsilon` and :attr:`w`)."""
        if not isinstance(self._epsilon, float):
            raise InvalidArgument(
                f"params: this ledger holds its runs to different budgets {sorted(set(self._epsilon.tolist()))}; "
                "read ledger.epsilon (one per run) and ledger.w"
            )
        return WEventParams(self._params.epsilon, self._params.w)

    @property
    def epsilon(self) -> float | FloatArray:
        """The ε every run is held to: a float, or shape (runs,) (read-only, over immutable memory) on a ledger
        of several ε: a fresh view at every read, so that no caller changes what another reads."""
        return self._epsilon if isinstance(self._epsilon, float) else fresh_view(self._epsilon)

    @property
    def w(self) -> int:
        return self._params.w

    @locked
    def remaining(self, t: int) -> FloatArray:
        """What each run can still spend at timestamp t, rounded down (safe to spend in full; under a
        single intrusion, net of the largest exposure in the window).

        Example:
            >>> ledger = WindowLedger(epsilon=1.0, w=3, runs=2)
            >>> ledger.spend(1, [0.5, 0.25], purpose="publication")
            >>> ledger.remaining(3)  # window [1, 3] holds t = 1
            array([0.5 , 0.75])
            >>> ledger.remaining(4)  # window [2, 4] does not
            array([1., 1.])
        """
        self._refresh()
        t = self._check_t(t)
        if not self._exposures and isinstance(self._windows, ScalarWindows):  # one run: one exact integer
            left = rounding.units_to_float_down(self._run_units(0) - self._windows.window_units(t)[0])
            return np.full(1, left)
        window, _ = self._windows.prospective(t)
        left = self._eps_units - window.to_object()
        if self._exposures:  # pan-private: the window's largest exposure is spoken for
            left = np.maximum(left - self._exposures.largest(t), 0)
        return rounding.units_to_float_down_array(left)

    @locked
    def window_sum(self, t: int) -> tuple[int, ...]:
        """The exact sum of window [t-w+1, t] per run, in units of 2**-1127 (for auditors)."""
        self._refresh()
        window, _ = self._windows.prospective(self._check_t(t))
        return tuple(window.tolist())

    @journaled
    def laplace_series(
        self,
        secrets: Sequence[Secret],
        epsilon: ArrayLike,
        *,
        sensitivity: float | None = None,
        purpose: str = "publication",
    ) -> FloatArray:
        """Release several timestamps in one operation: secret k plus Laplace noise of scale Δ/ε_k
        (rounded up), per run — what k calls of :meth:`laplace` in timestamp order release, bit for bit.

        Each secret is charged at its own timestamp, and every charge is checked before any value is
        read or any noise drawn: if one would break a window, the whole series is refused and the
        ledger is exactly as it was. For offline streams whose release schedule does not depend on
        earlier releases (Uniform, Sample): one noise draw instead of k. ``epsilon`` has shape (k,)
        (one budget per secret, every run) or (k, runs). Returns shape (runs, k, *secret.shape);
        NaN where ε = 0.
        """
        secrets = list(secrets)
        if not secrets:
            raise InvalidArgument("secrets must name at least one timestamp, got none")
        if not all(isinstance(secret, Secret) for secret in secrets):
            raise InvalidArgument(
                f"secrets must be Secrets from a guarded stream, got {sorted({type(x).__name__ for x in secrets})}"
            )
        stamps = [secret.t for secret in secrets]
        if any(later <= earlier for earlier, later in zip(stamps, stamps[1:])):
            raise InvalidArgument(
                f"secrets must have increasing timestamps, got {stamps if len(stamps) <= 10 else stamps[:10] + ['...']}"
            )
        if len({(tuple(secret.shape), stacked_rows(secret)) for secret in secrets}) != 1:
            raise InvalidArgument("secrets must come from one stream (one shape)")
        budgets = check_amount_rows(epsilon, len(secrets), self._runs)  # (k, 1) or (k, runs)
        purpose = check_label(purpose)
        sensitivity = max(self._derive(secret, Identity(), sensitivity) for secret in secrets)
        for secret in secrets:
            self._check_secret(secret)
        scales = self._noise.scale(sensitivity, budgets, integral=True)
        scales.setflags(write=False)
        amounts = np.broadcast_to(budgets, (len(secrets), self._runs))  # read-only views, shared by the records
        noise_scales = np.broadcast_to(scales, (len(secrets), self._runs))
        records = [
            SpendRecord(
                t=t,
                purpose=purpose,
                amounts=amounts[k],
                sensitivity=sensitivity,
                noise_scale=noise_scales[k],
                sampler=self._noise.name,
            )
            for k, t in enumerate(stamps)
        ]
        self._charge_each(stamps, amounts, records)
        with contextlib.ExitStack() as stack:
            payloads = np.stack([stack.enter_context(charged(secret)) for secret in secrets])
        # Runs [s·R/S, (s+1)·R/S) read stream s of S (S = 1 for a plain stream): values, budgets and
        # scales of shape (k, S, R/S, …) broadcast without copies; noise drawn over that shape is
        # drawn in the order of k draws of (runs, *shape): the numbers of k laplace calls.
        streams = stacked_rows(secrets[0]) or 1
        if not stacked_rows(secrets[0]):
            payloads = payloads[:, None]
        k, shape = len(secrets), tuple(secrets[0].shape)
        grouped = (k, streams, self._runs // streams)
        values = np.broadcast_to(payloads[:, :, None], (*grouped, *shape))
        per_run = (k, 1, 1) if budgets.shape[1] == 1 else grouped
        out = self._noisy(values, budgets.reshape(per_run), scales.reshape(per_run), sensitivity, per_run=True)
        return np.moveaxis(out.reshape(k, self._runs, *shape), 0, 1)

    def _charge_each(self, stamps: list[int], amounts: FloatArray, records: list[SpendRecord]) -> None:
        """Charge amounts[k] at stamps[k] in turn, all or nothing: if one is refused, the ledger is
        restored and the refusal raised. With exposures (pan-private, single intrusion) every stamp goes
        through :meth:`_charge`, which counts the window's largest exposure (the shared totals do not)."""
        groups = None if self._exposures else self._alike_groups(amounts)
        totals = self._shared_totals(groups) if groups is not None else None
        if groups is not None and totals is not None:  # exact checks in Python integers
            self._charge_shared(stamps, amounts, records, groups, totals)
            return
        windows, t, kept, charges = self._windows.copy(), self._t, self._kept_mark(), self._charges
        try:
            for stamp, row, record in zip(stamps, amounts, records, strict=True):
                self._charge(stamp, row, record)
        except BudgetExceeded:
            self._windows, self._t, self._charges = windows, t, charges
            self._rollback_kept(kept)
            raise

    def _alike_groups(self, amounts: FloatArray) -> list[IntArray | None] | None:
        """The runs that share one ε and spend alike at every stamp of a series, as groups of run
        indices (None: every run), or None when some group's runs spend differently or there are
        more than _MOST_GROUPS distinct ε (then the series is checked spend by spend)."""
        if isinstance(self._epsilon, float):
            return [None] if not any(amounts.strides[1:]) or bool((amounts == amounts[:, :1]).all()) else None
        values, index = np.unique(self._epsilon, return_inverse=True)
        if values.size > _MOST_GROUPS:
            return None
        groups = [np.flatnonzero(index == g) for g in range(values.size)]
        if any(amounts.strides[1:]) and not all(
            bool((amounts[:, runs] == amounts[:, runs[:1]]).all()) for runs in groups
        ):
            return None
        return list[IntArray | None](groups)  # a list of the wider type (lists are invariant)

    def _shared_totals(self, groups: list[IntArray | None]) -> list[dict[int, int]] | None:
        """Each group's kept per-timestamp totals, when they are the same in every run of the group."""
        totals = []
        for runs in groups:
            kept = self._windows.shared_totals(runs)
            if kept is None:
                return None
            totals.append(kept)
        return totals

    def _charge_shared(
        self,
        stamps: list[int],
        amounts: FloatArray,
        records: list[SpendRecord],
        groups: list[IntArray | None],
        totals: list[dict[int, int]],
    ) -> None:
        """:meth:`_charge_each` when, within each group of runs (one ε), the spends and every kept total
        are the same in every run: the window [s−w+1, s] of every stamp s is summed exactly from the
        group's totals, then all are committed. A refusal names the earliest stamp that breaks a
        window and the lowest run it breaks there (what the spend-by-spend check reports)."""
        w, first_over, ends = self._params.w, None, set(stamps)
        for runs, kept in zip(groups, totals, strict=True):
            run = 0 if runs is None else int(runs[0])
            limit = self._run_units(run)
            for stamp, amount in zip(stamps, amounts[:, run], strict=True):
                kept[stamp] = kept.get(stamp, 0) + rounding.to_units(float(amount))
            timeline = sorted(kept.items())
            window, oldest = 0, 0  # the sum of totals in (s − w, s], and the index of its oldest timestamp
            for s, units in timeline:
                window += units
                while timeline[oldest][0] <= s - w:
                    window -= timeline[oldest][1]
                    oldest += 1
                if s in ends and window > limit:
                    if first_over is None or (s, run) < first_over[:2]:
                        first_over = (s, run, window)
                    break
        if first_over is not None:
            s, run, window = first_over
            k = stamps.index(s)
            spent = rounding.to_units(float(amounts[k, run]))
            self._refusals += 1
            self._refuse(
                s,
                np.array(amounts[k]),
                ExactVector.from_int(window - spent),
                ExactVector.from_int(window),
                run,
                records[k].purpose,
            )
        self._guard()
        self._windows.replace(stamps[-1], totals, groups)
        for stamp, record in zip(stamps, records, strict=True):
            self._commit(stamp, record)
        self._unguard()

    @journaled
    def measure_footprint(
        self,
        fn: Callable[[FloatArray], ArrayLike],
        secrets: Sequence[Secret],
        *,
        sensitivity: float,
        epsilon: ArrayLike,
        purpose: str = "footprint measurement",
        isolation: str = FORK,
        shape: int | tuple[int, ...] = (),
        default: ArrayLike = 0.0,
        deadline: float = DEFAULT_DEADLINE,
    ) -> FloatArray:
        """Noisy fn over the true values of several timestamps, charged ε at *each* timestamp read.

        Accounting rules §3: Theorem 3 covers sub-mechanisms that read only D_t. A measurement
        whose footprint is the timestamps of ``secrets`` (sensitivity Δ to a change at any one
        of them, vouched for by the caller) is charged ε at every one of them; by group privacy a
        window then pays for every change it can contain. fn receives the stacked payloads
        (k, *shape) in the order given. Every secret must lie in the current window [t−w+1, t]
        of the newest one. fn runs as in :meth:`measure` (a forked process per call unless
        ``isolation='trusted'``); the records are marked ``vouched``. ``shape``, ``default`` and ``deadline``:
        the declared shape of fn's result, the answer a failure of fn gives and the call's duration, as for
        :meth:`measure`. Returns shape (runs, *shape).
        """
        secrets = list(secrets)
        if not secrets:
            raise InvalidArgument("secrets must name at least one timestamp (the footprint), got none")
        amounts = self._measurement_amounts(fn, epsilon, "measure_footprint")
        isolation = check_isolation(isolation)
        self._require_owner("measure_footprint", isolation=isolation, vouched=True)
        declared = check_result_shape(shape)
        fallback, seconds = check_default(default, declared), check_deadline(deadline)
        self._check_confined(isolation)
        if not all(isinstance(secret, Secret) for secret in secrets):
            raise InvalidArgument(
                f"secrets must be Secrets from a guarded stream, got {[type(x).__name__ for x in secrets]}"
            )
        if any(stacked_rows(secret) for secret in secrets):
            raise InvalidArgument(
                "measure_footprint does not read stacked streams (GuardedStream.stacked); run each stream alone"
            )
        if isolation == FORK:
            check_answer_fits(declared, 1)
        stamps = [secret.t for secret in secrets]
        t = self._check_t(max(stamps))
        for secret in secrets:
            claim(secret, self)
        w = self._params.w
        if len(set(stamps)) != len(stamps) or min(stamps) < t - w + 1:
            raise InvalidArgument(
                f"secrets must be distinct timestamps within one window [t-w+1, t] = [{max(1, t - w + 1)}, {t}], got "
                f"{sorted(stamps)}"
            )
        purpose = check_label(purpose)
        sensitivity = check_sensitivity(sensitivity)
        units = ExactVector.from_floats(amounts)
        added = {s: units for s in stamps}
        note = ", with the window's largest exposure" if self._exposures else ""
        for end, before, after in self._windows.footprint(t, added):
            if self._exposures:  # under a single intrusion each window it changes holds its largest exposure too
                exposure = self._exposures.largest(end)
                over = np.flatnonzero(after.to_object() + exposure > self._eps_units)
            else:
                exposure = None
                over = np.flatnonzero(after.exceeds(self._eps_bound))
            if over.size:
                self._refusals += 1
                run = int(over[0])
                held = 0 if exposure is None else int(exposure[run])
                raise window_exceeded(
                    what=f"footprint measurement of {float(amounts[run])!r} at each of t={sorted(stamps)} (purpose "
                    f"{purpose!r}{note}{_run_text(run, self._runs)})",
                    t=end,
                    w=w,
                    epsilon=self._run_epsilon(run),
                    eps_units=self._run_units(run),
                    window=int(before[run]) + held,
                    proposed=int(after[run]) + held,
                    run=run,
                    remaining_call="what that window had left",
                )
        scale = self._noise.scale(sensitivity, amounts, integral=False)
        self._guard()
        self._windows.commit_footprint(t, added)
        for s in sorted(stamps):
            self._commit(
                t,
                SpendRecord(
                    t=s,
                    purpose=f"{purpose} (read at t={t})",
                    amounts=amounts,
                    sensitivity=sensitivity,
                    noise_scale=scale,
                    sampler=self._noise.name,
                    vouched=True,
                ),
            )
            self._vouched += 1
        self._unguard()
        with contextlib.ExitStack() as stack:
            payload = np.stack([stack.enter_context(charged(secret)) for secret in secrets])
            outcome = self._call_measured(fn, [payload], isolation, declared, fallback, seconds, "measure_footprint")
            del payload
        return self._noisy(outcome[0], amounts, scale, sensitivity, integral=False)

    def above_threshold(
        self,
        *,
        epsilon: float | FloatArray,
        sensitivity: float,
        cells: tuple[int, ...] = (),
        max_footprint: int | None = None,
        purpose: str = "above-threshold",
        query: LinearQuery | None = None,
    ) -> ThresholdTest:
        """An AboveThreshold test per run and cell, restarted after each positive answer.

        See :class:`ThresholdTest`: every query at t charges ``epsilon`` at t (the one timestamp
        each open instance adds to its footprint); ``epsilon`` is a float or one per run. Under
        ``discrete-laplace`` the test runs on the discrete grid with noise from the OS CSPRNG. With a
        linear ``query`` (cells = (m,)) the cells are its m answers A·x, e.g. a tree's node counts;
        the sensitivity must then cover twice the query's (checked at every deviation query).
        """
        return ThresholdTest(
            self,
            epsilon=epsilon,
            sensitivity=sensitivity,
            cells=cells,
            max_footprint=max_footprint,
            purpose=purpose,
            query=query,
        )

    @property
    def intrusions(self) -> str | None:
        """The intrusion model this ledger accounts for (``"single"``, ``"announced"``), None until a
        held release or an announcement fixes it (:mod:`budgetcheck.ledger.intrusions`)."""
        return self._intrusions

    @locked
    def announce_intrusion(self, t: int) -> None:
        """An intrusion detected at t (multiple announced intrusions, Kellaris et al. 2014, §4.5): the
        held release at t is published in every run, whatever the mechanism asks (the ledger forces it)."""
        t = self._check_t(t)
        self._fix_model(ANNOUNCED)
        if t <= self._held_until:
            raise InvalidArgument(
                f"t={t}: an intrusion can be announced only for a timestamp whose held value is still to come "
                f"(held up to t={self._held_until})"
            )
        self._announced.add(t)

    def intrusion_announced(self, t: int) -> bool:
        """Whether an intrusion was announced at t."""
        return self._check_t(t) in self._announced

    @journaled
    def held_laplace(
        self,
        secret: Secret,
        epsilon: ArrayLike,
        publish: ArrayLike,
        *,
        intrusions: str = SINGLE,
        purpose: str = "publication",
    ) -> FloatArray:
        """A pan-private release (Kellaris et al. 2014, §4.5): c_t held with Laplace noise at ``epsilon``
        before the data is added, then published where ``publish`` (or an announced intrusion) says so.

        Published runs are charged ``epsilon`` at t. Under ``intrusions="single"`` the other runs'
        held values are *exposures* at t (an intrusion could read them): every window must keep
        Σ ε_t + max exposure <= ε, checked here as if every held value were published (the tighter of
        the two outcomes, so the decision never changes whether the call is allowed) and at every later
        spend. Under ``"announced"`` a discarded held value is never read and costs nothing.
        Returns shape (runs, *secret.shape): the release where published, NaN elsewhere (the held
        value of a skipped run is discarded inside the ledger; the mechanism never holds it).
        """
        t = self._check_secret(secret)
        amounts = check_amounts(epsilon, self._runs)
        wanted = as_mask(publish, self._runs)
        model = check_model(intrusions)
        purpose = check_label(purpose)
        if purpose == EXPOSURE:
            raise InvalidArgument(f"purpose={purpose!r} is reserved for exposure records")
        if self.journal is not None:
            raise InvalidArgument(
                "held_laplace: pan-private accounting is kept in memory only; use an in-memory ledger"
            )
        if self._intrusions not in (None, model):
            raise InvalidArgument(f"intrusions={model!r}: this ledger accounts for the {self._intrusions!r} model")
        forced = model == ANNOUNCED and t in self._announced
        published = (wanted | forced) & (amounts > 0.0)
        spent = np.where(published, amounts, 0.0)
        exposed = np.where(published, 0.0, amounts) if model == SINGLE else np.zeros(self._runs)
        if exposed.any():
            self._check_exposed(t, amounts, purpose)
        sensitivity = self._derive(secret, Identity(), None)
        _, sensitivity = self._reserve(secret, spent, spent, sensitivity, purpose)
        self._fix_model(model)  # after the charge: a refused hold fixes no model (checked above)
        scale = self._scale(sensitivity, amounts, True)
        if exposed.any():
            record = SpendRecord(t=t, purpose=EXPOSURE, amounts=exposed, noise_scale=scale, sampler=self._noise.name)
            self._guard()
            self._exposures.add(t, exposed)
            self._commit(t, record)
            self._unguard()
        self._held_until = max(self._held_until, t)
        with charged(secret) as values:
            held = self._noisy(self._per_run(secret, values), amounts, scale, sensitivity, per_run=True)
        if self._intruder is not None and self._intruder[0] == t:  # what an intrusion at t reads
            self._intruder[1].append(np.array(held, dtype=np.float64))
        shown = published.reshape((self._runs,) + (1,) * (held.ndim - 1))
        return np.asarray(np.where(shown, held, np.nan), dtype=np.float64)

    def _fix_model(self, model: str) -> None:
        if self._intrusions not in (None, model):
            raise InvalidArgument(f"intrusions={model!r}: this ledger accounts for the {self._intrusions!r} model")
        self._intrusions = model

    def _check_exposed(self, t: int, amounts: FloatArray, purpose: str) -> None:
        """Refuse (changing nothing) a hold whose publication would break Σ ε_t + max exposure <= ε."""
        window, _ = self._windows.prospective(t)
        proposed = window.to_object() + rounding.to_units_array(amounts) + self._exposures.largest(t)
        over = np.flatnonzero(proposed > self._eps_units)
        if over.size:
            self._refusals += 1
            run = int(over[0])
            raise window_exceeded(
                what=f"held release of {float(amounts[run])!r} at t={t} (purpose {purpose!r}, "
                f"with the window's largest exposure{_run_text(run, self._runs)})",
                t=t,
                w=self._params.w,
                epsilon=self._run_epsilon(run),
                eps_units=self._run_units(run),
                window=int(window[run]) + int(self._exposures.largest(t)[run]),
                proposed=int(proposed[run]),
                run=run,
                remaining_call=f"ledger.remaining({t})",
            )

    def header(self) -> LedgerHeader:
        """The stored ledger's first line; a ledger of several ε has no file format and is refused."""
        if not isinstance(self._epsilon, float):
            raise InvalidArgument(
                f"{self!r} holds its runs to different budgets; a ledger file or dump holds one epsilon: "
                "store one WindowLedger per epsilon"
            )
        return LedgerHeader(notion=Notion.W_EVENT, epsilon=self._epsilon, w=self._params.w, runs=self._runs)

    def __repr__(self) -> str:
        eps = self._epsilon if isinstance(self._epsilon, float) else sorted(set(self._epsilon.tolist()))
        return (
            f"WindowLedger(epsilon={eps!r}, w={self._params.w}, runs={self._runs}, t={self._t}, "
            f"records={len(self._records)})"
        )

    def _run_epsilon(self, run: int) -> float:
        return self._epsilon if isinstance(self._epsilon, float) else float(self._epsilon[run])

    def _run_units(self, run: int) -> int:
        return self._eps_units if isinstance(self._eps_units, int) else int(self._eps_units[run])

    def _reset(self) -> None:
        self._windows = _windows(self._params.w, self._runs)

    def _lookback(self) -> int:
        return 2 * self._params.w  # footprint checks reach windows ending up to w − 1 back

    def _apply(self, record: SpendRecord) -> None:
        """A stored record: a spend at its t, or (a footprint charge) at an earlier t of the window."""
        if record.t >= self._t:
            self._charge(record.t, record.amounts, record)
            return
        added = {record.t: ExactVector.from_floats(record.amounts)}
        for _, _, after in self._windows.footprint(self._t, added):
            if after.exceeds(self._eps_bound).any():
                raise LedgerCorrupt(f"a stored footprint record at t={record.t} breaks a window of w={self._params.w}")
        self._windows.commit_footprint(self._t, added)
        self._commit(self._t, record)

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check every run's window [t-w+1, t] exactly, then commit; refuse atomically.

        With exposures (pan-private, single intrusion) the window's largest exposure counts too."""
        exposure = self._exposures.largest(t) if self._exposures else None
        if exposure is None and isinstance(self._windows, ScalarWindows):  # one run: one exact integer
            self._charge_one_run(self._windows, t, amounts, record.purpose, record)
            return
        windows = self._windows
        quick = (
            windows.quick_check(t, amounts, self._epsilon)
            if isinstance(windows, ExactWindows) and exposure is None
            else None
        )
        if quick is not None and isinstance(windows, ExactWindows):  # certainly within ε: no exact arithmetic needed
            if self._resumable():
                part, charges = amounts.view(), self._charges + 1  # a view: an object no other commit adds
                self._inflight = (self._finish_quick, windows, t, part, quick[0], record, charges)
                self._finish_quick(windows, t, part, quick[0], record, charges)
                return
            windows.commit_quick(t, amounts, *quick)
            self._commit(t, record)
            return
        added = ExactVector.from_floats(amounts)
        window, leaving = self._windows.prospective(t)
        proposed = window + added
        over = np.flatnonzero(proposed.exceeds(self._eps_bound))
        if exposure is not None and not over.size:
            exposed = proposed.to_object() + exposure
            over = np.flatnonzero(exposed > self._eps_units)
            if over.size:
                self._refusals += 1
                run = int(over[0])
                total = ExactVector.from_int(int(exposed[run]), self._runs)
                held = ExactVector.from_int(int(window[run]) + int(exposure[run]), self._runs)  # for remaining()
                self._refuse(t, amounts, held, total, run, record.purpose, note=", with the window's largest exposure")
        if over.size:
            self._refusals += 1
            self._refuse(t, amounts, window, proposed, int(over[0]), record.purpose)
        if self._resumable() and isinstance(self._windows, ExactWindows):
            part, charges = amounts.view(), self._charges + 1
            self._inflight = (self._finish_exact, self._windows, t, part, added, proposed, record, charges)
            self._finish_exact(self._windows, t, part, added, proposed, record, charges)
            return
        self._windows.commit(t, amounts, added, proposed, leaving)
        self._commit(t, record)

    # -- commits that a signal handler may interrupt: completed by LedgerCore._settle, idempotent -----------
    def _resumable(self) -> bool:
        """Whether a commit here is in memory only (no hook, not a stored record): then it goes through
        ``_inflight`` and one a signal handler interrupts is completed before anything else."""
        return self._hook is None and not self._applying

    def _finish_quick(
        self, windows: ExactWindows, t: int, part: FloatArray, upper: FloatArray, record: SpendRecord, charges: int
    ) -> None:
        windows.commit_quick(t, part, upper, 0)
        self._commit_once(t, record, charges)
        self._inflight = None

    def _finish_exact(
        self,
        windows: ExactWindows,
        t: int,
        part: FloatArray,
        added: ExactVector,
        proposed: ExactVector,
        record: SpendRecord,
        charges: int,
    ) -> None:
        windows.commit(t, part, added, proposed, 0)
        self._commit_once(t, record, charges)
        self._inflight = None

    def _finish_units(
        self,
        windows: ScalarWindows,
        t: int,
        after: int,
        entry: tuple[int, int],
        record: SpendRecord | None,
        charges: int,
    ) -> None:
        windows.commit_units(t, after, entry)
        self._commit_once(t, record, charges)
        self._inflight = None

    def _charge_one_run(
        self, windows: ScalarWindows, t: int, amounts: FloatArray, purpose: str, record: SpendRecord | None
    ) -> None:
        """Check window [t−w+1, t] of the one run exactly and commit its sum and the record (counted as a
        charge); or refuse, changing nothing."""
        spent = _units(float(amounts[0]))
        checked = windows.check_units(t, spent, self._run_units(0))
        if checked is None:
            before = windows.window_units(t)[0]
            self._refusals += 1
            self._refuse(t, amounts, ExactVector.from_int(before), ExactVector.from_int(before + spent), 0, purpose)
            return
        after, entry = checked
        if self._resumable():
            self._inflight = (self._finish_units, windows, t, after, entry, record, self._charges + 1)
            self._finish_units(windows, t, after, entry, record, self._charges + 1)
            return
        windows.commit_units(t, after, entry)
        if record is not None:
            self._commit(t, record)
        else:
            self._charges += 1
            self._t = max(self._t, t)

    _steady_notion = True  # the sensitivity is the declared one at every t

    def _spend_one_run(self, t: int, amount: float) -> bool:
        """:meth:`_charge_unrecorded`'s check and commit of one run's amount, exact, in this frame: True if
        committed; False if over ε (nothing changed) or not one run without exposures."""
        windows, bound = self._windows, self._eps_units
        if self._exposures or type(windows) is not ScalarWindows or type(bound) is not int:
            return False
        checked = windows.check_units(t, _units(amount), bound)
        if checked is None:
            return False
        after, entry = checked
        charges = self._charges + 1
        self._inflight = (
            self._finish_units,
            windows,
            t,
            after,
            entry,
            None,
            charges,
        )  # no hook here (the caller's rule)
        self._finish_units(windows, t, after, entry, None, charges)
        return True

    def _charge_unrecorded(self, t: int, amounts: FloatArray, purpose: str) -> bool:
        """One run without exposures: :meth:`_charge` with no record to keep (see LedgerCore)."""
        windows = self._windows
        if self._exposures or not isinstance(windows, ScalarWindows):
            return False
        self._charge_one_run(windows, t, amounts, purpose, None)
        return True

    def _refuse(
        self,
        t: int,
        amounts: FloatArray,
        window: ExactVector,
        proposed: ExactVector,
        run: int,
        purpose: str,
        *,
        note: str = "",
    ) -> None:
        raise window_exceeded(
            what=f"spend of {float(amounts[run])!r} at t={t} (purpose {purpose!r}{note}{_run_text(run, self._runs)})",
            t=t,
            w=self._params.w,
            epsilon=self._run_epsilon(run),
            eps_units=self._run_units(run),
            window=int(window[run]),
            proposed=int(proposed[run]),
            run=run,
            remaining_call=f"ledger.remaining({t})",
        )


# a one-run charge's amount in exact units, remembered: a mechanism's budgets recur (BD's ε/(2w) at every t)
_units = functools.lru_cache(maxsize=1024)(rounding.to_units)


def _windows(w: int, runs: int) -> ExactWindows | ScalarWindows:
    """The window sums of ``runs`` runs: one run's are plain Python integers."""
    return ScalarWindows(w) if runs == 1 else ExactWindows(w, runs)


def _run_text(run: int, runs: int) -> str:
    return f", run {run}" if runs > 1 else ""


def window_exceeded(
    *,
    what: str,
    t: int,
    w: int,
    epsilon: float,
    eps_units: int,
    window: int,
    proposed: int,
    run: int,
    remaining_call: str,
) -> BudgetExceeded:
    """The error for a spend that would push window [t−w+1, t] over ε (names window, sum, excess, remaining)."""
    start = max(1, t - w + 1)
    total = rounding.units_to_float_near(proposed)
    excess = rounding.units_to_float_near(proposed - eps_units)
    left = rounding.units_to_float_down(max(0, eps_units - window))
    return BudgetExceeded(
        f"{what} would make window [{start}, {t}] sum to {total!r} > epsilon={epsilon!r} "
        f"(over by {excess:.3g}); {remaining_call} is {left!r}",
        run=run,
        window=(start, t),
        window_sum=total,
        epsilon=epsilon,
    )
