"""What every budgetcheck ledger shares: runs, seeded noise, the clock, records, export, secrets.

The notion-specific part (which composition theorem a spend must satisfy) lives in the subclasses:
:class:`WindowLedger` (w-event), :class:`PersonalizedLedger`, :class:`SwellfishLedger`. Every
charged release follows reserve -> draw -> commit: the subclass's ``_charge`` checks and commits
before any value is read, and raises (changing nothing) when the spend would break its theorem.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import hashlib
import json
import math
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.errors import (
    BudgetExceeded,
    InvalidArgument,
    LedgerCorrupt,
    MeasurementFailed,
    SecretAccess,
    TimestampOrder,
)
from budgetcheck.ledger.isolation import FORK, SECRET_ACCESS, check_isolation, forked, in_process
from budgetcheck.ledger.noise import DISCRETE, NUMPY, NoiseSource, make_noise
from budgetcheck.ledger.queries import (
    Identity,
    Query,
    Relation,
    check_query,
    derived_sensitivity,
    group_norms,
    linear_sensitivity,
    resolve,
)
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, dump_lines
from budgetcheck.ledger.validation import (
    check_amounts,
    check_bin_amounts,
    check_label,
    check_positive_int,
    check_sensitivity,
    check_timestamp,
)
from budgetcheck.stream.guarded import SecretSequence
from budgetcheck.stream.live import LiveStream
from budgetcheck.stream.secret import Secret, charged, claim, is_placeholder, neighbours_of, stacked_rows

if TYPE_CHECKING:
    from budgetcheck.durable.journal import Journal, JournalRow

FloatArray = NDArray[np.float64]
_SCALES_KEPT = 8  # noise scales remembered per ledger (LedgerCore._scale)
# budget entries up to which they are: beyond a few thousand, hashing the key costs more than the
# division it saves (12,000 entries: 33 us to key, 27 us to divide)
_SCALE_MEMO_SIZE = 1 << 12
SAMPLER = (
    DISCRETE  # the ledgers' default: exact, from the OS CSPRNG; "numpy-laplace" is reproducible noise asked for by name
)


def generator(sampler: str, seed: int, session: int | None = None) -> np.random.Generator:
    """The generator of a ledger's other randomness (the Sampling Mechanism's draws, AboveThreshold's
    float noise). Under ``numpy-laplace`` (reproducible noise, asked for by name) it is seeded by
    ``seed`` (and a ledger file's session, so no two sessions repeat their noise): anyone who knows
    them can recompute every draw. Under any other sampler it is seeded with 256 bits from the
    operating system's CSPRNG and ``seed`` is ignored: its draws cannot be recomputed (PCG64 is not
    itself a cryptographic generator; its outputs are never published unperturbed)."""
    if sampler == NUMPY:
        return np.random.default_rng(seed if session is None else [seed, session])
    return np.random.default_rng(secrets.randbits(256))


F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound="LedgerCore")


def journaled(method: F) -> F:
    """Make a charged operation one transaction of the ledger's journal, if it has one.

    Without a journal the method runs as is. With one (:func:`budgetcheck.open_ledger`): begin
    (BEGIN IMMEDIATE), apply the spends other writers committed, run the method (check, commit in
    memory, draw the noise), append its records and output, commit — and only then return the
    value. A refusal appends nothing. If the method fails after charging (its data was read), the
    charge is still recorded. If the journal fails, the in-memory state is rebuilt from the file.
    """

    @functools.wraps(method)
    def wrapper(self: LedgerCore, *args: Any, **kwargs: Any) -> Any:
        try:
            if self._journal is None and self._tap is None:
                return method(self, *args, **kwargs)
            return self._operation(functools.partial(method, self), *args, **kwargs)
        except BudgetExceeded as exc:
            self._refused_worst = max(self._refused_worst, exc.window_sum / exc.epsilon)
            raise
        except TypeError as exc:  # a call that does not fit the signature names the public class, not a base
            inner = f"{method.__qualname__}()"
            if str(exc).startswith(inner):
                raise TypeError(str(exc).replace(inner, f"{type(self).__name__}.{method.__name__}()", 1)) from None
            raise

    return cast(F, wrapper)


class LedgerCore(abc.ABC):
    """Runs, seeded noise generator, monotone clock, immutable records and their JSON-lines export."""

    _stacking = False  # whether it reads stacked streams (GuardedStream.stacked): the w-event ledger does

    __slots__ = (
        "_applying",
        "_depth",
        "_journal",
        "_keep",
        "_noise",
        "_pending",
        "_records",
        "_refused_worst",
        "_refusals",
        "_repeated",
        "_replay",
        "_rng",
        "_runs",
        "_scale_memo",
        "_operation_id",
        "_seed",
        "_t",
        "_tap",
        "_tapping",
        "_vouched",
    )

    def __init__(self, *, runs: int, seed: int, sampler: str = DISCRETE, keep_records: bool = False) -> None:
        if not isinstance(keep_records, bool):
            raise InvalidArgument(f"keep_records={keep_records!r} must be True or False")
        self._keep = keep_records  # in memory, records are kept only when asked: a long stream's memory stays flat
        self._runs = check_positive_int(runs, "runs")
        self._seed = check_positive_int(seed, "seed", minimum=0)
        self._rng = generator(sampler, self._seed)
        self._noise: NoiseSource = make_noise(sampler, self._rng)
        self._t = 0
        self._records: list[SpendRecord] = []
        self._refusals = 0
        self._refused_worst = 0.0  # the largest window sum / ε a refused spend would have made
        self._vouched = 0  # charges whose sensitivity the caller vouched for (measure, measure_footprint)
        self._journal: Journal | None = None
        self._operation_id: list[Any] | None = None  # [id, used] inside idempotent()
        self._depth = 0
        self._pending: list[SpendRecord] = []
        self._applying = False
        self._replay: Replay | None = None
        # The verifier's non-interference check sees (and may replace) every charged operation's output.
        self._tap: Callable[[Any], Any] | None = None
        self._tapping = False
        self._scale_memo: dict[tuple[float, bool, tuple[int, ...], bytes], FloatArray] = {}  # see _scale
        self._repeated: dict[str, tuple[FloatArray, float, bool, FloatArray]] = {}  # see _recurring

    @property
    def runs(self) -> int:
        return self._runs

    @property
    def t(self) -> int:
        """The latest timestamp charged so far (0 before the first spend)."""
        return self._t

    @property
    def records(self) -> tuple[SpendRecord, ...]:
        """Every accepted spend, in order (immutable records; read from the file if durable)."""
        if self._journal is not None:
            return tuple(row.record for row in self._journal.rows())
        if not self._keep:
            raise InvalidArgument(
                f"{type(self).__name__} keeps no records in memory (keep_records=False, the default, so that "
                "its memory stays flat over any number of timestamps): construct it with keep_records=True "
                "to read or export them, or keep it in a file (open_ledger)"
            )
        return tuple(self._records)

    @property
    def sampler(self) -> str:
        """The noise source of its Laplace releases: 'numpy-laplace' or 'discrete-laplace'."""
        return self._noise.name

    @property
    def journal(self) -> Journal | None:
        """The durable file behind this ledger (see :func:`budgetcheck.open_ledger`), if any."""
        return self._journal

    @property
    def worst_refused_ratio(self) -> float:
        """The largest window sum / ε that a refused spend would have made (0.0 if none was refused):
        what a mechanism attempted, for reports that must agree with a refusal."""
        return self._refused_worst

    @property
    def vouched(self) -> int:
        """How many charges paid for a sensitivity the caller vouched for (``measure``): if any, only the
        statistical audit can check the releases (verify: "needs the statistical audit", never "proved")."""
        return self._vouched

    @property
    def refusals(self) -> int:
        """How many spends this ledger refused (each left the ledger unchanged otherwise)."""
        return self._refusals

    @contextlib.contextmanager
    def idempotent(self, operation_id: str) -> Iterator[None]:
        """``with ledger.idempotent("request-42"): out = ledger.laplace(...)`` — the one charged operation in
        the block is stored under ``operation_id`` (durable ledgers). A client that retries after a timeout,
        not knowing whether the first attempt committed, sends the same id: if it is stored, nothing is
        charged again and the stored output is returned. The id is kept in the hash chain under a unique
        index; reusing it for another call (another method, timestamp, amount or purpose) is refused."""
        if self._journal is None:
            raise InvalidArgument(
                f"idempotent(operation_id={operation_id!r}) needs a ledger kept in a store (open_ledger)"
            )
        if not isinstance(operation_id, str) or not 0 < len(operation_id) <= 256 or "\x00" in operation_id:
            raise InvalidArgument(
                f"operation_id={operation_id!r} must be a string of 1 to 256 characters, without NUL "
                "(a PostgreSQL text field cannot hold it)"
            )
        if self._operation_id is not None:
            raise InvalidArgument(
                f"idempotent(operation_id={operation_id!r}) inside idempotent({self._operation_id[0]!r}): "
                "one id names one operation"
            )
        self._operation_id = [operation_id, False]
        try:
            yield
        finally:
            self._operation_id = None

    def bind(self, stream: object) -> None:
        """Make this ledger the only one that may read ``stream`` (``execute`` does this first).

        A mechanism that opened a second ledger to read the stream would keep its spends out of
        this ledger's record; after binding, that raises :class:`SecretAccess`.
        """
        if not isinstance(stream, (SecretSequence, LiveStream)):
            raise InvalidArgument(
                f"stream must be a GuardedStream, PersonalizedStream or LiveStream, got {type(stream).__name__}"
            )
        stream._bind(self, integral=self._noise.name == DISCRETE, runs=self._runs, stacking=self._stacking)

    @abc.abstractmethod
    def header(self) -> LedgerHeader:
        """What notion and parameters this ledger keeps (the first line of its export)."""

    def jsonl(self) -> Iterator[str]:
        """The header and every record as JSON lines (for ``budgetcheck audit``)."""
        return dump_lines(self.header(), self.records)

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
        t = check_timestamp(t, "t")
        if t < self._t:
            raise TimestampOrder(
                f"t={t} is before the ledger's latest timestamp {self._t}: timestamps never go backwards"
            )
        return t

    def _check_secret(self, secret: object) -> int:
        """The timestamp of a secret this ledger may read (type, order and stream binding checked)."""
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a guarded stream, got {type(secret).__name__}")
        t = self._check_t(secret.t)
        claim(secret, self)
        return t

    def _commit(self, t: int, record: SpendRecord) -> None:
        self._t = max(self._t, t)
        if self._applying:
            return
        if self._replay is not None:
            self._replay.match(record)
        elif self._journal is not None:
            self._pending.append(record)
        elif self._keep:
            self._records.append(record)

    def _noisy(
        self,
        values: FloatArray,
        budgets: FloatArray,
        scale: FloatArray,
        sensitivity: float,
        *,
        per_run: bool = False,
        integral: bool = True,
    ) -> FloatArray:
        """values + Laplace noise for every run (values already per run if ``per_run``); NaN where unpaid.

        ``budgets``/``scale`` have shape (runs,) or (runs, bins). Noise is drawn for every entry, so
        a run's noise does not depend on what the other runs paid.
        """
        shape = values.shape if per_run else (self._runs, *values.shape)
        if self._replay is not None:
            return np.zeros(shape)  # replaced by the stored output (see _replayed)
        extra = (1,) * (len(shape) - budgets.ndim)
        paid = (budgets > 0.0).reshape(budgets.shape + extra)
        full = values if values.shape == shape else np.broadcast_to(values, shape)
        if paid.all():
            return self._noise.perturb(full, scale.reshape(scale.shape + extra), sensitivity, integral=integral)
        out = self._noise.perturb(
            full, np.where(paid, scale.reshape(scale.shape + extra), 0.0), sensitivity, integral=integral
        )
        return np.asarray(np.where(paid, out, np.nan), dtype=np.float64)  # a select: cheaper than a masked copy

    def close(self) -> None:
        """Close the ledger file, if this ledger has one (every committed spend is already on disk)."""
        if self._journal is not None:
            self._journal.close()

    def __enter__(self: C) -> C:
        """``with open_ledger(path, ledger) as ledger:`` closes the file at the end of the block."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the journal (durable ledgers) -----------------------------------------------------------
    def _attach(self, journal: Journal, *, replay: list[JournalRow] | None = None) -> None:
        """Load the file's state (or queue it for replay) and keep every later spend in it."""
        if self._t or self._records or self._refusals:
            raise InvalidArgument(f"{self!r} has already been used: open a ledger file with a fresh ledger")
        journal.claim("sampler", self._noise.name)  # a file keeps the noise source it was opened with
        self._journal = journal
        self._rng = generator(self._noise.name, self._seed, journal.session)  # never the same noise twice
        self._noise = make_noise(self._noise.name, self._rng)
        if replay is None:
            self._load()
        else:
            self._replay = Replay(replay, released={t for t, _ in journal.releases()})

    def _load(self) -> None:
        """Rebuild the accounting from the file (its whole chain verified): the records that can still
        matter (see ``_lookback``)."""
        assert self._journal is not None
        self._reset()
        self._t = 0
        for row in self._journal.load(self._lookback()):
            self._apply_row(row.record)

    def _refresh(self) -> None:
        """Before a read (``remaining``, ``window_sum``) of a durable ledger, outside an operation or a
        replay: apply what other writers have committed, so the answer counts every commit made before
        the call (a charge still re-checks under the lock)."""
        if self._journal is None or self._depth or self._replay is not None:
            return
        caught = self._journal.peek()
        try:
            for row in caught:
                self._apply_row(row.record)
        except BaseException:
            self._load()  # memory may be ahead of the file: rebuild from what is on disk
            raise

    def _apply_row(self, record: SpendRecord) -> None:
        """Account for a record already checked and committed (by us earlier, or another writer)."""
        self._applying = True
        try:
            self._apply(record)
        except BudgetExceeded as exc:
            raise LedgerCorrupt(f"a stored record at t={record.t} breaks the composition theorem: {exc}") from exc
        finally:
            self._applying = False

    def _apply(self, record: SpendRecord) -> None:
        self._charge(record.t, record.amounts, record)

    @abc.abstractmethod
    def _charge(self, t: int, amounts: FloatArray, record: SpendRecord) -> None:
        """Check the notion's composition theorem for ``amounts`` at t, then commit; or raise, changing nothing."""

    @abc.abstractmethod
    def _reset(self) -> None:
        """Forget all accounting (before a rebuild from the file)."""

    def _lookback(self) -> int:
        """How far before the latest timestamp a stored record can still affect a check."""
        return 0

    def _operation(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one charged operation ``fn(*args, **kwargs)`` (see :func:`journaled`); its output
        passes the tap, if one is set, once (an operation called inside another is not tapped)."""
        try:
            if self._tap is None or self._tapping:
                return self._untapped(fn, *args, **kwargs)
            self._tapping = True
            try:
                result = self._untapped(fn, *args, **kwargs)
            finally:
                self._tapping = False
        except BudgetExceeded as exc:
            self._refused_worst = max(self._refused_worst, exc.window_sum / exc.epsilon)
            raise
        return self._tap(result)

    def _untapped(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._journal is None or self._depth:
            return fn(*args, **kwargs)
        if self._replay is not None:
            self._replay.charge_unreleased_before(_timestamp_of(args, kwargs), self._apply_row)
            if self._replay:
                return self._replayed(fn, args, kwargs)
            self._replay = None
        for arg in (*args, *kwargs.values()):
            for item in arg if isinstance(arg, (list, tuple)) else (arg,):
                if isinstance(item, Secret) and is_placeholder(item):
                    raise LedgerCorrupt(
                        f"{item!r} was replayed from the ledger file, but no stored operation is left to replay for it"
                    )
        return self._journaled(fn, args, kwargs)

    def _journaled(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result: Any = None
        error: BaseException | None = None
        operation = self._claim_operation_id(method, args, kwargs)

        def charge(journal: Journal) -> None:
            nonlocal result, error
            if operation is not None:
                stored = journal.find_operation(operation["operation"])  # read under the lock, after the catch-up
                if stored is not None:
                    journal.rollback()
                    if stored[0] != operation["call"]:
                        error = InvalidArgument(
                            f"operation_id={operation['operation']!r} is stored for another call (another "
                            f"method, timestamp, amount or purpose): {_name_of(method)}() was not charged"
                        )
                    else:  # a retry of a committed operation: charged once, the first attempt's output
                        result = stored[1]
                    return
            try:
                result = method(*args, **kwargs)  # a refusal raises here, before anything is read
            except BaseException as exc:  # recorded below if it had charged (the data was read)
                error = exc
            if self._pending:
                journal.append(self._pending, result if isinstance(result, np.ndarray) else None, operation=operation)
                journal.commit()
            else:  # refused (or nothing charged): nothing to write
                journal.rollback()

        self._depth = 1
        try:
            self._locked(charge)
        finally:
            self._pending = []
            self._depth = 0
        if error is not None:
            raise error
        return result

    def _claim_operation_id(
        self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, str] | None:
        """The id (and call fingerprint) of this operation if it runs inside :meth:`idempotent`, once per block."""
        if self._operation_id is None:
            return None
        operation_id, used = self._operation_id
        if used:
            raise InvalidArgument(
                f"operation_id={operation_id!r} already named an operation in this block: one id, one operation"
            )
        self._operation_id[1] = True
        return {"operation": operation_id, "call": _call_key(method, args, kwargs)}

    def _store_release(self, t: int, values: FloatArray) -> None:
        """Append to the ledger file that ``values`` was published for t (a publisher's release, in
        the file's hash chain; once per t), in a transaction of its own."""
        if self._journal is None:
            raise InvalidArgument("only a ledger kept in a file (open_ledger) stores its releases")

        def store(journal: Journal) -> None:
            journal.append_release(t, values)
            journal.commit()

        self._locked(store)

    def _locked(self, work: Callable[[Journal], None]) -> None:
        """One write transaction: take the lock, apply what other writers committed, then ``work``
        (which commits or rolls back). Everything ``work`` decides on is read under the lock, and a
        rollback returns the journal to exactly what the lock showed. If anything fails after the
        lock was taken, the in-memory state is rebuilt from what the file holds."""
        journal = self._journal
        assert journal is not None
        caught = journal.begin()  # raises with nothing changed (e.g. LedgerBusy)
        try:
            for row in caught:
                self._apply_row(row.record)
            work(journal)
        except BaseException:
            journal.rollback()
            self._pending = []
            self._load()  # memory may be ahead of (or behind) the file: rebuild from what is on disk
            raise

    def _replayed(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert self._replay is not None
        self._depth = 1
        try:
            self._replay.start()
            result = method(*args, **kwargs)
            stored = self._replay.finish()
        except BudgetExceeded as exc:
            raise LedgerCorrupt(f"replaying the ledger file: {exc}") from exc
        finally:
            self._depth = 0
        return result if stored is None else stored


class LaplaceReleases(LedgerCore):
    """The charged Laplace operations of ledgers whose spends are one amount per run.

    Subclasses supply ``_charge(t, amounts, record)`` (check the theorem, then commit, or raise and
    change nothing) and ``_sensitivity_at(t, declared)`` (the sensitivity the noise must use).
    """

    __slots__ = ()

    @journaled
    def spend(self, t: int, epsilon: ArrayLike, *, purpose: str) -> None:
        """Charge ``epsilon`` at timestamp t without reading any data (e.g. a reservation)."""
        t = self._check_t(t)
        amounts = check_amounts(epsilon, self._runs)
        purpose = check_label(purpose)
        self._charge(t, amounts, SpendRecord(t=t, purpose=purpose, amounts=amounts))

    @journaled
    def laplace(
        self, secret: Secret, epsilon: ArrayLike, *, sensitivity: float | None = None, purpose: str = "publication"
    ) -> FloatArray:
        """Release the secret plus Laplace noise of scale Δ/ε (rounded up), per run.

        Δ is the identity's L1 sensitivity under the stream's neighbouring relation (1 for the
        default, one person in one bin); ``sensitivity`` may ask for more noise, never less.
        Returns shape (runs, *secret.shape); rows of runs with ε = 0 are NaN (nothing released).
        """
        amounts = check_amounts(epsilon, self._runs)
        scale, delta = self._reserve(secret, amounts, amounts, self._derive(secret, Identity(), sensitivity), purpose)
        with charged(secret) as values:
            return self._noisy(self._per_run(secret, values), amounts, scale, delta, per_run=True)

    @journaled
    def laplace_bins(
        self, secret: Secret, epsilon: ArrayLike, *, sensitivity: float | None = None, purpose: str = "publication"
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
        derived = self._derive(secret, Identity(), sensitivity)
        scale, delta = self._reserve(secret, _frozen_max(budgets), budgets, derived, purpose)
        with charged(secret) as values:
            return self._noisy(self._per_run(secret, values), budgets, scale, delta, per_run=True)

    @journaled
    def laplace_groups(
        self,
        secret: Secret,
        labels: ArrayLike,
        epsilon: ArrayLike,
        *,
        sensitivity: float | None = None,
        purpose: str = "publication",
    ) -> FloatArray:
        """Noisy sums of groups of bins, each group with its own budget; charge the maximum over groups.

        ``labels`` (shape (runs, d), or (d,) for every run) puts bin j of run r in group
        labels[r, j] in [0, G), or in none (−1). ``epsilon`` has shape (runs, G) (or (G,)). A
        person sits in one bin, hence in one group, per timestamp: the groups are disjoint and
        the charge is max_g ε_{t,g} (accounting rules §2; RescueDP's and AdaPub's groups).
        Returns (runs, G): Σ_{j in g} values[j] + Lap(Δ/ε_g); NaN where ε_g = 0. Δ is the group sums'
        sensitivity under the stream's relation (:class:`~budgetcheck.ledger.queries.GroupSums`, the
        largest over runs); ``sensitivity`` may ask for more, never less.
        """
        self._check_secret(secret)
        bins = int(secret.shape[-1]) if secret.shape else 1
        if len(secret.shape) > 1:
            raise InvalidArgument(
                f"laplace_groups needs a one-dimensional histogram, got a secret of shape {secret.shape}"
            )
        raw = np.asarray(labels)
        if raw.dtype.kind not in "iu" or raw.shape not in ((bins,), (self._runs, bins)):
            raise InvalidArgument(
                f"labels must be integers of shape ({bins},) or ({self._runs}, {bins}), got {raw.dtype} {raw.shape}"
            )
        groups = np.broadcast_to(raw.astype(np.int64), (self._runs, bins))
        count = int(np.asarray(epsilon).shape[-1]) if np.ndim(epsilon) else 0
        budgets = check_bin_amounts(epsilon, self._runs, count)
        if groups.size and (groups.min() < -1 or groups.max() >= count):
            raise InvalidArgument(
                f"labels must lie in [-1, {count}) for epsilon with {count} groups, got [{groups.min()}, {groups.max()}]"
            )
        relation = cast(Relation, neighbours_of(secret))
        derived = resolve(linear_sensitivity(group_norms(groups), relation), relation, sensitivity, "the group sums")
        scale, delta = self._reserve(secret, _frozen_max(budgets), budgets, derived, purpose)
        with charged(secret) as values:
            sums = np.zeros((self._runs, count))
            member = groups >= 0
            runs = np.broadcast_to(np.arange(self._runs)[:, None], groups.shape)
            np.add.at(sums, (runs[member], groups[member]), self._per_run(secret, values)[member])
            return self._noisy(sums, budgets, scale, delta, per_run=True)

    @journaled
    def laplace_query(
        self,
        secret: Secret,
        query: Query,
        epsilon: ArrayLike,
        *,
        sensitivity: float | None = None,
        purpose: str = "publication",
    ) -> FloatArray:
        """Release ``query`` of the secret's histogram plus Laplace noise of scale Δ/ε (rounded up), per run.

        Δ is the query's L1 sensitivity, computed from the stream's neighbouring relation (see
        :mod:`budgetcheck.ledger.queries`); ``sensitivity`` may ask for more noise, never less.
        Returns shape (runs, m) for a query of m answers; NaN rows where ε = 0.
        """
        query = check_query(query)
        amounts = check_amounts(epsilon, self._runs)
        derived = self._derive(secret, query, sensitivity)
        scale, delta = self._reserve(secret, amounts, amounts, derived, purpose, integral=query.integral)
        with charged(secret) as values:
            answers = query.apply(values)
            del values
        return self._noisy(self._per_run(secret, answers), amounts, scale, delta, per_run=True, integral=query.integral)

    def _derive(self, secret: Secret, query: Query, declared: object) -> float:
        """The sensitivity of ``query`` on ``secret`` under its stream's relation, or a larger declared one."""
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a guarded stream, got {type(secret).__name__}")
        if len(secret.shape) > 1:
            raise InvalidArgument(f"a query reads a one-dimensional histogram, got a secret of shape {secret.shape}")
        d = int(secret.shape[0]) if secret.shape else 1
        return derived_sensitivity(query, cast(Relation, neighbours_of(secret)), d, declared)

    @journaled
    def dissimilarity(
        self, secret: Secret, last_release: ArrayLike, epsilon: ArrayLike, *, purpose: str = "dissimilarity"
    ) -> FloatArray:
        """Noisy mean absolute difference between the secret and each run's last release.

        Kellaris et al. 2014, Figure 2 lines 3-4: sensitivity 1/d (k/d, or 2/d for replace-one, under
        the stream's relation), Laplace scale (1/d)/ε. Returns
        shape (runs,); NaN for runs with ε = 0.
        """
        self._check_secret(secret)
        amounts = check_amounts(epsilon, self._runs)
        last = np.asarray(last_release, dtype=np.float64)
        expected = (self._runs, *secret.shape)
        if last.shape != expected or not np.isfinite(last).all():
            raise InvalidArgument(f"last_release must be finite with shape {expected}, got shape {last.shape}")
        # ‖Δ‖₁ <= k (or 2, replace-one): the mean absolute difference moves by at most ‖Δ‖₁/n
        identity = Identity().sensitivity(cast(Relation, neighbours_of(secret)), 2)
        delta_mean = identity / math.prod(secret.shape)
        scale, delta = self._reserve(secret, amounts, amounts, delta_mean, purpose, integral=False)
        with charged(secret) as values:
            differences = np.abs(last - self._per_run(secret, values)).reshape(self._runs, -1)
            # the mean as numpy's mean computes it (the same sum, divided by the count), bit for bit
            distance = np.add.reduce(differences, axis=1) / differences.shape[1]
            return self._noisy(distance, amounts, scale, delta, per_run=True, integral=False)

    @journaled
    def dissimilarity_groups(
        self,
        secret: Secret,
        last_release: ArrayLike,
        labels: ArrayLike,
        epsilon: ArrayLike,
        *,
        purpose: str = "dissimilarity",
    ) -> FloatArray:
        """Noisy mean absolute difference to each run's last release within each group of bins.

        Kellaris et al. 2014 §4.5 (column partitioning): one dissimilarity per group g of n_g bins,
        MAE_g + Lap(Δ/(n_g·ε_g)), drawn as (Σ_{j in g} |c_j − o_j| + Lap(Δ/ε_g)) / n_g. The vector
        of group sums of absolute differences moves by at most ‖c − c'‖₁ <= Δ (the identity's
        sensitivity under the stream's relation), so the charge is max_g ε_{t,g} (the groups are
        disjoint; accounting rules §2). ``labels`` (shape (d,) or (runs, d)) puts bin j in group
        labels[j] in [0, G) or none (−1); ``epsilon`` has shape (G,) or (runs, G). Every group a run
        pays for must hold a bin. Returns (runs, G); NaN where ε_g = 0.
        """
        self._check_secret(secret)
        bins = int(secret.shape[-1]) if secret.shape else 1
        if len(secret.shape) > 1:
            raise InvalidArgument(
                f"dissimilarity_groups needs a one-dimensional histogram, got a secret of shape {secret.shape}"
            )
        raw = np.asarray(labels)
        if raw.dtype.kind not in "iu" or raw.shape not in ((bins,), (self._runs, bins)):
            raise InvalidArgument(
                f"labels must be integers of shape ({bins},) or ({self._runs}, {bins}), got {raw.dtype} {raw.shape}"
            )
        groups = np.broadcast_to(raw.astype(np.int64), (self._runs, bins))
        count = int(np.asarray(epsilon).shape[-1]) if np.ndim(epsilon) else 0
        budgets = check_bin_amounts(epsilon, self._runs, count)
        if groups.size and (groups.min() < -1 or groups.max() >= count):
            raise InvalidArgument(
                f"labels must lie in [-1, {count}) for epsilon with {count} groups, got [{groups.min()}, {groups.max()}]"
            )
        last = np.asarray(last_release, dtype=np.float64)
        if last.shape != (self._runs, bins) or not np.isfinite(last).all():
            raise InvalidArgument(
                f"last_release must be finite with shape {(self._runs, bins)}, got shape {last.shape}"
            )
        member = groups >= 0
        runs = np.broadcast_to(np.arange(self._runs)[:, None], groups.shape)
        sizes = np.zeros((self._runs, count))
        np.add.at(sizes, (runs[member], groups[member]), 1.0)
        empty = (budgets > 0.0) & (sizes == 0)
        if empty.any():
            run, group = (int(i) for i in np.argwhere(empty)[0])
            raise InvalidArgument(f"epsilon pays for group {group} of run {run}, which holds no bin (labels)")
        delta = Identity().sensitivity(cast(Relation, neighbours_of(secret)), bins)
        scale, delta = self._reserve(secret, _frozen_max(budgets), budgets, delta, purpose, integral=False)
        with charged(secret) as values:
            sums = np.zeros((self._runs, count))
            np.add.at(sums, (runs[member], groups[member]), np.abs(last - self._per_run(secret, values))[member])
            noisy = self._noisy(sums, budgets, scale, delta, per_run=True, integral=False)
        return np.asarray(noisy / np.maximum(sizes, 1.0), dtype=np.float64)

    @journaled
    def measure(
        self,
        fn: Callable[[FloatArray], ArrayLike],
        secret: Secret,
        *,
        sensitivity: float,
        epsilon: ArrayLike,
        purpose: str = "measurement",
        isolation: str = FORK,
    ) -> FloatArray:
        """Noisy fn(values): the caller *vouches* that fn has L1 sensitivity ``sensitivity``.

        For what :mod:`budgetcheck.ledger.queries` cannot express (prefer :meth:`laplace_query`,
        whose sensitivity the library derives). fn runs once, only if some run pays (ε > 0), on a
        read-only copy of the payload, in a process forked for this call (``isolation='fork'``):
        nothing it stores survives, only its finite float result comes back (see
        :mod:`budgetcheck.ledger.isolation`; ``isolation='trusted'`` runs it here, for code you
        trust). The result gets Laplace noise of scale sensitivity/ε per run; the record is marked
        ``vouched`` (only the statistical audit can check such a sensitivity). Returns shape
        (runs, *fn_output.shape).
        """
        amounts = self._measurement_amounts(fn, epsilon, "measure")
        isolation = check_isolation(isolation)
        vouched = check_sensitivity(sensitivity)
        scale, delta = self._reserve(secret, amounts, amounts, vouched, purpose, integral=False, vouched=True)
        stacked = bool(stacked_rows(secret))
        with charged(secret) as values:
            outcome = call_measured(fn, list(values) if stacked else [values], isolation)
            del values  # nothing of the data stays in this frame, which a raised error's traceback shows
        if isinstance(outcome, str):
            raise measurement_failed("measure", outcome)
        # stacked: fn sees one stream's payload; each run gets its own stream's result
        result = self._per_run(secret, np.stack(outcome)) if stacked else outcome[0]
        return self._noisy(result, amounts, scale, delta, per_run=stacked, integral=False)

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

    def _sensitivity_at(self, t: int, declared: float) -> float:
        return declared

    def _per_run(self, secret: Secret, values: FloatArray, runs: NDArray[np.int64] | None = None) -> FloatArray:
        """What every run (or the runs indexed by ``runs``) reads of ``values`` (the payload, or
        anything with a leading axis of one row per stacked stream), shape (runs, ...): a stacked
        secret gives run r the row of its stream, r // (runs / streams)."""
        rows = stacked_rows(secret)
        if runs is None:
            return (
                np.repeat(values, self._runs // rows, axis=0)
                if rows
                else np.broadcast_to(values, (self._runs, *values.shape))
            )
        if rows:
            return np.asarray(values[runs // (self._runs // rows)], dtype=np.float64)
        return np.broadcast_to(values, (len(runs), *values.shape))

    def _scale(self, sensitivity: float, budgets: FloatArray, integral: bool) -> FloatArray:
        """The noise source's scales for ``budgets``, read-only; remembered for a few budget arrays of
        up to _SCALE_MEMO_SIZE entries (a mechanism's constant per-timestamp budgets: one division
        each, not one per timestamp; larger arrays would cost as much to key as to divide)."""
        key = (sensitivity, integral, budgets.shape, budgets.tobytes()) if budgets.size <= _SCALE_MEMO_SIZE else None
        scale = self._scale_memo.get(key) if key is not None else None
        if scale is None:
            scale = self._noise.scale(sensitivity, budgets, integral=integral)
            scale.setflags(write=False)  # shared with the records, not copied
            if key is not None:
                if len(self._scale_memo) >= _SCALES_KEPT:
                    self._scale_memo.clear()
                self._scale_memo[key] = scale
        return scale

    def _recurring(
        self, purpose: str, amounts: FloatArray, sensitivity: float, integral: bool
    ) -> tuple[FloatArray, FloatArray]:
        """Per-run budgets too large for the scale memo, with their noise scales: bit for bit the last
        ones of the same purpose (a mechanism's constant budgets, spent at every timestamp) give that
        array and its scales again, so the records share one copy instead of keeping one per
        timestamp (BD's stacked pass of 12,000 runs: 192 of its 384 MB of records) and no scale is
        recomputed. A comparison costs a few microseconds; budgets that change at every timestamp
        mostly differ at one of three probes first."""
        prior = self._repeated.get(purpose)
        if prior is not None and prior[1] == sensitivity and prior[2] == integral and _same_bits(prior[0], amounts):
            return prior[0], prior[3]
        scale = self._noise.scale(sensitivity, amounts, integral=integral)
        scale.setflags(write=False)
        if len(self._repeated) >= _SCALES_KEPT and purpose not in self._repeated:
            self._repeated.clear()
        self._repeated[purpose] = (amounts, sensitivity, integral, scale)
        return amounts, scale

    def _reserve(
        self,
        secret: Secret,
        amounts: FloatArray,
        budgets: FloatArray,
        sensitivity: float,
        purpose: str,
        *,
        integral: bool = True,
        vouched: bool = False,
    ) -> tuple[FloatArray, float]:
        """Charge ``amounts`` at the secret's timestamp for a Laplace release at ``budgets``.

        Returns the noise scales (sensitivity/budget rounded up, by the noise source's rule for
        ``integral`` values or not) and the sensitivity the noise covers. Raises before anything is read.
        """
        t = self._check_secret(secret)
        purpose = check_label(purpose)
        sensitivity = self._sensitivity_at(t, sensitivity)
        if budgets is amounts and amounts.size > _SCALE_MEMO_SIZE:
            amounts, scale = self._recurring(purpose, amounts, sensitivity, integral)
        else:
            scale = self._scale(sensitivity, budgets, integral)
        record = SpendRecord(
            t=t,
            purpose=purpose,
            amounts=amounts,
            sensitivity=sensitivity,
            noise_scale=scale,
            sampler=self._noise.name,
            vouched=vouched,
        )
        self._charge(t, amounts, record)
        self._vouched += vouched
        return scale, sensitivity


def _same_bits(a: FloatArray, b: FloatArray) -> bool:
    """Equal shapes and doubles bit for bit (−0.0 is not 0.0): three probes, then every entry."""
    if a.shape != b.shape:
        return False
    x, y = a.reshape(-1).view(np.int64), b.reshape(-1).view(np.int64)
    middle = x.size // 2
    return bool(x[0] == y[0] and x[middle] == y[middle] and x[-1] == y[-1] and np.array_equal(x, y))


def call_measured(
    fn: Callable[[FloatArray], ArrayLike], payloads: list[FloatArray], isolation: str
) -> list[FloatArray] | str:
    """fn on each payload (a forked child per call, or here if ``trusted``): its finite results of one shape,
    or why it failed — only the kind of failure, never its message, arguments, result or traceback (they
    may hold the data). The caller raises :func:`measurement_failed` once no local of its own holds the data."""
    if isolation == FORK:
        outcome = forked(fn, payloads)
    else:
        results = [in_process(fn, payload) for payload in payloads]
        failed = [result for result in results if isinstance(result, str)]
        outcome = failed[0] if failed else [result for result in results if not isinstance(result, str)]
    if not isinstance(outcome, str) and len({result.shape for result in outcome}) > 1:
        return "returned results of different shapes"
    return outcome


def measurement_failed(what: str, failure: str) -> MeasurementFailed | SecretAccess:
    """The error of a failed measured function: SecretAccess (where it read) or MeasurementFailed."""
    if failure.startswith(SECRET_ACCESS):
        return SecretAccess(f"{what}: fn {failure}")
    return MeasurementFailed(
        f"{what}: fn {failure}; its message, arguments and traceback are withheld (they may hold "
        "the data); the charge stands, since the data was read"
    )


class Replay:
    """The stored operations a restarted publisher replays: its mechanism must spend them again,
    in order and exactly; each call gets the stored output instead of fresh noise."""

    __slots__ = ("_next", "_rows", "_start", "_unreleased")

    def __init__(self, rows: list[JournalRow], *, released: set[int] | frozenset[int] = frozenset()) -> None:
        self._rows = rows
        self._next = 0
        self._start = 0
        self._unreleased = len(rows)  # rows from here on are of timestamps after the last release
        while self._unreleased and rows[self._unreleased - 1].record.t not in released:
            self._unreleased -= 1

    def charge_unreleased_before(self, t: int | None, apply: Callable[[SpendRecord], None]) -> None:
        """Before a live operation at t: stored operations of earlier timestamps that were charged but
        never released (the process died, or the operation failed after reading the data, and the
        restarted input goes on after that row) are charged as stored — never replayed, never
        forgotten — so a restart always continues, and every charge in the file still counts."""
        while (
            t is not None and self._unreleased <= self._next < len(self._rows) and self._rows[self._next].record.t < t
        ):
            apply(self._rows[self._next].record)
            self._next += 1

    def __bool__(self) -> bool:
        return self._next < len(self._rows)

    def start(self) -> None:
        self._start = self._next

    def match(self, record: SpendRecord) -> None:
        if self._next >= len(self._rows):
            raise LedgerCorrupt(
                f"replay: the mechanism spends at t={record.t} ({record.purpose!r}) more than the ledger file recorded"
            )
        row = self._rows[self._next]
        stored = row.record
        if (stored.t, stored.purpose) != (record.t, record.purpose) or not np.array_equal(
            stored.amounts, record.amounts
        ):
            raise LedgerCorrupt(
                f"replay diverged at record {row.seq}: the file has t={stored.t}, {stored.purpose!r}, amounts {stored.amounts.tolist()}; "
                f"the mechanism spends t={record.t}, {record.purpose!r}, amounts {record.amounts.tolist()} "
                "(was the file written by another mechanism or other parameters?)"
            )
        self._next += 1

    def finish(self) -> FloatArray | None:
        """The stored output of the operation just replayed (its records must be one whole stored operation)."""
        matched = self._rows[self._start : self._next]
        if not matched:
            return None
        op = matched[0].op
        whole = matched[0].seq == op and all(r.op == op for r in matched)
        if not whole or (self._next < len(self._rows) and self._rows[self._next].op == op):
            raise LedgerCorrupt(
                f"replay diverged at record {matched[0].seq}: operation boundaries differ from the file's"
            )
        return matched[-1].output


def _name_of(method: Callable[..., Any]) -> str:
    """A charged method's name (it arrives as a partial bound to the ledger)."""
    return str(getattr(method, "__name__", None) or getattr(getattr(method, "func", None), "__name__", "operation"))


def _call_key(method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A fingerprint of a charged call that never reads data: the method, and its arguments with each
    secret as its timestamp, arrays as lists and functions by name (SHA-256, hex)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Secret):
            return {"secret": value.t}
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        if callable(value):
            return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__name__)}"
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        return repr(value)

    text = json.dumps(
        [_name_of(method), plain(list(args)), {key: plain(value) for key, value in kwargs.items()}],
        sort_keys=True,
        separators=(",", ":"),
        default=repr,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _timestamp_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """The timestamp an operation is for: its secret's, or a spend's ``t`` (None if it names none)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, Secret):
            return value.t
    first = kwargs.get("t", args[0] if args else None)
    return first if isinstance(first, int) and not isinstance(first, bool) else None


def _frozen_max(budgets: FloatArray) -> FloatArray:
    """Each run's largest bin or group budget, read-only (the record keeps it without a copy)."""
    largest = np.asarray(budgets.max(axis=1), dtype=np.float64)
    largest.setflags(write=False)
    return largest
