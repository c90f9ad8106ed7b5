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
import math
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.ledger.errors import (
    BudgetExceeded,
    InvalidArgument,
    LedgerCorrupt,
    NotAllowed,
    TimestampOrder,
)
from budgetcheck.ledger.hooks import OperationHook
from budgetcheck.ledger.isolation import (
    DEFAULT_DEADLINE,
    FAILED,
    FORK,
    MOST_BYTES,
    MOST_DIMENSIONS,
    TRUSTED,
    Failure,
    check_answer_fits,
    check_confined,
    check_deadline,
    check_default,
    check_isolation,
    forked,
    held,
    in_process,
    isolating,
)
from budgetcheck.ledger.noise import DISCRETE, NUMPY, NoiseSource, make_noise
from budgetcheck.ledger.paths import check_output_path
from budgetcheck.ledger.queries import (
    Identity,
    LinearQuery,
    Query,
    Relation,
    check_query,
    derived_sensitivity,
    group_norms,
    linear_sensitivity,
    resolve,
    weighted_sensitivity,
)
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, dump_lines, frozen
from budgetcheck.ledger.sandbox import unavailable as sandbox_unavailable
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import (
    MAX_T,
    check_amounts,
    check_bin_amounts,
    check_label,
    check_positive_int,
    check_release_row,
    check_runs,
    check_sensitivity,
    check_timestamp,
)
from budgetcheck.stream.guarded import SecretSequence
from budgetcheck.stream.live import LiveStream
from budgetcheck.stream.neighbours import Kind, Neighbours, usable
from budgetcheck.stream.secret import (
    Secret,
    StreamClaim,
    charge_view,
    charged,
    charged_payload,
    claim,
    neighbours_of,
    stacked_rows,
    take,
)

if TYPE_CHECKING:
    from budgetcheck.durable.journal import Journal

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
_SCALES_KEPT = 8  # noise scales remembered per ledger (LedgerCore._scale)
# budget entries up to which they are: beyond a few thousand, hashing the key costs more than the
# division it saves (benchmarks/ledger_cost.py)
_SCALE_MEMO_SIZE = 1 << 12
# payload entries up to which one run's release is computed on Python floats (:meth:`LedgerCore._noisy_few`):
# numpy adds fewer than 8 terms one after another, so the dissimilarity's sum is the same double
_FEW = 7
# constants of one-run operations remembered per ledger (LaplaceReleases._steady_constants): a mechanism's
# recurring amounts; amounts that change at every step (BD's publication budget) are recomputed cheaply
_STEADY_KEPT = 64
_INT64_MOST = 2**63 - 1  # the largest weight of a weighted release: its weights are computed as int64
_IDENTITY = Identity()  # frozen, without fields: one value serves every release of the counts
# the ledgers' default: exact, from the OS CSPRNG; "numpy-laplace" is reproducible noise asked for by name
SAMPLER = DISCRETE


def generator(sampler: str, seed: int, session: Sequence[int] | None = None) -> np.random.Generator:
    """The generator of a ledger's other randomness (the Sampling Mechanism's draws, AboveThreshold's
    float noise). Under ``numpy-laplace`` (reproducible noise, asked for by name) it is seeded by
    ``seed`` (and a ledger file's session entropy, so no two sessions repeat their noise): anyone who knows
    them can recompute every draw. Under any other sampler it is seeded with 256 bits from the
    operating system's CSPRNG and ``seed`` is ignored: its draws cannot be recomputed (PCG64 is not
    itself a cryptographic generator; its outputs are never published unperturbed)."""
    if sampler == NUMPY:
        return np.random.default_rng(seed if session is None else [seed, *session])
    return np.random.default_rng(secrets.randbits(256))


_LEDGERS: weakref.WeakSet[LedgerCore] = weakref.WeakSet()  # every ledger of this process
# How long a fork waits, in all, for operations other threads have under way (then the child refuses those ledgers)
_FORK_WAIT = 30.0
_FORKING = threading.local()  # what _before_fork holds, for the hooks after the fork (the same thread runs them)


class _StateUnknown:
    """The lock of a ledger in a forked child when another thread of the parent was still inside one of its
    operations after _FORK_WAIT seconds: the child's copy may hold half of it, so every operation and read
    is refused (LedgerCorrupt) rather than run on it or left to wait for a thread the child does not have."""

    def __enter__(self) -> None:
        raise LedgerCorrupt(
            "this process was forked while another thread was inside an operation of this ledger, and it did not "
            f"finish within {_FORK_WAIT:g} s: this copy of the ledger may hold part of it, so it refuses every "
            "operation; fork when no thread charges, or open the ledger afresh in the child"
        )

    def __exit__(self, *exc: object) -> None:
        return None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return False


def _alive() -> list[LedgerCore]:
    """Every ledger of this process (a copy: another thread may make one meanwhile)."""
    while True:
        try:
            return list(_LEDGERS)
        except RuntimeError:  # the set changed size during the copy
            continue


def _before_fork() -> None:
    """Hold every ledger's lock across a fork (``os.register_at_fork``): an operation another thread has under
    way finishes first, so the child's copy of every ledger is whole and its lock is not held by a thread
    the child does not have (issue 42: 22 of 25 children hung). A fork for ``measure``'s isolation waits
    for nothing (its child runs only fn; a ledger still busy is refused there, never waited for)."""
    wait = 0.0 if isolating() else _FORK_WAIT
    deadline = time.monotonic() + wait
    held: list[Any] = []
    busy: list[LedgerCore] = []
    for ledger in _alive():
        lock = ledger._lock
        if lock.acquire(True, max(0.0, deadline - time.monotonic())):  # reentrant: this thread's own operation
            held.append(lock)
        else:
            busy.append(ledger)
    _FORKING.held, _FORKING.busy = held, busy


def _after_fork_in_parent() -> None:
    held: list[Any] = getattr(_FORKING, "held", [])
    _FORKING.held, _FORKING.busy = [], []
    for lock in held:
        lock.release()


def _after_fork_in_child() -> None:
    """The child: release what :func:`_before_fork` held (this thread holds it here too), refuse the ledgers
    still busy, and draw every ledger's randomness afresh (:meth:`LedgerCore._redraw_after_fork`)."""
    held: list[Any] = getattr(_FORKING, "held", [])
    busy: list[LedgerCore] = getattr(_FORKING, "busy", [])
    _FORKING.held, _FORKING.busy = [], []
    for lock in held:
        lock.release()
    for ledger in busy:
        ledger._lock = _StateUnknown()
    for ledger in _alive():
        ledger._redraw_after_fork()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound="LedgerCore")


def locked(method: F) -> F:
    """Make a read of the ledger's state (``remaining``, ``window_sum``) wait for an operation that
    another thread has under way, so that it sees the state before or after it, never between."""

    @functools.wraps(method)
    def wrapper(self: LedgerCore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._inflight is not None:
                self._settle()
            return method(self, *args, **kwargs)

    return cast(F, wrapper)


def journaled(method: F) -> F:
    """Make a method one charged operation of its ledger (:meth:`LedgerCore._run_operation`): it runs
    under the ledger's lock (threads sharing a ledger charge one at a time: a check and its commit
    are never interleaved with another thread's) and through the ledger's hooks, if any are
    installed — a durable ledger's transaction (lock, catch up, check, append, commit, and only then
    return the value; a refusal appends nothing) and the verifier's tap (see
    :mod:`budgetcheck.ledger.hooks`)."""

    @functools.wraps(method)
    def wrapper(self: LedgerCore, *args: Any, **kwargs: Any) -> Any:
        try:
            with self._lock:  # check, commit and draw as one step for every thread sharing the ledger
                if self._inflight is not None:
                    self._settle()
                if self._hook is not None:
                    return self._run_operation(functools.partial(method, self), args, kwargs)
                mark, charges = len(self._fresh_claims), self._charges  # see _unbind_fresh
                try:  # no hook: the operation itself, as _run_operation runs it
                    return method(self, *args, **kwargs)
                except BudgetExceeded as exc:
                    self._unbind_fresh(mark, charges)  # a refusal changes nothing: not even the binding of a stream
                    self._note_refusal(exc)
                    raise
                except InvalidArgument:
                    self._unbind_fresh(mark, charges)
                    raise
                finally:
                    del self._fresh_claims[mark:]
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
        "_allow_vouched",
        "_applying",
        "_charges",
        "_failures",
        "_fresh_claims",
        "_hook",
        "_in_process",
        "_inflight",
        "_keep",
        "_lock",
        "_noise",
        "_records",
        "_refused_worst",
        "_refusals",
        "_repeated",
        "_rng",
        "_runs",
        "_scale_memo",
        "_seed",
        "_sessioned",
        "_steady",
        "_t",
        "_unsandboxed",
        "_trusted_code",
        "_vouched",
        "__weakref__",  # see _redraw_after_fork
    )

    def __init__(
        self,
        *,
        runs: int,
        seed: int,
        sampler: str = DISCRETE,
        keep_records: bool = False,
        trusted_code: bool = False,
        allow_vouched: bool = False,
    ) -> None:
        for name, value in (("keep_records", keep_records), ("trusted_code", trusted_code)):
            if not isinstance(value, bool):
                raise InvalidArgument(f"{name}={value!r} must be True or False")
        if not isinstance(allow_vouched, bool):
            raise InvalidArgument(f"allow_vouched={allow_vouched!r} must be True or False")
        # the owner's choices, fixed here for the ledger's life (ledger.sealed: no later route changes them)
        self._trusted_code = trusted_code
        self._allow_vouched = allow_vouched
        self._keep = keep_records  # in memory, records are kept only when asked: a long stream's memory stays flat
        # see journaled: reentrant, as a hook or a test runs operations inside one; held across a fork (_before_fork)
        self._lock: Any = threading.RLock()
        self._runs = check_runs(runs)
        self._seed = check_positive_int(seed, "seed", minimum=0)
        self._rng = generator(sampler, self._seed)
        self._sessioned = False  # seeded with a store's session entropy too (see _reseed)
        self._noise: NoiseSource = make_noise(sampler, self._rng)
        self._t = 0
        self._records: list[SpendRecord] = []
        self._refusals = 0
        self._fresh_claims: list[list[object]] = []  # streams the operation under way bound (see _bind_claim)
        self._charges = 0  # spends committed so far: an operation that raised without one may unbind its streams
        self._refused_worst = 0.0  # the largest window sum / ε a refused spend would have made
        self._vouched = 0  # charges whose sensitivity the caller vouched for (measure, measure_footprint)
        self._in_process = 0  # calls of the caller's code on true values in this process (isolation='trusted')
        self._failures: list[Failure] = []  # calls of the caller's code that gave their default (for the owner)
        self._unsandboxed = (
            False  # the owner allows forked code where no sandbox can be installed (see allows_unsandboxed)
        )
        self._applying = False  # accounting for a stored record (see _apply_row): not a new spend
        # a commit under way, as (finish, *arguments): finish(*arguments) completes it, idempotently (see _settle)
        self._inflight: tuple[Any, ...] | None = None
        # the durable transaction and the verifier's tap, installed by their layers (ledger.hooks)
        self._hook: OperationHook | None = None
        self._scale_memo: dict[tuple[float, bool, tuple[int, ...], bytes], FloatArray] = {}  # see _scale
        self._repeated: dict[str, tuple[FloatArray, float, bool, FloatArray]] = {}  # see _recurring
        self._steady: dict[tuple[object, ...], tuple[float, float, int]] = {}  # see LaplaceReleases._steady_constants
        _LEDGERS.add(self)  # a forked child redraws its randomness (_redraw_after_fork)

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
        stored = self._hook.stored_records() if self._hook is not None else None
        if stored is not None:
            return stored
        if self._inflight is not None:
            with self._lock:
                self._settle()
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
        return cast("Journal | None", self._hook.store if self._hook is not None else None)

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
    def trusted_code(self) -> bool:
        """Whether the ledger's owner allowed the caller's code to read true values in this process
        (``isolation='trusted'``); fixed at construction (``WindowLedger(..., trusted_code=True)``)."""
        return bool(_TRUSTED_CODE(self))

    @property
    def allow_vouched(self) -> bool:
        """Whether the ledger's owner allowed charges at a sensitivity the caller vouches for (``measure``,
        ``measure_footprint``, a threshold test's own statistic); fixed at construction
        (``WindowLedger(..., allow_vouched=True)``)."""
        return bool(_ALLOW_VOUCHED(self))

    def _require_owner(self, what: str, *, isolation: str | None = None, vouched: bool = False) -> None:
        """Refuse, before anything is bound, charged or read, what the ledger's owner did not allow."""
        kind = type(self).__name__
        if isolation == TRUSTED and _TRUSTED_CODE(self) is not True:
            raise NotAllowed(
                f"{what} with isolation='trusted' runs the caller's code on true values in this process, which "
                f"this ledger's owner has not allowed: nothing was charged. Use isolation='fork' (the default), "
                f"or, as the ledger's owner, build it with {kind}(..., trusted_code=True) for code you trust"
            )
        if vouched and _ALLOW_VOUCHED(self) is not True:
            raise NotAllowed(
                f"{what} charges at a sensitivity the caller vouches for (the library does not derive it), which "
                f"this ledger's owner has not allowed: nothing was charged. Use an operation whose sensitivity the "
                f"library derives (laplace_query), or, as the ledger's owner, build it with "
                f"{kind}(..., allow_vouched=True)"
            )

    @property
    def in_process(self) -> int:
        """How many times the caller's code read true values in this process (``isolation='trusted'``:
        ``measure``, ``measure_footprint``, a threshold test's own statistic): what it kept there cannot be
        ruled out, so ``verify`` calls such a mechanism inconclusive rather than verified."""
        return self._in_process

    @property
    def failures(self) -> tuple[Failure, ...]:
        """Every call of the caller's code on true values (``measure``, ``measure_footprint``, a threshold test's
        own statistic) that failed and so gave its declared default answer, in order: for the ledger's owner.
        The mechanism's call itself never tells (see :mod:`budgetcheck.ledger.isolation`)."""
        return tuple(self._failures)

    @property
    def allows_unsandboxed(self) -> bool:
        """Whether the ledger's owner lets a forked fn run where the kernel sandbox cannot be installed
        (:func:`budgetcheck.ledger.sandbox.unavailable`); otherwise such a call is refused before any charge."""
        return self._unsandboxed

    def _check_confined(self, isolation: str) -> None:
        """Refuse, before any charge, a forked call this machine cannot sandbox (unless the owner allowed it)."""
        check_confined(isolation, self._unsandboxed)

    def _call_measured(
        self,
        fn: Callable[[FloatArray], ArrayLike],
        payloads: list[FloatArray],
        isolation: str,
        shape: tuple[int, ...],
        default: FloatArray,
        deadline: float,
        operation: str,
    ) -> list[FloatArray]:
        """:func:`call_measured`, counting the calls that run the caller's code here (:attr:`in_process`): fn's
        results, or ``default`` for each payload when fn failed (recorded in :attr:`failures`, not told);
        refused (the operation checked it before its charge) unless the ledger's owner allowed it."""
        if isolation == TRUSTED:
            self._require_owner("a measured function", isolation=isolation)
            self._in_process += 1
        with held(deadline if isolation == FORK else None):  # what follows fn's outcome is held too
            outcome = call_measured(fn, payloads, isolation, shape, deadline)
            if isinstance(outcome, str):
                self._failures.append(Failure(t=self._t, operation=operation, reason=outcome))
                outcome = [default] * len(payloads)
        return outcome

    @property
    def refusals(self) -> int:
        """How many spends this ledger refused (each left the ledger unchanged otherwise)."""
        return self._refusals

    def idempotent(self, operation_id: str) -> contextlib.AbstractContextManager[None]:
        """``with ledger.idempotent("request-42"): out = ledger.laplace(...)`` — the one charged operation in
        the block is stored under ``operation_id`` (durable ledgers). A client that retries after a timeout,
        not knowing whether the first attempt committed, sends the same id: if it is stored, nothing is
        charged again and the stored output is returned. The id is kept in the hash chain under a unique
        index; reusing it for another call (another method, timestamp, amount or purpose) is refused."""
        if self._hook is None:
            raise InvalidArgument(
                f"idempotent(operation_id={operation_id!r}) needs a ledger kept in a store (open_ledger)"
            )
        return self._hook.idempotent(operation_id)

    @locked
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
        self._steady.clear()  # a stream bound: its operations' constants are validated afresh

    def _bind_claim(self, owner: list[object]) -> None:
        """:meth:`bind` on the first charged read of a stream never bound (see :func:`stream.secret.claim`);
        undone if the operation is refused (a refusal changes nothing)."""
        if type(owner) is StreamClaim:
            owner.bind(self, integral=self._noise.name == DISCRETE, runs=self._runs, stacking=self._stacking)
            self._steady.clear()
        else:  # a secret made on its own (a stand-in, a secret outside any stream)
            take(owner, self)
        self._fresh_claims.append(owner)

    def _unbind_fresh(self, mark: int, charges: int) -> None:
        """Undo the bindings made since ``mark`` by an operation refused or given a bad argument
        (:meth:`_bind_claim`), if it committed no spend since the count ``charges`` (a spend binds its
        stream for good); those of an operation still under way around it (a reentrant call) stay."""
        if self._charges != charges:
            return
        for bound in self._fresh_claims[mark:]:
            if bound and bound[0] is self:
                bound.clear()

    @abc.abstractmethod
    def header(self) -> LedgerHeader:
        """What notion and parameters this ledger keeps (the first line of its export)."""

    def jsonl(self) -> Iterator[str]:
        """The header and every record as JSON lines (for ``budgetcheck audit``)."""
        return dump_lines(self.header(), self.records)

    def export(self, target: str | Path | IO[str]) -> None:
        """Write :meth:`jsonl` to a path or an open text file."""
        if isinstance(target, (str, Path)):
            with open(check_output_path(target, "target"), "w", encoding="utf-8") as handle:
                self.export(handle)
            return
        for line in self.jsonl():
            target.write(line + "\n")

    # -- internals shared by the subclasses -----------------------------------------------------
    def _check_t(self, t: object) -> int:
        if type(t) is int and self._t <= t <= MAX_T and t >= 1:  # the common case: no calls
            return t
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
        t = secret.t
        if not (type(t) is int and self._t <= t <= MAX_T and t >= 1):  # _check_t's common case, in this frame
            t = self._check_t(t)
        claim(secret, self)
        return t

    def _unrecorded(self, t: int, amounts: FloatArray, purpose: str) -> bool:
        """Charge ``amounts`` at t without building a record, when none would be kept (in memory, no
        hooks) and the notion can (:meth:`_charge_unrecorded`); False: the caller charges with a record.
        The same check, the same refusal and the same state as :meth:`_charge` with the record."""
        return not self._keep and self._hook is None and self._charge_unrecorded(t, amounts, purpose)

    def _charge_unrecorded(self, t: int, amounts: FloatArray, purpose: str) -> bool:
        """:meth:`_charge` without a record (a one-run w-event ledger), or False where the notion needs one."""
        return False

    _steady_notion = False  # whether the notion has :meth:`_spend_one_run` (and a sensitivity that is the declared one)

    def _spend_one_run(self, t: int, amount: float) -> bool:
        """:meth:`_charge_unrecorded` of one run's validated amount (> 0) at a checked t: True if committed;
        False if the caller must take the full operation (over budget: nothing changed; or not this case)."""
        return False

    def _settle(self) -> None:
        """Complete a commit that a signal handler interrupted (it raised between the first and the last change
        of the ledger's state): the operation is then applied in full, never half. Runs before every
        operation and read."""
        inflight = self._inflight
        if inflight is not None:
            inflight[0](*inflight[1:])

    def _guard(self) -> None:
        """Before a commit that cannot be completed afterwards (several windows, a series, exposures): if a
        signal handler interrupts it, the ledger refuses from then on (:meth:`_interrupted`) rather than run
        on a half-made state. :meth:`_unguard` after it. In memory only (a store reloads what it committed)."""
        if self._hook is None:
            self._inflight = (self._interrupted,)

    def _unguard(self) -> None:
        if self._hook is None:
            self._inflight = None

    def _interrupted(self) -> None:
        raise LedgerCorrupt(
            f"an operation of this {type(self).__name__} was interrupted (a signal handler raised) while it changed "
            "the ledger's state, and that kind of change cannot be completed afterwards: the ledger refuses every "
            "operation from now on; keep it in a ledger file (open_ledger) to reload it, or let handlers not raise "
            "during charges"
        )

    def _commit_once(self, t: int, record: SpendRecord | None, charges: int) -> None:
        """:meth:`_commit` of an in-memory ledger without hooks, idempotent (``charges``: the count after it)."""
        self._charges = charges
        if t > self._t:
            self._t = t
        if record is not None and self._keep and not (self._records and self._records[-1] is record):
            self._records.append(record)

    def _commit(self, t: int, record: SpendRecord) -> None:
        if not self._applying:  # a stored row another writer committed is not this operation's spend
            self._charges += 1
        self._t = max(self._t, t)
        if self._applying or (self._hook is not None and self._hook.take(record)):
            return
        if self._keep:
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
        if self._hook is not None and self._hook.replaying:
            return np.zeros(shape)  # replaced by the stored output (durable.transaction)
        extra = (1,) * (len(shape) - budgets.ndim)
        full = values if values.shape == shape else np.broadcast_to(values, shape)
        if budgets.item() > 0.0 if budgets.size == 1 else (budgets > 0.0).all():  # every run pays
            return self._noise.perturb(full, scale.reshape(scale.shape + extra), sensitivity, integral=integral)
        paid = (budgets > 0.0).reshape(budgets.shape + extra)
        out = self._noise.perturb(
            full, np.where(paid, scale.reshape(scale.shape + extra), 0.0), sensitivity, integral=integral
        )
        return np.asarray(np.where(paid, out, np.nan), dtype=np.float64)  # a select: cheaper than a masked copy

    def _noisy_few(
        self,
        values: list[float],
        shape: tuple[int, ...],
        amount: float,
        scale: float,
        sensitivity: float,
        *,
        integral: bool,
    ) -> FloatArray:
        """:meth:`_noisy` for one run and a few values, on Python floats (no array machinery per value): the
        same draws, the same doubles and the same shape; NaN if the run does not pay."""
        if self._hook is not None and self._hook.replaying:
            return np.zeros(shape)  # replaced by the stored output (durable.transaction)
        paid = amount > 0.0
        noisy = self._noise.perturb_values(values, scale if paid else 0.0, sensitivity, integral=integral)
        if not paid:
            noisy = [math.nan] * len(noisy)
        if len(shape) == 1:
            return np.array(noisy, dtype=np.float64)
        if len(shape) == 2:  # (1, d): the one run's row
            return np.array([noisy], dtype=np.float64)
        return np.array(noisy, dtype=np.float64).reshape(shape)

    def _one_run_few(self, secret: Secret, size: int) -> bool:
        """Whether a release of ``secret`` (``size`` values) takes :meth:`_noisy_few`: one run, a few values,
        not stacked."""
        return self._runs == 1 and size <= _FEW and not stacked_rows(secret)

    def close(self) -> None:
        """Close the ledger file, if this ledger has one (every committed spend is already on disk)."""
        if self._hook is not None:
            self._hook.close()

    def __enter__(self: C) -> C:
        """``with open_ledger(path, ledger) as ledger:`` closes the file at the end of the block."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what the hooks and operations outside the class use (see ledger.access) --------------
    def _run_operation(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one charged operation ``fn(*args, **kwargs)`` through the hooks, if any; a refusal's
        window sum / ε is remembered (:attr:`worst_refused_ratio`)."""
        with self._lock:
            if self._inflight is not None:
                self._settle()
            mark, charges = len(self._fresh_claims), self._charges
            try:
                return fn(*args, **kwargs) if self._hook is None else self._hook.run(fn, args, kwargs)
            except BudgetExceeded as exc:
                self._unbind_fresh(mark, charges)  # what this operation bound, nothing an operation before it bound
                self._note_refusal(exc)
                raise
            except InvalidArgument:
                self._unbind_fresh(mark, charges)
                raise
            finally:
                del self._fresh_claims[mark:]

    def _note_refusal(self, exc: BudgetExceeded) -> None:
        self._refused_worst = max(self._refused_worst, exc.window_sum / exc.epsilon)

    def _refresh(self) -> None:
        """Before a read (``remaining``, ``window_sum``): the hooks catch up with spends committed elsewhere."""
        if self._hook is not None:
            self._hook.refresh()

    def _kept_mark(self) -> tuple[int, int]:
        """Where the kept spends stand (in memory, in a hook), for :meth:`_rollback_kept`."""
        return len(self._records), self._hook.mark() if self._hook is not None else 0

    def _rollback_kept(self, mark: tuple[int, int]) -> None:
        """Forget the spends kept since ``mark`` (a series refused part way, all or nothing)."""
        del self._records[mark[0] :]
        if self._hook is not None:
            self._hook.rollback_to(mark[1])

    def _randomness(self) -> np.random.Generator:
        """The generator of the ledger's other randomness (:func:`generator`; redrawn in a forked child)."""
        return self._rng

    def _redraw_after_fork(self) -> None:
        """In a forked child: draw the generator (and the noise source built on it) afresh. Parent and child
        (a pre-forking server, a pool) would otherwise draw the same local-DP randomisations, Sampling
        Mechanism picks and, for a ledger file, Laplace noise, so one could predict or cancel the other's.
        Reproducible noise of an in-memory ledger (``numpy-laplace`` from ``seed``, asked for by name) stays
        as seeded; a ledger file's numpy noise is not reproducible (session entropy) and is redrawn too."""
        name = self._noise.name
        if name == NUMPY and not self._sessioned:
            return
        session = [secrets.randbits(32) for _ in range(4)] if name == NUMPY else None
        self._rng = generator(name, self._seed, session)
        self._noise = make_noise(name, self._rng)
        self._steady.clear()

    def _reseed(self, session: Sequence[int]) -> None:
        """Draw from a generator of its own for a store's session (a reopened file never reuses noise)."""
        self._rng = generator(self._noise.name, self._seed, session)
        self._sessioned = True
        self._noise = make_noise(self._noise.name, self._rng)
        self._steady.clear()  # scales are the noise source's: validated afresh

    def _rebuild(self, records: Iterable[SpendRecord]) -> None:
        """Forget all accounting and account for ``records`` (stored, already checked), in order."""
        self._steady.clear()
        self._reset()
        self._t = 0
        for record in records:
            self._apply_row(record)

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


class LaplaceReleases(LedgerCore):
    """The charged Laplace operations of ledgers whose spends are one amount per run.

    Subclasses supply ``_charge(t, amounts, record)`` (check the theorem, then commit, or raise and
    change nothing) and ``_sensitivity_at(t, declared)`` (the sensitivity the noise must use).
    """

    __slots__ = ()

    @journaled
    def spend(self, t: int, epsilon: ArrayLike, *, purpose: str) -> None:
        """Charge ``epsilon`` at timestamp t without reading any data (e.g. a reservation).

        ``epsilon`` is one amount for every run or one per run; a spend that would break the
        composition theorem raises :class:`~budgetcheck.BudgetExceeded` and changes nothing.

        Example:
            >>> from budgetcheck import WindowLedger
            >>> ledger = WindowLedger(epsilon=1.0, w=10)
            >>> ledger.spend(1, 0.25, purpose="reservation")
            >>> ledger.remaining(2)
            array([0.75])
        """
        t = self._check_t(t)
        amounts = check_amounts(epsilon, self._runs)
        purpose = check_label(purpose)
        if not self._unrecorded(t, amounts, purpose):
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
        if sensitivity is None and self._steady_notion and self._hook is None and not self._keep:
            steady = self._steady_laplace(secret, epsilon, purpose)
            if steady is not None:
                return steady
        amounts = check_amounts(epsilon, self._runs)
        scale, delta = self._reserve(secret, amounts, amounts, self._derive(secret, _IDENTITY, sensitivity), purpose)
        with charged(secret) as values:
            if self._one_run_few(secret, values.size):
                flat = values.reshape(-1).tolist()
                return self._noisy_few(
                    flat, (1, *values.shape), float(amounts[0]), float(scale[0]), delta, integral=True
                )
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
        groups, budgets = self._groups_of(secret, labels, epsilon, "laplace_groups")
        count = budgets.shape[1]
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

    @journaled
    def laplace_weighted(
        self,
        secret: Secret,
        query: Query,
        weights: ArrayLike,
        epsilon: ArrayLike,
        *,
        purpose: str = "publication",
    ) -> FloatArray:
        """Release every answer of a linear ``query`` with its own share of ε; charge ε per run.

        ``weights`` (integers >= 0, shape (m,) or (runs, m)) split run r's ε_r between the m answers:
        answer i gets Laplace noise of scale 1/b_ri with b_ri = ε_r·w_ri/σ_r, where σ_r is the L1
        sensitivity of diag(w_r)·A under the stream's relation, computed by the library
        (:func:`~budgetcheck.ledger.queries.weighted_sensitivity`). A neighbouring change Δ then
        costs Σ_i |a_i·Δ|·b_ri = ‖diag(w_r)AΔ‖₁·ε_r/σ_r <= ε_r. This is laplace_bins's max rule
        (A = I: the largest budget) for answers that overlap, e.g. the nodes of a tree, each holding
        its leaves (Chen et al. 2017, Algorithm 4 line 23: node budgets whose sum along a root-to-leaf
        path is the perturbation budget). The query needs integer coefficients. Returns (runs, m);
        NaN where the weight or ε is 0.
        """
        query = check_query(query)
        if not isinstance(query, LinearQuery):
            raise InvalidArgument(f"query={query!r} must be a linear query (a weighted release splits A's rows)")
        self._check_secret(secret)
        if len(secret.shape) != 1:
            raise InvalidArgument(f"a query reads a one-dimensional histogram, got a secret of shape {secret.shape}")
        d = int(secret.shape[0])
        answers = int(query.matrix(d).shape[0])
        raw = np.asarray(weights)
        if (
            raw.dtype.kind not in "iu"
            or raw.shape not in ((answers,), (self._runs, answers))
            or (raw.size and raw.min() < 0)
            or (raw.size and int(raw.max()) > _INT64_MOST)  # uint64 past int64 would wrap to negative when cast
        ):
            raise InvalidArgument(
                f"weights must be integers >= 0 and below 2^63 of shape ({answers},) or ({self._runs}, {answers}), got "
                f"{raw.dtype} {raw.shape}: {np.array2string(raw.reshape(-1)[:8])}"
            )
        split = np.broadcast_to(raw.astype(np.int64), (self._runs, answers))
        amounts = check_amounts(epsilon, self._runs)
        relation = cast(Relation, neighbours_of(secret))
        sigma = weighted_sensitivity(query, d, split, relation)
        sigma = np.where(sigma > 0.0, sigma, float(relation.bound))  # no data read: one person's noise
        shape = split.shape
        products = rounding.mul_down(np.broadcast_to(amounts[:, None], shape).copy(), split.astype(np.float64))
        budgets = rounding.div_down(products, np.broadcast_to(sigma[:, None], shape).copy()).reshape(shape)
        budgets = np.where((split > 0) & (amounts[:, None] > 0.0), budgets, 0.0)
        budgets.setflags(write=False)
        scale, delta = self._reserve(secret, amounts, budgets, 1.0, purpose, integral=True)
        with charged(secret) as values:
            released = query.apply(values)
            del values
        return self._noisy(self._per_run(secret, released), budgets, scale, delta, per_run=True)

    def _derive(self, secret: Secret, query: Query, declared: object) -> float:
        """The sensitivity of ``query`` on ``secret`` under its stream's relation, or a larger declared one."""
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a guarded stream, got {type(secret).__name__}")
        shape = secret.shape
        if len(shape) > 1:
            raise InvalidArgument(f"a query reads a one-dimensional histogram, got a secret of shape {shape}")
        d = int(shape[0]) if shape else 1
        if declared is None and type(query) is Identity:  # the counts themselves: remembered per (relation, d)
            return _identity_release_sensitivity(neighbours_of(secret), d)
        return derived_sensitivity(query, cast(Relation, neighbours_of(secret)), d, declared)

    # -- the steady one-run operation: a live publisher's recurring charge --------------------------
    # A one-run w-event ledger with no hook and no kept records, stepped one timestamp at a time, charges
    # the same few amounts again and again. Their constants (the purpose, the amount, the sensitivity the
    # stream's relation gives, the noise scale) are validated and computed once, by the same functions as
    # the full operation, and kept under a key of everything they depend on (the operation, the purpose,
    # the amount's exact double, the relation's fields, the secret's shape; the ledger is the owner, and
    # binding a stream, reseeding or rebuilding clears them). At every step the secret (type, timestamp,
    # the binding of its stream) and the per-step argument are still checked, and the window check is
    # the exact one; anything else (a refusal, a first use, an argument the full operation must name)
    # takes the full operation, which raises or releases as before. The same draws and doubles.

    def _steady_constants(
        self, operation: str, purpose: str, epsilon: float, relation: Neighbours, shape: tuple[int, ...]
    ) -> tuple[float, float, int] | None:
        """(noise scale, sensitivity, payload size) of a one-run ``operation`` with these arguments, validated
        and computed as the full operation does; None where the full operation must run (it raises, or a
        path other than one run of a few values applies)."""
        count = math.prod(shape)
        relation = cast(Neighbours, usable(relation))  # refused as the full operation refuses it
        if not (
            0.0 < epsilon < math.inf  # check_amounts' amounts, but 0: a positive double, so equal keys are equal bits
            and purpose.strip()  # check_label's
            and 0 < count <= _FEW  # an empty secret: the full operation checks it, then names the fault
            and (operation == "dissimilarity" or len(shape) == 1)
        ):
            return None
        if operation == "laplace":  # the identity's, as _derive gives it
            delta, integral = _identity_release_sensitivity(relation, int(shape[0])), True
        else:  # ‖Δ‖₁ over the size, as dissimilarity gives it
            delta, integral = self._mean_sensitivity(_identity_sensitivity(relation), count, np.full(1, epsilon)), False
        scale = self._noise.scale_value(delta, epsilon, integral=integral)
        if scale is None:
            return None
        if len(self._steady) >= _STEADY_KEPT:
            self._steady.clear()
        constants = (scale, delta, count)
        self._steady[operation, purpose, epsilon, relation.kind, relation.bound, shape] = constants
        return constants

    def _steady_laplace(self, secret: object, epsilon: object, purpose: object) -> FloatArray | None:
        """:meth:`laplace` of one run's few values with validated constants, or None: the full operation runs."""
        if type(secret) is not Secret or type(epsilon) is not float or type(purpose) is not str:
            return None
        t, owner, relation, shape, rows = charge_view(secret)
        if rows or type(relation) is not Neighbours:
            return None
        constants = self._steady.get(("laplace", purpose, epsilon, relation.kind, relation.bound, shape))
        if constants is None:
            constants = self._steady_constants("laplace", purpose, epsilon, relation, shape)
            if constants is None:
                return None
        if not (type(t) is int and self._t <= t <= MAX_T and t >= 1):
            return None
        if not owner or owner[0] is not self:
            claim(secret, self)  # binds the stream to this ledger, or raises: it is bound to another
        if not self._spend_one_run(t, epsilon):
            return None
        scale, delta, _ = constants
        noisy = self._noise.perturb_values(charged_payload(secret).tolist(), scale, delta, integral=True)
        return np.array([noisy], dtype=np.float64)

    def _steady_dissimilarity(
        self, secret: object, last_release: object, epsilon: object, purpose: object
    ) -> FloatArray | None:
        """:meth:`dissimilarity` of one run's few values with validated constants, or None: the full operation runs."""
        if type(secret) is not Secret or type(epsilon) is not float or type(purpose) is not str:
            return None
        t, owner, relation, shape, rows = charge_view(secret)
        if rows or type(relation) is not Neighbours:
            return None
        constants = self._steady.get(("dissimilarity", purpose, epsilon, relation.kind, relation.bound, shape))
        if constants is None:
            constants = self._steady_constants("dissimilarity", purpose, epsilon, relation, shape)
            if constants is None:
                return None
        few = _finite_row(last_release, (1, *shape))  # the per-step argument, checked at every step
        if few is None or not (type(t) is int and self._t <= t <= MAX_T and t >= 1):
            return None
        if not owner or owner[0] is not self:
            claim(secret, self)
        if not self._spend_one_run(t, epsilon):
            return None
        scale, delta, count = constants
        total = 0.0  # np.add.reduce adds so few terms in order: the same sum, on Python floats
        for previous, value in zip(few, charged_payload(secret).reshape(-1).tolist(), strict=True):
            total += abs(previous - value)
        return np.array(self._noise.perturb_values([total / count], scale, delta, integral=False), dtype=np.float64)

    def _mean_sensitivity(self, total: float, count: int, budgets: FloatArray) -> float:
        """``total``/``count`` (‖Δ‖₁ spread over a mean of ``count`` values) as the sensitivity the noise covers:
        rounded up, so that scale·ε >= k/d exactly, except that fl(k/d) stays where the numpy sampler's scales
        from it at ``budgets`` already cover k/d (those releases stay bit for bit)."""
        if self._noise.name != NUMPY:
            return _covering_mean(total, count, None)
        if budgets.size > _SCALE_MEMO_SIZE:
            return rounding.covering_quotient(total, count, budgets)
        return _covering_mean(total, count, np.ascontiguousarray(budgets, dtype=np.float64).tobytes())

    @journaled
    def dissimilarity(
        self, secret: Secret, last_release: ArrayLike, epsilon: ArrayLike, *, purpose: str = "dissimilarity"
    ) -> FloatArray:
        """Noisy mean absolute difference between the secret and each run's last release.

        Kellaris et al. 2014, Figure 2 lines 3-4: sensitivity 1/d (k/d, or 2/d for replace-one, under
        the stream's relation), Laplace scale (1/d)/ε. Returns
        shape (runs,); NaN for runs with ε = 0.
        """
        if self._steady_notion and self._hook is None and not self._keep:
            steady = self._steady_dissimilarity(secret, last_release, epsilon, purpose)
            if steady is not None:
                return steady
        t = self._check_secret(secret)
        amounts = check_amounts(epsilon, self._runs)
        shape = secret.shape
        expected = (self._runs, *shape)
        count = math.prod(shape)
        few = _finite_row(last_release, expected) if self._one_run_few(secret, count) else None
        if few is None:
            last = check_release_row(last_release, expected)
        # ‖Δ‖₁ <= k (or 2, replace-one): the mean absolute difference moves by at most ‖Δ‖₁/n
        delta_mean = self._mean_sensitivity(_identity_sensitivity(neighbours_of(secret)), count, amounts)
        scale, delta = self._reserve(secret, amounts, amounts, delta_mean, purpose, integral=False, t=t)
        with charged(secret) as values:
            if few is not None:  # np.add.reduce adds so few terms in order: the same sum, on Python floats
                total = 0.0
                for previous, value in zip(few, values.reshape(-1).tolist(), strict=True):
                    total += abs(previous - value)
                return self._noisy_few([total / count], (1,), float(amounts[0]), float(scale[0]), delta, integral=False)
            differences = np.abs(last - self._per_run(secret, values)).reshape(self._runs, -1)
            distance = np.add.reduce(differences, axis=1) / count  # what .mean(axis=1) computes, without its wrapper
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
        groups, budgets = self._groups_of(secret, labels, epsilon, "dissimilarity_groups")
        bins, count = groups.shape[1], budgets.shape[1]
        last = check_release_row(last_release, (self._runs, bins))
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
        shape: int | tuple[int, ...] = (),
        default: ArrayLike = 0.0,
        deadline: float = DEFAULT_DEADLINE,
    ) -> FloatArray:
        """Noisy fn(values): the caller *vouches* that fn has L1 sensitivity ``sensitivity``.

        For what :mod:`budgetcheck.ledger.queries` cannot express (prefer :meth:`laplace_query`,
        whose sensitivity the library derives). fn runs once, only if some run pays (ε > 0), on a
        read-only copy of the payload, as a predictable transaction (``isolation='fork'``): in a
        sandboxed process forked for this call, from which nothing but its answer leaves, and the call
        returns ``deadline`` seconds after the fork whatever fn did (see
        :mod:`budgetcheck.ledger.isolation`; ``isolation='trusted'`` runs it here, for code you
        trust). The result gets Laplace noise of scale sensitivity/ε per run; the record is marked
        ``vouched`` (only the statistical audit can check such a sensitivity).

        ``shape`` is the shape fn's result must have, declared before the data is read (default
        ``()``: one statistic; e.g. ``shape=secret.shape`` for a per-bin map): the release's shape is
        then public, never the data's. A result of any other shape, like any failure of fn (it raised,
        exited, overran ``deadline``, returned non-finite values), gives ``default`` (finite, broadcast
        to ``shape``; 0.0 unless declared) in its place, noised like any answer: the sensitivity vouched
        for must cover it. The failure is recorded in :attr:`failures`, for the ledger's owner.
        Returns shape (runs, *shape).

        Example:
            >>> import numpy as np
            >>> from budgetcheck import GuardedStream, WindowLedger
            >>> stream = GuardedStream(np.array([[3.0, 4.0], [5.0, 1.0]]))
            >>> ledger = WindowLedger(epsilon=1.0, w=2, keep_records=True, allow_vouched=True)  # the owner allows it
            >>> ledger.bind(stream)
            >>> ledger.measure(np.max, stream.secret(1), sensitivity=1.0, epsilon=0.5, deadline=0.1).shape
            (1,)
            >>> ledger.vouched  # releases whose sensitivity was the caller's word
            1
        """
        amounts = self._measurement_amounts(fn, epsilon, "measure")
        isolation = check_isolation(isolation)
        self._require_owner("measure", isolation=isolation, vouched=True)
        declared = check_result_shape(shape)
        fallback, seconds = check_default(default, declared), check_deadline(deadline)
        self._check_confined(isolation)
        if isolation == FORK and isinstance(secret, Secret):
            check_answer_fits(declared, max(1, stacked_rows(secret)))
        vouched = check_sensitivity(sensitivity)
        scale, delta = self._reserve(secret, amounts, amounts, vouched, purpose, integral=False, vouched=True)
        stacked = bool(stacked_rows(secret))
        with charged(secret) as values:
            outcome = self._call_measured(
                fn, list(values) if stacked else [values], isolation, declared, fallback, seconds, "measure"
            )
            del values  # nothing of the data stays in this frame, which a raised error's traceback shows
        # stacked: fn sees one stream's payload; each run gets its own stream's result
        result = self._per_run(secret, np.stack(outcome)) if stacked else outcome[0]
        return self._noisy(result, amounts, scale, delta, per_run=stacked, integral=False)

    # -- hooks and internals ------------------------------------------------------------------
    def _groups_of(
        self, secret: Secret, labels: ArrayLike, epsilon: ArrayLike, what: str
    ) -> tuple[IntArray, FloatArray]:
        """The checked group labels (runs, d) in [-1, G) and per-group budgets (runs, G) of a grouped
        operation on a one-dimensional histogram (its secret checked first)."""
        self._check_secret(secret)
        bins = int(secret.shape[-1]) if secret.shape else 1
        if len(secret.shape) > 1:
            raise InvalidArgument(f"{what} needs a one-dimensional histogram, got a secret of shape {secret.shape}")
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
                f"labels must lie in [-1, {count}) for epsilon with {count} groups, "
                f"got [{groups.min()}, {groups.max()}]"
            )
        return groups, budgets

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
            if rows:
                return np.repeat(values, self._runs // rows, axis=0)
            if self._runs > 1:
                return np.broadcast_to(values, (self._runs, *values.shape))
            view = values[None]  # one run: broadcast_to's read-only view with a leading axis, for less
            view.flags.writeable = False
            return view
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
            scale = frozen(self._noise.scale(sensitivity, budgets, integral=integral))  # records share its bytes
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
        amounts, scale = frozen(amounts), frozen(self._noise.scale(sensitivity, amounts, integral=integral))
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
        t: int | None = None,
    ) -> tuple[FloatArray, float]:
        """Charge ``amounts`` at the secret's timestamp for a Laplace release at ``budgets``.

        Returns the noise scales (sensitivity/budget rounded up, by the noise source's rule for
        ``integral`` values or not) and the sensitivity the noise covers. Raises before anything is read.
        ``t``: the secret's timestamp, when the caller has just checked the secret (:meth:`_check_secret`).
        """
        if vouched:
            self._require_owner("a measurement", vouched=True)
        t = self._check_secret(secret) if t is None else t
        purpose = check_label(purpose)
        sensitivity = self._sensitivity_at(t, sensitivity)
        if budgets is amounts and amounts.size > _SCALE_MEMO_SIZE:
            amounts, scale = self._recurring(purpose, amounts, sensitivity, integral)
        else:
            scale = self._scale(sensitivity, budgets, integral)
        if not vouched and not self._keep and self._hook is None and self._charge_unrecorded(t, amounts, purpose):
            return scale, sensitivity  # what _unrecorded decides, in this frame
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


# the owner's flags, read through the slots themselves (a class attribute put over them changes nothing)
_OWNER = seal(LedgerCore, "_trusted_code", "_allow_vouched", final_class=False)
_TRUSTED_CODE, _ALLOW_VOUCHED = _OWNER["_trusted_code"], _OWNER["_allow_vouched"]


def _same_bits(a: FloatArray, b: FloatArray) -> bool:
    """Equal shapes and doubles bit for bit (−0.0 is not 0.0): three probes, then every entry."""
    if a.shape != b.shape:
        return False
    x, y = a.reshape(-1).view(np.int64), b.reshape(-1).view(np.int64)
    middle = x.size // 2
    return bool(x[0] == y[0] and x[middle] == y[middle] and x[-1] == y[-1] and np.array_equal(x, y))


def check_result_shape(value: object, name: str = "shape") -> tuple[int, ...]:
    """The declared shape of a measured result: an int or a tuple of ints >= 0, at most MOST_DIMENSIONS axes
    and MOST_BYTES of float64 values (what a forked child may send back)."""
    dims = (value,) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if (
        not isinstance(dims, tuple)
        or len(dims) > MOST_DIMENSIONS
        or not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in dims)
    ):
        raise InvalidArgument(
            f"{name}={value!r} must be the shape of fn's result: a tuple of integers >= 0 (or one integer), "
            f"at most {MOST_DIMENSIONS} of them"
        )
    declared = tuple(int(n) for n in dims)
    if math.prod(declared) * 8 > MOST_BYTES:
        raise InvalidArgument(f"{name}={value!r} holds more than {MOST_BYTES // 8:,} values, the most fn may return")
    return declared


def call_measured(
    fn: Callable[[FloatArray], ArrayLike],
    payloads: list[FloatArray],
    isolation: str,
    shape: tuple[int, ...],
    deadline: float = DEFAULT_DEADLINE,
) -> list[FloatArray] | str:
    """fn on each payload (a sandboxed child forked per call and held to ``deadline``, or here if ``trusted``):
    its finite results, each of the declared ``shape``, or why it gave none, for the owner's record (the
    caller substitutes the declared default: the mechanism is never told)."""
    if isolation == FORK:
        outcome = forked(fn, payloads, shape, deadline, sandboxed=sandbox_unavailable() is None)
    else:
        results = [in_process(fn, payload) for payload in payloads]
        failed = [result for result in results if isinstance(result, str)]
        outcome = failed[0] if failed else [result for result in results if not isinstance(result, str)]
    if not isinstance(outcome, str) and any(result.shape != shape for result in outcome):
        return FAILED
    return outcome


class _ByFields(dict[tuple[Kind, int, int], float]):
    """A :class:`Neighbours`' (kind, bound) and d -> a sensitivity of the identity, computed on first use.

    A Neighbours holds its two fields and nothing else, so they key it exactly (a relation whose fields
    were changed is looked up afresh) without hashing the object; a hit costs no Python call."""

    def __init__(self, compute: Callable[[Relation, int], float]) -> None:
        super().__init__()
        self._compute = compute

    def __missing__(self, key: tuple[Kind, int, int]) -> float:
        if len(self) >= 256:
            self.clear()
        value = self[key] = self._compute(Neighbours(key[0], key[1]), key[2])
        return value


def _identity_sensitivity(relation: object) -> float:
    """The identity's L1 sensitivity under a stream's neighbouring relation, remembered per relation (a
    frozen, hashable value: one whose fields changed hashes differently and is computed afresh)."""
    if type(relation) is Neighbours:
        return _IDENTITY_SENSITIVITY[relation.kind, relation.bound, 2]
    try:
        return _remembered_identity_sensitivity(relation)
    except TypeError:  # not hashable: computed every time
        return Identity().sensitivity(cast(Relation, relation), 2)


@functools.lru_cache(maxsize=64)
def _remembered_identity_sensitivity(relation: object) -> float:
    return Identity().sensitivity(cast(Relation, relation), 2)


def _identity_release_sensitivity(relation: object, d: int) -> float:
    """:func:`derived_sensitivity` of the identity on d bins with nothing declared, remembered as
    :func:`_identity_sensitivity` is."""
    if type(relation) is Neighbours:
        return _IDENTITY_RELEASE[relation.kind, relation.bound, d]
    try:
        return _remembered_identity_release(relation, d)
    except TypeError:  # not hashable: computed every time
        return derived_sensitivity(Identity(), cast(Relation, relation), d, None)


@functools.lru_cache(maxsize=64)
def _remembered_identity_release(relation: object, d: int) -> float:
    return derived_sensitivity(Identity(), cast(Relation, relation), d, None)


_IDENTITY_SENSITIVITY = _ByFields(lambda relation, d: Identity().sensitivity(relation, d))
_IDENTITY_RELEASE = _ByFields(lambda relation, d: derived_sensitivity(Identity(), relation, d, None))


@functools.lru_cache(maxsize=256)
def _covering_mean(total: float, count: int, budgets: bytes | None) -> float:
    """:func:`rounding.covering_quotient`, remembered per (k, d, budgets): a mechanism's budgets recur."""
    return rounding.covering_quotient(total, count, None if budgets is None else np.frombuffer(budgets))


def _finite_row(values: object, shape: tuple[int, ...]) -> list[float] | None:
    """The entries of a float64 array of ``shape`` as Python floats, when every one is finite; else None
    (other types and shapes, or a non-finite entry: the array path converts, checks and names the fault)."""
    if type(values) is not np.ndarray or values.dtype != np.float64 or values.shape != shape:
        return None
    row: list[float] = values.reshape(-1).tolist()
    for value in row:
        if not -math.inf < value < math.inf:
            return None
    return row


def _frozen_max(budgets: FloatArray) -> FloatArray:
    """Each run's largest bin or group budget, read-only (the record keeps it without a copy)."""
    largest = np.asarray(budgets.max(axis=1), dtype=np.float64)
    largest.setflags(write=False)
    return largest
