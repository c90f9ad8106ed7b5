"""The personalized w-event ledger (Du et al. 2025, (w, ε)-EPDP and Theorem 4.6).

For every user i and every window of w_i consecutive timestamps, Σ ε_{i,t} <= ε_i. Users with the
same requirement always receive the same budget here, so the ledger keeps one exact window sum per
requirement class and run (:class:`ExactWindows`), and a spend is an array of shape (runs, classes).
The raw per-user data is read only by the two Sampling-Mechanism operations, which charge every
user their own ε_{i,t} (the requested amount: an upper bound on the actual loss min(ε_{i,t}, θ)),
and by ``local_report``, where every user of a reporting class perturbs its own value with an
ε_{i,t}-LDP frequency oracle (:mod:`budgetcheck.ledger.local`) and is charged ε_{i,t}.

Population division (LDP-IDS's LPD and LPA, Ren et al. SIGMOD'22, §5): ``local_report_groups``
charges only a public subset of a class's users. The users of class c are split into k public groups
by a data-independent rule, the j-th user of the class (stream column order) in group j mod k, and
the ledger then keeps one exact window per (class, group, run): a charge of shape (runs, classes)
applies to every group, one of shape (runs, classes, k) to each group its own amount. k is fixed by
the first grouped report, which must come before any spend.
"""

from __future__ import annotations

from typing import final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.ledger.core import LedgerCore, journaled, locked
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.local import GRR, OUE, estimate_variance, group_counts, perturbed_estimate, uses_grr
from budgetcheck.ledger.noise import DISCRETE, NUMPY
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.records import LedgerHeader, SpendRecord
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.sampling import inclusion_probabilities, optimal_budget
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import (
    check_bin_amounts,
    check_label,
    check_positive_int,
    check_release_row,
    float_array,
)
from budgetcheck.ledger.wevent import window_exceeded
from budgetcheck.ledger.windows import ExactWindows
from budgetcheck.stream.guarded import SecretSequence
from budgetcheck.stream.live import LiveStream
from budgetcheck.stream.neighbours import DEFAULT
from budgetcheck.stream.secret import Secret, charged, neighbours_of, requirements_of, users_of

FloatArray = NDArray[np.float64]
SM_SAMPLER = "sampling-mechanism"  # recorded as sampling-mechanism+<the Laplace sampler>
LOCAL_SAMPLER = "local-oracle"  # recorded as local-oracle:<grr|oue|grr,oue>+numpy-binomial


@final
class PersonalizedLedger(LedgerCore):
    """Accounts ε_{i,t} per requirement class for ``runs`` runs; refuses any user window over ε_i.

    Amounts are arrays of shape (runs, classes), (classes,) (same for every run) or a scalar (same
    for every user); column c is the budget of every user of ``requirements.classes[c]``.

    Example:
        >>> from budgetcheck import PersonalizedLedger, RequirementSet
        >>> requirements = RequirementSet({"ana": (4, 0.5), "ben": (2, 1.0)})  # user: (w_i, epsilon_i)
        >>> requirements.classes
        (Requirement(w=2, epsilon=1.0), Requirement(w=4, epsilon=0.5))
        >>> ledger = PersonalizedLedger(requirements)
        >>> ledger.spend(1, 0.25, purpose="publication")
        >>> ledger.remaining(2)  # per run and class: ben's window [1, 2], ana's [1, 4]
        array([[0.75, 0.25]])
    """

    __slots__ = ("_classes", "_counts", "_eps_bounds", "_eps_units", "_groups", "_requirements", "_windows")

    def __init__(
        self,
        requirements: RequirementSet,
        *,
        runs: int = 1,
        seed: int = 0,
        sampler: str = DISCRETE,
        keep_records: bool = False,
        trusted_code: bool = False,
        allow_vouched: bool = False,
    ) -> None:
        if not isinstance(requirements, RequirementSet):
            raise InvalidArgument(f"requirements must be a RequirementSet, got {type(requirements).__name__}")
        super().__init__(
            runs=runs,
            seed=seed,
            sampler=sampler,
            keep_records=keep_records,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
        self._requirements = requirements
        # (w_c, ε_c, n_c) as plain numbers: what every check and the header read, never the requirement objects
        # a caller holds (attrs' frozen guard gives way to object.__setattr__)
        self._classes = tuple(
            (r.w, r.epsilon, n) for r, n in zip(requirements.classes, requirements.counts, strict=True)
        )
        self._counts = np.array(requirements.counts, dtype=np.float64)
        self._eps_units = [rounding.to_units(eps) for _, eps, _ in self._classes]
        self._eps_bounds = [ExactVector.from_int(units) for units in self._eps_units]
        self._groups = 1
        self._windows = [ExactWindows(w, self._runs) for w, _, _ in self._classes]

    @property
    def groups(self) -> int:
        """k, the number of public groups every class is split into (1 until a grouped report)."""
        return self._groups

    def group_sizes(self, groups: int) -> NDArray[np.int64]:
        """Public: shape (classes, groups), the users of class c in group g (its j-th users, j ≡ g mod k)."""
        k = check_positive_int(groups, "groups")
        n = np.array(self._requirements.counts, dtype=np.int64)[:, None]
        return np.asarray(n // k + (np.arange(k)[None, :] < n % k), dtype=np.int64)

    @property
    def requirements(self) -> RequirementSet:
        return self._requirements

    @locked
    def remaining(self, t: int) -> FloatArray:
        """Shape (runs, classes): what every user of each class can still spend at t (rounded down)."""
        self._refresh()
        t = self._check_t(t)
        return np.asarray(self.remaining_groups(t).min(axis=2), dtype=np.float64)

    @locked
    def remaining_groups(self, t: int) -> FloatArray:
        """Shape (runs, classes, groups): what every user of each (class, group) can still spend at t."""
        self._refresh()
        t = self._check_t(t)
        columns = [
            rounding.units_to_float_down_array(eps - win.prospective(t)[0].to_object()).reshape(self._runs, -1)
            for eps, win in zip(self._eps_units, self._windows, strict=True)
        ]
        return np.stack(columns, axis=1)

    @locked
    def window_sum(self, t: int) -> tuple[tuple[int, ...], ...]:
        """Per class, the exact sums of [t−w_c+1, t] per run (the largest over its groups), in units of
        2**-1127 (for auditors)."""
        self._refresh()
        t = self._check_t(t)
        k = self._groups
        return tuple(
            tuple(max(lanes[r * k : (r + 1) * k]) for r in range(self._runs))
            for lanes in (win.prospective(t)[0].tolist() for win in self._windows)
        )

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
        theta, scale, record = self._reserve_sampled(secret, epsilon, 1, purpose)
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
        self._check_class_secret(secret)
        d = int(secret.shape[-1])
        last = check_release_row(last_release, (self._runs, d))
        theta, scale, record = self._reserve_sampled(secret, epsilon, d, purpose, integral=False)
        with charged(secret) as counts:
            sampled = self._sample(counts, record.amounts, theta)
        distance = np.abs(sampled - last).mean(axis=1)
        sensitivity = record.sensitivity
        assert sensitivity is not None  # a sampled release's record carries the sensitivity its scale covers
        return self._noisy(distance, theta, scale, sensitivity, per_run=True, integral=False)

    @journaled
    def local_report(self, secret: Secret, epsilon: ArrayLike, *, purpose: str = "publication") -> FloatArray:
        """Every user of a class with ε_{c,t} > 0 reports through an ε_{c,t}-LDP frequency oracle (GRR or
        OUE, :mod:`budgetcheck.ledger.local`) and is charged ε_{c,t}; the users of classes with 0 send
        nothing and are charged nothing. Returns the unbiased count estimate Σ_c n̂_c, shape (runs, d);
        NaN rows for runs where no class reports. LBU/PLBU's inner step (Ren et al. SIGMOD'22, LDP-IDS;
        Du et al. 2025, §5.2): the caller never sees a user's value or report, only the estimate.
        """
        t = self._check_class_secret(secret)
        amounts = self._check_amounts(epsilon)
        if not amounts.any():
            raise _unpaid_read("a local report", "user")
        d = int(secret.shape[-1])
        self._charge_local(t, amounts, amounts, d, purpose)  # refused here: nothing drawn, nothing charged
        with charged(secret) as counts:
            estimate = perturbed_estimate(self._randomness(), counts, self._counts, amounts)
        reporting = np.asarray(amounts.any(axis=1), dtype=bool)
        return np.asarray(np.where(reporting[:, None], estimate, np.nan), dtype=np.float64)

    def _charge_local(self, t: int, amounts: FloatArray, flat: FloatArray, d: int, purpose: str) -> None:
        """Charge a local report's ``amounts`` at t (or raise, changing nothing); its record names the
        frequency oracles used by the paying budgets (``flat``: shape (runs, reporters))."""
        grr = uses_grr(flat, d)
        used = sorted({GRR if g else OUE for g, a in zip(grr.ravel(), flat.ravel(), strict=True) if a > 0})
        record = SpendRecord(
            t=t,
            purpose=check_label(purpose),
            amounts=amounts,
            sensitivity=1.0,
            sampler=f"{LOCAL_SAMPLER}:{','.join(used)}+numpy-binomial",
        )
        self._charge(t, amounts, record)

    def local_variance(self, epsilon: ArrayLike, dimensions: int) -> FloatArray:
        """Public (no data): the variance of one bin of ``local_report``'s estimate at these budgets,
        averaged over the bins, per run (Wang et al. 2017, Eq. 2; the LDP-IDS error threshold)."""
        d = check_positive_int(dimensions, "dimensions")
        return estimate_variance(self._check_amounts(epsilon), self._counts, d)

    @journaled
    def local_report_groups(
        self, secret: Secret, epsilon: ArrayLike, *, groups: int, purpose: str = "publication"
    ) -> FloatArray:
        """Population division (Ren et al. SIGMOD'22, LDP-IDS §5, LPD/LPA): ``epsilon`` has shape
        (runs, classes, groups); every user of group g of class c reports through an
        ε_{c,g}-LDP frequency oracle and is charged ε_{c,g} in its own (class, group) window; groups
        with 0 send nothing and are charged nothing. Returns Σ of the reporting groups' unbiased
        estimates, shape (runs, d); NaN rows for runs where no group reports.
        """
        t = self._check_class_secret(secret)
        k = check_positive_int(groups, "groups")
        amounts = self._check_group_amounts(epsilon, k)
        purpose = check_label(purpose)  # every argument checked before the partition is fixed
        if not amounts.any():
            raise _unpaid_read("a local report", "group")
        users = users_of(secret)
        if users is None:
            raise InvalidArgument(f"{secret!r} keeps no per-user data: grouped reports need a PersonalizedStream")
        partition = self._groups
        self._divide(k)
        d = int(secret.shape[-1])
        flat = amounts.reshape(self._runs, -1)
        try:
            self._charge_local(t, amounts, flat, d, purpose)  # refused here: nothing drawn, nothing charged
        except (BudgetExceeded, InvalidArgument):
            if self._groups != partition:  # nor the partition this report would have fixed
                self._groups = partition
                self._reset()
            raise
        sizes = self.group_sizes(k).reshape(-1).astype(np.float64)
        with charged(users) as bins:
            counts = group_counts(bins, self._requirements.user_classes, self._requirements.n_classes, k, d)
        estimate = perturbed_estimate(self._randomness(), counts, sizes, flat)
        reporting = np.asarray(flat.any(axis=1), dtype=bool)
        return np.asarray(np.where(reporting[:, None], estimate, np.nan), dtype=np.float64)

    def local_group_variance(self, epsilon: ArrayLike, groups: int, dimensions: int) -> FloatArray:
        """Public (no data): ``local_variance`` of a grouped report, ``epsilon`` of shape (runs, classes, groups)."""
        k = check_positive_int(groups, "groups")
        d = check_positive_int(dimensions, "dimensions")
        flat = self._check_group_amounts(epsilon, k).reshape(self._runs, -1)
        return estimate_variance(flat, self.group_sizes(k).reshape(-1).astype(np.float64), d)

    def reporting_error(self, epsilon: ArrayLike, *, sensitivity: float = 1.0) -> tuple[FloatArray, FloatArray]:
        """OBS on public budgets only (no data): (θ, err(θ)) per run (Du et al. 2025, Algorithm 1)."""
        return optimal_budget(self._check_amounts(epsilon), self._counts, sensitivity=sensitivity)

    def header(self) -> LedgerHeader:
        return LedgerHeader(
            notion=Notion.PERSONALIZED,
            epsilon=min(eps for _, eps, _ in self._classes),  # the strictest requirement (RequirementSet.strictest)
            w=max(w for w, _, _ in self._classes),
            runs=self._runs,
            classes=self._classes,
        )

    def __repr__(self) -> str:
        return (
            f"PersonalizedLedger({self._requirements!r}, runs={self._runs}, t={self._t}, records={len(self._records)})"
        )

    # -- internals -----------------------------------------------------------------------------
    def _reset(self) -> None:
        self._windows = [ExactWindows(w, self._runs * self._groups) for w, _, _ in self._classes]

    def _divide(self, k: int) -> None:
        """Fix the partition into k groups: only before the first spend, and never a different k after."""
        if k == self._groups:
            return
        if self._t > 0 or any(win.prospective(1)[0].tolist() != [0] * self._runs for win in self._windows):
            raise InvalidArgument(
                f"groups={k!r}: this ledger's users are already split into {self._groups} group(s); the "
                "partition is fixed by the first grouped report, which must come before any spend"
            )
        self._groups = k
        self._reset()

    def _check_group_amounts(self, value: ArrayLike, k: int) -> FloatArray:
        """Shape (runs, classes, k), finite and >= 0: a fresh read-only array (the windows keep views of
        it, so a caller that writes its next budgets into the same buffer changes nothing charged)."""
        classes = self._requirements.n_classes
        raw = np.array(float_array(value, "epsilon", "a number array of shape (runs, classes, groups)"))
        if raw.shape != (self._runs, classes, k):
            raise InvalidArgument(
                f"epsilon must have shape (runs, classes, groups)={(self._runs, classes, k)}, got shape {raw.shape}"
            )
        bad = np.argwhere(~(np.isfinite(raw) & (raw >= 0)))
        if bad.size:
            index = tuple(int(i) for i in bad[0])
            raise InvalidArgument(f"epsilon{list(index)}={raw[index]!r} must be a finite number >= 0")
        raw.setflags(write=False)
        return raw

    def bind(self, stream: object) -> None:
        """:meth:`Ledger.bind`; a live stream's (classes, d) rows are then checked against this requirement
        set as they arrive (counts are integers >= 0, at most a class's users)."""
        if isinstance(stream, LiveStream):
            stream._limit_classes(self._requirements.counts, check_only=True)  # refused before binding
        elif isinstance(stream, SecretSequence) and stream.length:
            self._check_class_secret(stream.secret(1), claim=False)  # another requirement set: refused first
        super().bind(stream)
        if isinstance(stream, LiveStream):
            stream._limit_classes(self._requirements.counts)

    def _check_class_secret(self, secret: Secret, *, claim: bool = True) -> int:
        """The timestamp of a secret this ledger may read (:meth:`_check_secret`) that holds one row per
        requirement class: a secret of a PersonalizedStream of this requirement set."""
        if isinstance(secret, Secret):
            if claim and neighbours_of(secret) != DEFAULT:
                raise InvalidArgument(  # before the claim: nothing is bound by the attempt
                    f"{secret!r} is from a stream whose relation is {neighbours_of(secret)}: the personalized ledger "
                    f"accounts one user, one count in one bin ({DEFAULT}): the Sampling Mechanism samples counts "
                    "as users and the local oracles take one value per user"
                )
            if len(secret.shape) != 2 or secret.shape[0] != self._requirements.n_classes:
                raise InvalidArgument(  # before the claim: a stream of other shapes is not bound by the attempt
                    f"{secret!r} is not from a PersonalizedStream of this requirement set: its secrets hold "
                    f"(classes, d) = ({self._requirements.n_classes}, d) counts"
                )
            theirs = requirements_of(secret)
            if theirs is not None and not _same_classes(theirs, self._requirements):
                raise InvalidArgument(
                    f"{secret!r} is from a PersonalizedStream of another requirement set ({theirs!r}); this ledger "
                    f"accounts {self._requirements!r}"
                )
        return self._check_secret(secret) if claim else 0

    def _lookback(self) -> int:
        return max(r.w for r in self._requirements.classes)

    def _check_amounts(self, value: ArrayLike) -> FloatArray:
        """Shape (runs, classes), (classes,) or a scalar; finite and >= 0."""
        return check_bin_amounts(value, self._runs, self._requirements.n_classes, scalar=True)

    def _reserve_sampled(
        self, secret: Secret, epsilon: ArrayLike, count: int, purpose: str, *, integral: bool = True
    ) -> tuple[FloatArray, FloatArray, SpendRecord]:
        """Charge a Sampling-Mechanism release of a mean over ``count`` values (1: the counts themselves) of
        one user's one count: sensitivity 1/count, rounded up where the scale would not cover it (as
        :meth:`LedgerCore.dissimilarity` does); θ by OBS at fl(1/count), as before."""
        t = self._check_class_secret(secret)
        amounts = self._check_amounts(epsilon)
        if not amounts.any():
            raise _unpaid_read("a sampled release", "user")
        theta, _ = optimal_budget(amounts, self._counts, sensitivity=1.0 / count)
        sensitivity = rounding.covering_quotient(1.0, count, theta if self._noise.name == NUMPY else None)
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
        draws = self._randomness().binomial(whole[None, :, :], p[:, :, None])
        return np.asarray(draws.sum(axis=1), dtype=np.float64)

    def _lanes(self, amounts: FloatArray, c: int) -> FloatArray:
        """Class c's charge per (run, group) lane, lane = run·k + g: a class-wide charge goes to every group."""
        if amounts.ndim == 3:
            if amounts.shape[2] != self._groups:
                if self._applying:
                    self._divide(int(amounts.shape[2]))
                else:
                    raise InvalidArgument(f"a charge for {amounts.shape[2]} groups on a ledger of {self._groups}")
            return np.ascontiguousarray(amounts[:, c, :].reshape(-1))
        return np.repeat(amounts[:, c], self._groups)

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check every (class, group)'s window [t−w_c+1, t] for every run exactly; commit all or nothing."""
        columns = [self._lanes(amounts, c) for c in range(self._requirements.n_classes)]
        k = self._groups
        quick = [
            win.quick_check(t, columns[c], eps)
            for c, (win, (_, eps, _)) in enumerate(zip(self._windows, self._classes, strict=True))
        ]
        if all(q is not None for q in quick):  # every class certainly within its ε
            self._guard()
            for c, (win, q) in enumerate(zip(self._windows, quick, strict=True)):
                assert q is not None
                win.commit_quick(t, columns[c], *q)
            self._commit(t, record)
            self._unguard()
            return
        staged = []
        for c, (eps, win) in enumerate(zip(self._eps_units, self._windows, strict=True)):
            added = ExactVector.from_floats(columns[c])
            window, leaving = win.prospective(t)
            proposed = window + added
            over = np.flatnonzero(proposed.exceeds(self._eps_bounds[c]))
            if over.size:
                self._refusals += 1
                lane = int(over[0])
                run, group = divmod(lane, k)
                req_w, req_eps, _ = self._classes[c]
                who = f"users with (w={req_w}, epsilon={req_eps!r})" + (f" of group {group}" if k > 1 else "")
                raise window_exceeded(
                    what=(
                        f"spend of {float(columns[c][lane])!r} at t={t} for {who} "
                        f"(purpose {record.purpose!r}, run {run})"
                    ),
                    t=t,
                    w=req_w,
                    epsilon=req_eps,
                    eps_units=eps,
                    window=int(window[lane]),
                    proposed=int(proposed[lane]),
                    run=run,
                    remaining_call=(
                        f"ledger.remaining_groups({t})[{run}, {c}, {group}]"
                        if k > 1
                        else f"ledger.remaining({t})[{run}, {c}]"
                    ),
                )
            staged.append((win, columns[c], added, proposed, leaving))
        self._guard()
        for win, column, added, proposed, leaving in staged:
            win.commit(t, column, added, proposed, leaving)
        self._commit(t, record)
        self._unguard()


def _unpaid_read(operation: str, payers: str) -> InvalidArgument:
    """The refusal of an ``operation`` for which no one pays (ε = 0 for every one of the ``payers`` and
    every run): it would read the data for free. Raised before anything is charged or drawn."""
    return InvalidArgument(f"{operation} with epsilon=0 for every {payers} and run would read the data without paying")


def _same_classes(theirs: object, ours: RequirementSet) -> bool:
    """Whether a stream's requirement set assigns every user column the class this ledger's does (the
    same classes, sizes and column order: what the counts, windows and groups are built from)."""
    if theirs is ours:
        return True
    return (
        isinstance(theirs, RequirementSet)
        and theirs.classes == ours.classes
        and theirs.counts == ours.counts
        and np.array_equal(theirs.user_classes, ours.user_classes)
    )


# the requirement set the ledger accounts is fixed for its life (issue 43, item 3)
seal(PersonalizedLedger, "_requirements")
