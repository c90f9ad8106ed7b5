"""What every budgetcheck ledger shares: runs, seeded noise, the clock, records, export, secrets.

The notion-specific part (which composition theorem a spend must satisfy) lives in the subclasses:
:class:`WindowLedger` (w-event), :class:`PersonalizedLedger`, :class:`SwellfishLedger`. Every
charged release follows reserve -> draw -> commit: the subclass's ``_charge`` checks and commits
before any value is read, and raises (changing nothing) when the spend would break its theorem.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck._errors import InvalidArgument, TimestampOrder
from budgetcheck._records import LedgerHeader, SpendRecord, dump_lines
from budgetcheck._secret import Secret, charged, claim
from budgetcheck._stream import SecretSequence
from budgetcheck._validation import check_amounts, check_bin_amounts, check_label, check_positive_int, check_sensitivity

FloatArray = NDArray[np.float64]
SAMPLER = "numpy-laplace"


class LedgerCore(abc.ABC):
    """Runs, seeded noise generator, monotone clock, immutable records and their JSON-lines export."""

    __slots__ = ("_records", "_refusals", "_rng", "_runs", "_t")

    def __init__(self, *, runs: int, seed: int) -> None:
        self._runs = check_positive_int(runs, "runs")
        self._rng = np.random.default_rng(check_positive_int(seed, "seed", minimum=0))
        self._t = 0
        self._records: list[SpendRecord] = []
        self._refusals = 0

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

    def bind(self, stream: object) -> None:
        """Make this ledger the only one that may read ``stream`` (``execute`` does this first).

        A mechanism that opened a second ledger to read the stream would keep its spends out of
        this ledger's record; after binding, that raises :class:`SecretAccess`.
        """
        if not isinstance(stream, SecretSequence):
            raise InvalidArgument(f"stream must be a GuardedStream or PersonalizedStream, got {type(stream).__name__}")
        stream._bind(self)

    @abc.abstractmethod
    def header(self) -> LedgerHeader:
        """What notion and parameters this ledger keeps (the first line of its export)."""

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

    # -- internals shared by the subclasses -----------------------------------------------------
    def _check_t(self, t: object) -> int:
        t = check_positive_int(t, "t")
        if t < self._t:
            raise TimestampOrder(f"t={t} is before the ledger's latest timestamp {self._t}: timestamps never go backwards")
        return t

    def _check_secret(self, secret: object) -> int:
        """The timestamp of a secret this ledger may read (type, order and stream binding checked)."""
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a guarded stream, got {type(secret).__name__}")
        t = self._check_t(secret.t)
        claim(secret, self)
        return t

    def _commit(self, t: int, record: SpendRecord) -> None:
        self._t = t
        self._records.append(record)

    def _noisy(self, values: FloatArray, budgets: FloatArray, scale: FloatArray, *, per_run: bool = False) -> FloatArray:
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


class LaplaceReleases(LedgerCore):
    """The charged Laplace operations of ledgers whose spends are one amount per run.

    Subclasses supply ``_charge(t, amounts, record)`` (check the theorem, then commit, or raise and
    change nothing) and ``_sensitivity_at(t, declared)`` (the sensitivity the noise must use).
    """

    __slots__ = ()

    def spend(self, t: int, epsilon: ArrayLike, *, purpose: str) -> None:
        """Charge ``epsilon`` at timestamp t without reading any data (e.g. a reservation)."""
        t = self._check_t(t)
        amounts = check_amounts(epsilon, self._runs)
        purpose = check_label(purpose)
        self._charge(t, amounts, SpendRecord(t=t, purpose=purpose, amounts=amounts))

    def laplace(self, secret: Secret, epsilon: ArrayLike, *, sensitivity: float = 1.0, purpose: str = "publication") -> FloatArray:
        """Release the secret plus Laplace noise of scale sensitivity/ε (rounded up), per run.

        Returns shape (runs, *secret.shape); rows of runs with ε = 0 are NaN (nothing released).
        """
        amounts = check_amounts(epsilon, self._runs)
        scale = self._reserve(secret, amounts, amounts, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            return self._noisy(values, amounts, scale)

    def laplace_bins(self, secret: Secret, epsilon: ArrayLike, *, sensitivity: float = 1.0, purpose: str = "publication") -> FloatArray:
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

    def laplace_groups(
        self, secret: Secret, labels: ArrayLike, epsilon: ArrayLike, *, sensitivity: float = 1.0, purpose: str = "publication"
    ) -> FloatArray:
        """Noisy sums of groups of bins, each group with its own budget; charge the maximum over groups.

        ``labels`` (shape (runs, d), or (d,) for every run) puts bin j of run r in group
        labels[r, j] in [0, G), or in none (−1). ``epsilon`` has shape (runs, G) (or (G,)). A
        person sits in one bin, hence in one group, per timestamp: the groups are disjoint and
        the charge is max_g ε_{t,g} (accounting rules §2; RescueDP's and AdaPub's groups).
        Returns (runs, G): Σ_{j in g} values[j] + Lap(Δ/ε_g); NaN where ε_g = 0.
        """
        self._check_secret(secret)
        bins = int(secret.shape[-1]) if secret.shape else 1
        if len(secret.shape) > 1:
            raise InvalidArgument(f"laplace_groups needs a one-dimensional histogram, got a secret of shape {secret.shape}")
        raw = np.asarray(labels)
        if raw.dtype.kind not in "iu" or raw.shape not in ((bins,), (self._runs, bins)):
            raise InvalidArgument(f"labels must be integers of shape ({bins},) or ({self._runs}, {bins}), got {raw.dtype} {raw.shape}")
        groups = np.broadcast_to(raw.astype(np.int64), (self._runs, bins))
        count = int(np.asarray(epsilon).shape[-1]) if np.ndim(epsilon) else 0
        budgets = check_bin_amounts(epsilon, self._runs, count)
        if groups.size and (groups.min() < -1 or groups.max() >= count):
            raise InvalidArgument(f"labels must lie in [-1, {count}) for epsilon with {count} groups, got [{groups.min()}, {groups.max()}]")
        scale = self._reserve(secret, budgets.max(axis=1), budgets, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            sums = np.zeros((self._runs, count))
            member = groups >= 0
            runs = np.broadcast_to(np.arange(self._runs)[:, None], groups.shape)
            np.add.at(sums, (runs[member], groups[member]), np.broadcast_to(values.reshape(-1), groups.shape)[member])
            return self._noisy(sums, budgets, scale, per_run=True)

    def dissimilarity(self, secret: Secret, last_release: ArrayLike, epsilon: ArrayLike, *, purpose: str = "dissimilarity") -> FloatArray:
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
        amounts = self._measurement_amounts(fn, epsilon, "measure")
        scale = self._reserve(secret, amounts, amounts, check_sensitivity(sensitivity), purpose)
        with charged(secret) as values:
            result = _apply(fn, values, "measure")
        return self._noisy(result, amounts, scale)

    # -- hooks and internals ------------------------------------------------------------------
    def _measurement_amounts(self, fn: object, epsilon: ArrayLike, what: str) -> FloatArray:
        """The per-run budgets of a measurement, refused before any charge if fn is not callable
        or no run pays (fn would read the data for free)."""
        if not callable(fn):
            raise InvalidArgument(f"fn={fn!r} must be callable")
        amounts = check_amounts(epsilon, self._runs)
        if not amounts.any():
            raise InvalidArgument(f"{what} with epsilon=0 for every run would read the data without paying for it")
        return amounts

    @abc.abstractmethod
    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check the notion's composition theorem for ``amounts`` at t, then commit; or raise, changing nothing."""

    def _sensitivity_at(self, t: int, declared: float) -> float:
        return declared

    def _reserve(self, secret: Secret, amounts: FloatArray, budgets: FloatArray, sensitivity: float, purpose: str) -> FloatArray:
        """Charge ``amounts`` at the secret's timestamp for a Laplace release at ``budgets``.

        Returns the noise scales sensitivity/budget, rounded up. Raises before anything is read.
        """
        t = self._check_secret(secret)
        purpose = check_label(purpose)
        sensitivity = self._sensitivity_at(t, sensitivity)
        scale = rounding.scale_up(sensitivity, budgets)
        record = SpendRecord(t=t, purpose=purpose, amounts=amounts, sensitivity=sensitivity, noise_scale=scale, sampler=SAMPLER)
        self._charge(t, amounts, record)
        return scale


def _apply(fn: Callable[[FloatArray], ArrayLike], payload: object, what: str) -> FloatArray:
    """fn on a read-only copy of the payload; its result must be finite."""
    copy = np.array(payload, dtype=np.float64)
    copy.setflags(write=False)
    result = np.asarray(fn(copy), dtype=np.float64)
    if not np.isfinite(result).all():
        raise InvalidArgument(f"{what}: fn returned non-finite values {result!r}")
    return result
