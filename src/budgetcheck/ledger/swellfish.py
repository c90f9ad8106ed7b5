"""The Swellfish ledger (Tex, Schäler, Böhm; composition Theorem 4.2, temporal sensitivity Theorem 4.1).

For every policy of the collection, the δ(J) largest per-timestamp budgets spent during its
relevance interval J sum to at most ε. The ledger keeps, per policy and run, the current
TOP_δ(J) set as δ exact entries (Python integers in units of 2**-1127, padded with zeros: the sum
of the δ largest of a multiset padded with zeros is unchanged) and their timestamps, updated
incrementally: a spend costs O(runs · Σ_{φ relevant} δ_φ) and does not grow with |J| or with the
stream length. Budgets spent at the same timestamp add up before they compete for TOP_δ(J).
Laplace releases use the temporal sensitivity Δ_Q^t(Φ) (times the declared sensitivity of the
query per unit of policy distance, 1 for the sum); where Δ_Q^t = 0 the true value may be released
for free (:meth:`SwellfishLedger.release_exact`).
"""

from __future__ import annotations

from typing import final

import numpy as np
from numpy.typing import NDArray

from budgetcheck import rounding
from budgetcheck.ledger.core import LaplaceReleases, journaled, locked
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument
from budgetcheck.ledger.noise import DISCRETE
from budgetcheck.ledger.notion import Notion
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy
from budgetcheck.ledger.records import LedgerHeader, SpendRecord
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import check_epsilon
from budgetcheck.rounding import ObjectArray
from budgetcheck.stream.secret import Secret, charged

FloatArray = NDArray[np.float64]
UNBOUNDED = float(np.finfo(np.float64).max)  # remaining(t) where no policy is relevant: any finite spend fits


@final
class SwellfishLedger(LaplaceReleases):
    """Accounts ε_t for ``runs`` runs under (ε, Φ)-Swellfish privacy; refuses any TOP_δ(J) sum over ε.

    Example:
        >>> from budgetcheck import PolicyCollection, StreamPolicy, SwellfishLedger
        >>> policies = PolicyCollection([StreamPolicy(1, 10, (5.0, 5.0))])  # J = [1, 10], two thresholds
        >>> ledger = SwellfishLedger(policies, epsilon=1.0)
        >>> ledger.spend(3, 0.5, purpose="publication")
        >>> ledger.top_set(0)  # the timestamps whose budgets count for the policy: (t, amount)
        ((3, 0.5),)
    """

    __slots__ = ("_current", "_current_t", "_eps_units", "_epsilon", "_policies", "_sums", "_tops", "_top_times")

    def __init__(
        self,
        policies: PolicyCollection,
        *,
        epsilon: float,
        runs: int = 1,
        seed: int = 0,
        sampler: str = DISCRETE,
        keep_records: bool = False,
        trusted_code: bool = False,
        allow_vouched: bool = False,
    ) -> None:
        if not isinstance(policies, PolicyCollection):
            raise InvalidArgument(f"policies must be a PolicyCollection, got {type(policies).__name__}")
        super().__init__(
            runs=runs,
            seed=seed,
            sampler=sampler,
            keep_records=keep_records,
            trusted_code=trusted_code,
            allow_vouched=allow_vouched,
        )
        self._policies = policies
        self._epsilon = check_epsilon(epsilon)
        self._eps_units = rounding.to_units(self._epsilon)
        self._reset()

    def _reset(self) -> None:
        deltas = [self._policies.delta(i) for i in range(len(self._policies))]
        self._tops: list[ObjectArray] = [np.zeros((self._runs, d), dtype=np.int64).astype(object) for d in deltas]
        self._top_times: list[NDArray[np.int64]] = [np.zeros((self._runs, d), dtype=np.int64) for d in deltas]
        self._sums: list[ObjectArray] = [_zeros(self._runs) for _ in deltas]
        self._current = _zeros(self._runs)  # exact total spent at the latest timestamp, per run
        self._current_t = 0

    @property
    def policies(self) -> PolicyCollection:
        return self._policies

    @property
    def epsilon(self) -> float:
        return self._epsilon

    def temporal_sensitivity(self, t: int) -> float:
        """Δ_Q^t(Φ) (public: it depends on the policies only)."""
        return self._policies.temporal_sensitivity(self._check_t(t))

    @locked
    def remaining(self, t: int) -> FloatArray:
        """What each run can still spend at t, rounded down; where no policy is relevant nothing bounds a
        spend (it enters no TOP_δ(J) and Δ_Q^t = 0): the largest amount a spend can name, the largest
        finite double (amounts are finite), so spending ``remaining(t)`` is never refused."""
        self._refresh()
        t = self._check_t(t)
        relevant = self._policies.relevant(t)
        if not relevant:
            return np.full(self._runs, UNBOUNDED)
        current = self._current if self._current_t == t else _zeros(self._runs)
        rooms = []
        for index in relevant:
            tops, times, total = self._tops[index], self._top_times[index], self._sums[index]
            present = (times == t).any(axis=1)
            rooms.append(
                np.where(present, self._eps_units - total, self._eps_units - total + tops.min(axis=1) - current)
            )
        room = np.min(np.stack(rooms), axis=0)
        return rounding.units_to_float_down_array(np.maximum(room, 0).astype(object))

    @locked
    def top_set(self, policy: int | StreamPolicy, run: int = 0) -> tuple[tuple[int, float], ...]:
        """TOP_δ(J) of ``policy`` so far (a StreamPolicy of the collection, or its index): (timestamp, budget)
        pairs, largest first (zero padding left out)."""
        index = self._policy_index(policy)
        if isinstance(run, bool) or not isinstance(run, int) or not 0 <= run < self._runs:
            raise InvalidArgument(f"run={run!r} must be an integer in [0, {self._runs})")
        pairs = [
            (int(t), rounding.units_to_float_near(int(u)))
            for u, t in zip(self._tops[index][run].tolist(), self._top_times[index][run].tolist(), strict=True)
            if u > 0
        ]
        return tuple(sorted(pairs, key=lambda p: (-p[1], p[0])))

    @locked
    def top_sum(self, policy: int | StreamPolicy) -> tuple[int, ...]:
        """Exact Σ TOP_δ(J) of ``policy`` (a StreamPolicy of the collection, or its index) per run, in units
        of 2**-1127."""
        return tuple(int(v) for v in self._sums[self._policy_index(policy)].tolist())

    def _policy_index(self, policy: object) -> int:
        """The index of ``policy`` in the collection: given as an index, or as the StreamPolicy itself (its
        first occurrence: equal policies hold equal TOP sets)."""
        count = len(self._policies)
        if isinstance(policy, StreamPolicy):
            if policy not in self._policies.policies:
                raise InvalidArgument(f"policy={policy!r} is not one of this ledger's {count} policies")
            return self._policies.policies.index(policy)
        if isinstance(policy, bool) or not isinstance(policy, int) or not 0 <= policy < count:
            raise InvalidArgument(
                f"policy={policy!r} must be a StreamPolicy of the collection or a policy index in [0, {count})"
            )
        return policy

    @journaled
    def release_exact(self, secret: Secret, *, purpose: str = "exact release") -> FloatArray:
        """The true value, free, where Δ_Q^t(Φ) = 0 (Algorithm 2 line 1); refused anywhere else."""
        t = self._check_secret(secret)
        if self._policies.temporal_sensitivity(t) != 0.0:
            raise InvalidArgument(
                f"release_exact at t={t}: policies {list(self._policies.relevant(t))} are relevant "
                f"(temporal sensitivity {self._policies.temporal_sensitivity(t)!r}); only t with sensitivity 0 is free"
            )
        amounts = np.zeros(self._runs)
        self._charge(
            t,
            amounts,
            SpendRecord(
                t=t, purpose=purpose, amounts=amounts, sensitivity=0.0, noise_scale=np.zeros(self._runs), sampler="none"
            ),
        )
        with charged(secret) as values:
            return np.broadcast_to(values, (self._runs, *values.shape)).copy()

    def header(self) -> LedgerHeader:
        policies = tuple((p.start, p.end, p.thresholds) for p in self._policies.policies)
        return LedgerHeader(
            notion=Notion.SWELLFISH,
            epsilon=self._epsilon,
            w=self._policies.max_interval,
            runs=self._runs,
            policies=policies,
        )

    def __repr__(self) -> str:
        return f"SwellfishLedger({self._policies!r}, epsilon={self._epsilon!r}, runs={self._runs}, t={self._t})"

    # -- internals -----------------------------------------------------------------------------
    def _lookback(self) -> int:
        return 2**62  # a relevance interval may reach back to the first timestamp: load everything

    def _sensitivity_at(self, t: int, declared: float) -> float:
        """k·Δ_Q^t rounded up (to nearest it may fall below the product, and the noise with it)."""
        temporal = self._policies.temporal_sensitivity(t)
        return temporal if declared == 1.0 else rounding.mul_up_exact(declared, temporal)

    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Stage the new TOP_δ(J) of every relevant policy, check all, then commit; refuse atomically."""
        added = rounding.to_units_array(amounts)
        before = self._current if self._current_t == t else _zeros(self._runs)
        total = before + added
        staged = []
        rows = np.arange(self._runs)
        paying = np.asarray(added != 0, dtype=bool)
        for index in self._policies.relevant(t):
            tops, times, sums = self._tops[index].copy(), self._top_times[index].copy(), self._sums[index].copy()
            hit = times == t
            present = hit.any(axis=1)
            slot = np.where(present, hit.argmax(axis=1), np.argmin(tops, axis=1))
            old = tops[rows, slot]
            # t already in TOP: it grows by `added`; otherwise t's new total replaces the smallest if larger.
            enters = paying & (present | np.asarray(total > old, dtype=bool))
            sums = np.where(enters, sums + total - old, sums)
            tops[rows[enters], slot[enters]] = total[enters]
            times[rows[enters], slot[enters]] = t
            over = np.flatnonzero(np.asarray(sums > self._eps_units, dtype=bool))
            if over.size:
                self._refusals += 1
                raise self._exceeded(t, index, int(over[0]), amounts, sums)
            staged.append((index, tops, times, sums))
        self._guard()
        for index, tops, times, sums in staged:
            self._tops[index], self._top_times[index], self._sums[index] = tops, times, sums
        self._current, self._current_t = total, t
        self._commit(t, record)
        self._unguard()

    def _exceeded(self, t: int, index: int, run: int, amounts: FloatArray, sums: ObjectArray) -> BudgetExceeded:
        policy = self._policies.policies[index]
        total = rounding.units_to_float_near(int(sums[run]))
        run_text = f", run {run}" if self._runs > 1 else ""
        return BudgetExceeded(
            f"spend of {float(amounts[run])!r} at t={t}{run_text} would make the {self._policies.delta(index)} largest "
            f"budgets in J=[{policy.start}, {policy.end}] of policy {index} sum to {total!r} > "
            f"epsilon={self._epsilon!r}; "
            f"ledger.remaining({t}) is {float(self.remaining(t)[run])!r}",
            run=run,
            window=(policy.start, policy.end),
            window_sum=total,
            epsilon=self._epsilon,
        )


def _zeros(runs: int) -> ObjectArray:
    """An exact all-zero per-run vector (object array of Python ints)."""
    return np.zeros(runs, dtype=np.int64).astype(object)


# the policies every Δ_Q^t is derived from are fixed for the ledger's life (issue 43, item 3)
seal(SwellfishLedger, "_policies")
