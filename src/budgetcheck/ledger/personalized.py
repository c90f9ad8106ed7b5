"""The personalized w-event ledger (Du et al. 2025, (w, ε)-EPDP and Theorem 4.6).

For every user i and every window of w_i consecutive timestamps, Σ ε_{i,t} <= ε_i. Users with the
same requirement always receive the same budget here, so the ledger keeps one exact window sum per
requirement class and run (:class:`ExactWindows`), and a spend is an array of shape (runs, classes).
The raw per-user data is read only by the two Sampling-Mechanism operations, which charge every
user their own ε_{i,t} (the requested amount: an upper bound on the actual loss min(ε_{i,t}, θ)),
and by ``local_report``, where every user of a reporting class perturbs its own value with an
ε_{i,t}-LDP frequency oracle (:mod:`budgetcheck.ledger.local`) and is charged ε_{i,t}.
"""

from __future__ import annotations

from typing import final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.ledger.core import LedgerCore, journaled
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.local import GRR, OUE, estimate_variance, perturbed_estimate, uses_grr
from budgetcheck.ledger.noise import DISCRETE
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.records import LedgerHeader, SpendRecord
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.sampling import inclusion_probabilities, optimal_budget
from budgetcheck.ledger.validation import check_bin_amounts, check_label, check_positive_int
from budgetcheck.ledger.wevent import window_exceeded
from budgetcheck.ledger.windows import ExactWindows
from budgetcheck.stream.secret import Secret, charged

FloatArray = NDArray[np.float64]
SM_SAMPLER = "sampling-mechanism"  # recorded as sampling-mechanism+<the Laplace sampler>
LOCAL_SAMPLER = "local-oracle"  # recorded as local-oracle:<grr|oue|grr,oue>+numpy-binomial


@final
class PersonalizedLedger(LedgerCore):
    """Accounts ε_{i,t} per requirement class for ``runs`` runs; refuses any user window over ε_i.

    Amounts are arrays of shape (runs, classes), (classes,) (same for every run) or a scalar (same
    for every user); column c is the budget of every user of ``requirements.classes[c]``.
    """

    __slots__ = ("_counts", "_eps_bounds", "_eps_units", "_requirements", "_windows")

    def __init__(
        self,
        requirements: RequirementSet,
        *,
        runs: int = 1,
        seed: int = 0,
        sampler: str = DISCRETE,
        keep_records: bool = False,
    ) -> None:
        if not isinstance(requirements, RequirementSet):
            raise InvalidArgument(f"requirements must be a RequirementSet, got {type(requirements).__name__}")
        super().__init__(runs=runs, seed=seed, sampler=sampler, keep_records=keep_records)
        self._requirements = requirements
        self._counts = np.array(requirements.counts, dtype=np.float64)
        self._eps_units = [rounding.to_units(r.epsilon) for r in requirements.classes]
        self._eps_bounds = [ExactVector.from_int(units) for units in self._eps_units]
        self._windows = [ExactWindows(r.w, self._runs) for r in requirements.classes]

    @property
    def requirements(self) -> RequirementSet:
        return self._requirements

    def remaining(self, t: int) -> FloatArray:
        """Shape (runs, classes): what every user of each class can still spend at t (rounded down)."""
        self._refresh()
        t = self._check_t(t)
        columns = [
            rounding.units_to_float_down_array(eps - win.prospective(t)[0].to_object())
            for eps, win in zip(self._eps_units, self._windows, strict=True)
        ]
        return np.stack(columns, axis=1)

    def window_sum(self, t: int) -> tuple[tuple[int, ...], ...]:
        """Per class, the exact sums of [t−w_c+1, t] per run, in units of 2**-1127 (for auditors)."""
        self._refresh()
        t = self._check_t(t)
        return tuple(tuple(win.prospective(t)[0].tolist()) for win in self._windows)

    @journaled
    def spend(self, t: int, epsilon: ArrayLike, *, purpose: str) -> None:
        """Charge ε_{i,t} (per class) at t without reading any data."""
        t = self._check_t(t)
        amounts = self._check_amounts(epsilon)
        self._charge(t, amounts, SpendRecord(t=t, purpose=check_label(purpose), amounts=amounts))

    @journaled
    def sample_release(self, secret: Secret, epsilon: ArrayLike, *, purpose: str = "publication") -> FloatArray:
        """The Sampling Mechanism (Jorgensen et al. 2015) with OBS: one release, per-user budgets.

        Per run: θ = OBS(ε_{·,t}); each user with ε_i < θ is kept with probability
        (e^{ε_i} − 1)/(e^{θ} − 1), the others always; the kept users are counted per bin and
        Laplace noise of scale 1/θ is added (sensitivity 1: one user, one bin). Every user is
        charged ε_i. Counts are not re-weighted (Du et al. 2025, Algorithm 4 line 10). Returns
        (runs, d); NaN rows for runs where every budget is 0.
        """
        theta, scale, record = self._reserve_sampled(secret, epsilon, 1.0, purpose)
        with charged(secret) as counts:
            sampled = self._sample(counts, record.amounts, theta)
        return self._noisy(sampled, theta, scale, 1.0, per_run=True)

    @journaled
    def sample_dissimilarity(
        self, secret: Secret, last_release: ArrayLike, epsilon: ArrayLike, *, purpose: str = "dissimilarity"
    ) -> FloatArray:
        """Du et al. 2025, Algorithm 3: (1/d) Σ_j |c̃_t[j] − r_l[j]| + Lap(1/(d θ)), θ = OBS(ε_{·,t}).

        c̃_t are the Sampling Mechanism's counts at the per-user budgets. Returns shape (runs,).
        """
        self._check_secret(secret)
        d = int(secret.shape[-1])
        last = np.asarray(last_release, dtype=np.float64)
        if last.shape != (self._runs, d) or not np.isfinite(last).all():
            raise InvalidArgument(f"last_release must be finite with shape {(self._runs, d)}, got shape {last.shape}")
        theta, scale, record = self._reserve_sampled(secret, epsilon, 1.0 / d, purpose, integral=False)
        with charged(secret) as counts:
            sampled = self._sample(counts, record.amounts, theta)
        distance = np.abs(sampled - last).mean(axis=1)
        return self._noisy(distance, theta, scale, 1.0 / d, per_run=True, integral=False)

    @journaled
    def local_report(self, secret: Secret, epsilon: ArrayLike, *, purpose: str = "publication") -> FloatArray:
        """Every user of a class with ε_{c,t} > 0 reports through an ε_{c,t}-LDP frequency oracle (GRR or
        OUE, :mod:`budgetcheck.ledger.local`) and is charged ε_{c,t}; the users of classes with 0 send
        nothing and are charged nothing. Returns the unbiased count estimate Σ_c n̂_c, shape (runs, d);
        NaN rows for runs where no class reports. LBU/PLBU's inner step (Ren et al. SIGMOD'22, LDP-IDS;
        Du et al. 2025, §5.2): the caller never sees a user's value or report, only the estimate.
        """
        t = self._check_secret(secret)
        if secret.shape[:1] != (self._requirements.n_classes,):
            raise InvalidArgument(f"{secret!r} is not from a PersonalizedStream of this requirement set")
        amounts = self._check_amounts(epsilon)
        if not amounts.any():
            raise InvalidArgument(
                "a local report with epsilon=0 for every user and run would read the data without paying"
            )
        d = int(secret.shape[-1])
        grr = uses_grr(amounts, d)
        used = sorted({GRR if g else OUE for g, a in zip(grr.ravel(), amounts.ravel(), strict=True) if a > 0})
        record = SpendRecord(
            t=t,
            purpose=check_label(purpose),
            amounts=amounts,
            sensitivity=1.0,
            sampler=f"{LOCAL_SAMPLER}:{','.join(used)}+numpy-binomial",
        )
        self._charge(t, amounts, record)  # refused here: nothing drawn, nothing charged
        with charged(secret) as counts:
            estimate = perturbed_estimate(self._rng, counts, self._counts, amounts)
        reporting = np.asarray(amounts.any(axis=1), dtype=bool)
        return np.asarray(np.where(reporting[:, None], estimate, np.nan), dtype=np.float64)

    def local_variance(self, epsilon: ArrayLike, dimensions: int) -> FloatArray:
        """Public (no data): the variance of one bin of ``local_report``'s estimate at these budgets,
        averaged over the bins, per run (Wang et al. 2017, Eq. 2; the LDP-IDS error threshold)."""
        d = check_positive_int(dimensions, "dimensions")
        return estimate_variance(self._check_amounts(epsilon), self._counts, d)

    def reporting_error(self, epsilon: ArrayLike, *, sensitivity: float = 1.0) -> tuple[FloatArray, FloatArray]:
        """OBS on public budgets only (no data): (θ, err(θ)) per run (Du et al. 2025, Algorithm 1)."""
        return optimal_budget(self._check_amounts(epsilon), self._counts, sensitivity=sensitivity)

    def header(self) -> LedgerHeader:
        strict = self._requirements.strictest()
        classes = tuple(
            (r.w, r.epsilon, n) for r, n in zip(self._requirements.classes, self._requirements.counts, strict=True)
        )
        return LedgerHeader(
            notion=Notion.PERSONALIZED, epsilon=strict.epsilon, w=strict.w, runs=self._runs, classes=classes
        )

    def __repr__(self) -> str:
        return (
            f"PersonalizedLedger({self._requirements!r}, runs={self._runs}, t={self._t}, records={len(self._records)})"
        )

    # -- internals -----------------------------------------------------------------------------
    def _reset(self) -> None:
        self._windows = [ExactWindows(r.w, self._runs) for r in self._requirements.classes]

    def _lookback(self) -> int:
        return max(r.w for r in self._requirements.classes)

    def _check_amounts(self, value: ArrayLike) -> FloatArray:
        """Shape (runs, classes), (classes,) or a scalar; finite and >= 0."""
        return check_bin_amounts(value, self._runs, self._requirements.n_classes, scalar=True)

    def _reserve_sampled(
        self, secret: Secret, epsilon: ArrayLike, sensitivity: float, purpose: str, *, integral: bool = True
    ) -> tuple[FloatArray, FloatArray, SpendRecord]:
        t = self._check_secret(secret)
        if secret.shape[:1] != (self._requirements.n_classes,):
            raise InvalidArgument(f"{secret!r} is not from a PersonalizedStream of this requirement set")
        amounts = self._check_amounts(epsilon)
        if not amounts.any():
            raise InvalidArgument(
                "a sampled release with epsilon=0 for every user and run would read the data without paying"
            )
        theta, _ = optimal_budget(amounts, self._counts, sensitivity=sensitivity)
        scale = self._noise.scale(
            sensitivity, theta, integral=integral
        )  # numpy: Δ/θ rounded up; discrete: covers its grid
        record = SpendRecord(
            t=t,
            purpose=check_label(purpose),
            amounts=amounts,
            sensitivity=sensitivity,
            noise_scale=scale,
            sampler=f"{SM_SAMPLER}+{self._noise.name}",
        )
        self._charge(t, amounts, record)
        return theta, scale, record

    def _sample(self, counts: FloatArray, amounts: FloatArray, theta: FloatArray) -> FloatArray:
        """Σ_c Binomial(count[c, b], p_c) per run and bin: the per-bin counts of the sampled users."""
        p = inclusion_probabilities(amounts, theta)  # (runs, classes)
        whole = counts.astype(np.int64)
        draws = self._rng.binomial(whole[None, :, :], p[:, :, None])
        return np.asarray(draws.sum(axis=1), dtype=np.float64)

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check every class's window [t−w_c+1, t] for every run exactly; commit all or nothing."""
        quick = [
            win.quick_check(t, amounts[:, c], req.epsilon)
            for c, (win, req) in enumerate(zip(self._windows, self._requirements.classes, strict=True))
        ]
        if all(q is not None for q in quick):  # every class certainly within its ε
            for c, (win, q) in enumerate(zip(self._windows, quick, strict=True)):
                assert q is not None
                win.commit_quick(t, amounts[:, c], *q)
            self._commit(t, record)
            return
        staged = []
        for c, (eps, win) in enumerate(zip(self._eps_units, self._windows, strict=True)):
            added = ExactVector.from_floats(amounts[:, c])
            window, leaving = win.prospective(t)
            proposed = window + added
            over = np.flatnonzero(proposed.exceeds(self._eps_bounds[c]))
            if over.size:
                self._refusals += 1
                run = int(over[0])
                req = self._requirements.classes[c]
                raise window_exceeded(
                    what=(
                        f"spend of {float(amounts[run, c])!r} at t={t} for users with (w={req.w}, "
                        f"epsilon={req.epsilon!r}) (purpose {record.purpose!r}, run {run})"
                    ),
                    t=t,
                    w=req.w,
                    epsilon=req.epsilon,
                    eps_units=eps,
                    window=int(window[run]),
                    proposed=int(proposed[run]),
                    run=run,
                    remaining_call=f"ledger.remaining({t})[{run}, {c}]",
                )
            staged.append((win, amounts[:, c], added, proposed, leaving))
        for win, column, added, proposed, leaving in staged:
            win.commit(t, column, added, proposed, leaving)
        self._commit(t, record)
