"""A grid session of the w-event ledger: one compiled check-and-commit and one compiled draw per charged
operation (issue 45, item 1; the design in ``benchmarks/grid-fixed-cost.md``).

The benchmark's passes (``budgetcheck bench``: a fresh in-memory :class:`WindowLedger` of many runs, the
numpy sampler, no journal, no verifier's tap, no replay) pay ~170 Python calls and ~60 numpy calls per
timestep in the ledger's charged operations: validate, derive, claim, scale, record, pre-check, commit,
open, lay out, draw, scale, add. A session keeps the same accounting as flat arrays instead:

- the records as preallocated arrays (timestamp, purpose, sensitivity and a row of amounts per charged
  operation; a row repeated bit for bit by the next operation of the same purpose is shared, as the
  ledger's ``_recurring`` shares it), materialised as :class:`SpendRecord`\\ s only when the ledger is
  next read or used (their noise scales then derived again by ``rounding.scale_up``: the doubles the
  kernel stepped for the draw, kept only for each purpose's last row);
- each run's window sum bounded above by the double-double of :mod:`budgetcheck.ledger.windows` (the
  same error-free arithmetic, :func:`~budgetcheck.ledger.windows._add_above`): a spend is committed only
  when that bound proves every run's window [t − w + 1, t] within its ε, exactly;
- the noise drawn with the same generator calls as the ledger's (``rng.random(count)``: the same
  doubles), turned into Laplace draws, scaled and added in one compiled pass.

A spend the pre-check cannot prove within ε is checked exactly, as the ledger checks it (multi-limb sums of
the window's spends), and committed if it is within. Whatever else the session does not cover (a spend
over ε, an amount that is not finite and >= 0, a last release that is not finite, a secret of another stream
or timestamp order, a ledger used directly in between) hands the ledger its state (:meth:`GridSession.sync`:
the records and the exact windows, as if every operation had gone through it) and runs the ledger's own
operation: its exact multi-limb check decides, refuses with its message and changes nothing. A session
is thus never a way around the ledger: the checks are the ledger's, and every other route reaches the
ledger's state only after the session has handed it over (it stands as the ledger's in-flight commit,
which every operation and read completes first).

Only the benchmark's runner opens sessions (:func:`grid_sessions`); the verification stages run inside
:func:`no_grid_sessions`, so their ledgers keep the ledger's own path even for a mechanism that opens
:func:`grid_sessions` itself. A user's module is imported in a copy of the caller's context
(``load_mechanism``), so a ``grid_sessions()`` entered at import and left open ends with the import.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.kernels import compiled
from budgetcheck.ledger import windows as _windows
from budgetcheck.ledger.exact import ExactVector
from budgetcheck.ledger.noise import NUMPY
from budgetcheck.ledger.queries import Identity, Total
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.validation import MAX_T, check_label
from budgetcheck.ledger.windows import ExactWindows, _double_double_above
from budgetcheck.stream.guarded import GuardedStream
from budgetcheck.stream.secret import Secret, charge_view, charged_payload

if TYPE_CHECKING:
    from budgetcheck.ledger.wevent import WindowLedger

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Runs per pass up to which a session opens: the paper grid's stacked vary-ε batches (20 streams x 100 runs x
# 6 ε), where BD, BA, DSATw and FASTw measured faster through the session than through the ledger (CPU of a
# batch at 1,200, 6,000 and 12,000 runs: benchmarks/grid-fixed-cost.md). Larger passes are not measured.
MOST_RUNS: Final = 12_000
_MOST_VALUES: Final = 128  # values per timestamp: np.add.reduce sums a row of up to 128 without halving it
_ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("budgetcheck_grid_sessions", default=False)
# no_grid_sessions() blocks open in the process (verify's stages): while any is, no session opens in any
# thread (a thread a mechanism starts does not inherit a context variable); sessions only save time
_BARRING = [0]
_BARRING_LOCK = threading.Lock()

# the integer state of a session, one int64 array (the kernels update it in place):
_FIRST: Final = 0  # the oldest operation whose timestamp is still inside the window
_OPS: Final = 1  # operations recorded
_ROWS: Final = 2  # rows of amounts used
_T: Final = 3  # the latest timestamp charged
_LAST_ROW: Final = 4  # then, per purpose: the row of its last operation (−1: none yet)

# what a kernel returns instead of a row when the ledger's own operation must run
_INVALID: Final = -1  # an amount not finite and >= 0 (or −0.0): the ledger names it
_UNDECIDED: Final = -2  # the pre-check does not prove every window within ε: the exact check decides
_BAD_LAST: Final = -3  # a last release that is not finite: the ledger names it
_NEW_AMOUNTS: Final = -4  # budgets other than those the operation's sensitivity was derived for


@contextlib.contextmanager
def grid_sessions() -> Iterator[None]:
    """Within this block, a built-in mechanism's pass on a fresh in-memory w-event ledger of several runs
    (no journal, no tap, the numpy sampler) runs through a :class:`GridSession` (the benchmark runner's
    batches): the same charges, records and releases, bit for bit, as the ledger's operations."""
    token = _ENABLED.set(True)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # entered in another context (an import's): it ended with it
            _ENABLED.reset(token)


@contextlib.contextmanager
def no_grid_sessions() -> Iterator[None]:
    """While this block runs no session opens, in any thread, even inside a :func:`grid_sessions` block a
    mechanism opens itself: :func:`grid_session` gives None and every operation is the ledger's own
    (``verify_mechanism``'s stages; a benchmark in another thread meanwhile runs the ledger's path, the same
    releases).

    Example:
        >>> from budgetcheck.ledger.grid import grid_sessions, no_grid_sessions, sessions_enabled
        >>> with no_grid_sessions(), grid_sessions():
        ...     sessions_enabled()
        False
    """
    with _BARRING_LOCK:
        _BARRING[0] += 1
    try:
        yield
    finally:
        with _BARRING_LOCK:
            _BARRING[0] -= 1


def sessions_enabled() -> bool:
    """Whether :func:`grid_session` may open a session here: inside :func:`grid_sessions`, outside
    :func:`no_grid_sessions`."""
    return _ENABLED.get() and _BARRING[0] == 0


def grid_session(ledger: object, stream: object, purposes: tuple[str, ...]) -> GridSession | None:
    """A session over ``ledger`` for a pass over ``stream`` whose operations charge under ``purposes``, or
    None where the ledger's own operations must run: outside :func:`grid_sessions`, or a ledger that is not
    a fresh in-memory :class:`WindowLedger` of several runs with the numpy sampler, or a stream not bound to it."""
    from budgetcheck.ledger.wevent import WindowLedger

    if not sessions_enabled() or type(ledger) is not WindowLedger or not isinstance(stream, GuardedStream):
        return None
    return GridSession.open(ledger, stream, purposes)


@final
class GridSession:
    """The state of a :class:`WindowLedger` during one pass, as flat arrays (see the module docstring).

    ``dissimilarity`` and ``laplace`` are the ledger's operations of those names (the same checks, records,
    draws and doubles); what they cannot run here, the ledger runs after :meth:`sync`.
    """

    __slots__ = (
        "_bin_scales",
        "_bound",
        "_closed",
        "_count",
        "_dis_amounts",
        "_dis_sensitivity",
        "_last_sens",
        "_ledger",
        "_marker",
        "_pool",
        "_purposes",
        "_rec_purpose",
        "_rec_row",
        "_rec_sens",
        "_rec_t",
        "_release_sensitivity",
        "_relation",
        "_rows",
        "_runs",
        "_scales",
        "_scales_bits",
        "_scratch",
        "_shape",
        "_state",
        "_upper",
        "_w",
    )

    _bin_scales: dict[int, FloatArray]
    _bound: FloatArray
    _closed: bool
    _count: int
    _dis_amounts: FloatArray
    _dis_sensitivity: float
    _last_sens: FloatArray
    _ledger: WindowLedger
    _marker: tuple[Any, ...]
    _pool: FloatArray
    _purposes: tuple[str, ...]
    _rec_purpose: IntArray
    _rec_row: IntArray
    _rec_sens: FloatArray
    _rec_t: IntArray
    _release_sensitivity: float
    _relation: object
    _rows: int
    _runs: int
    _scales: FloatArray
    _scales_bits: IntArray
    _scratch: FloatArray
    _shape: tuple[int, ...]
    _state: IntArray
    _upper: FloatArray
    _w: int

    def __init__(self) -> None:
        raise TypeError("a GridSession is opened by grid_session(ledger, stream, purposes), inside grid_sessions()")

    @classmethod
    def open(cls, ledger: WindowLedger, stream: GuardedStream, purposes: tuple[str, ...]) -> GridSession | None:
        """The session, or None where the ledger is not in the state a session starts from."""
        windows = ledger._windows
        owner, relation, rows = _stream_view(stream)
        if (
            ledger._hook is not None  # a journal, a tap or a replay: the ledger's own path
            or ledger._noise.name != NUMPY
            or ledger._inflight is not None
            or ledger._applying
            or ledger._runs > MOST_RUNS
            or ledger._t != 0
            or ledger._charges != 0
            or ledger._exposures
            or ledger._intrusions is not None
            or ledger._intruder is not None
            or not isinstance(windows, ExactWindows)
            or not owner
            or owner[0] is not ledger
            or relation is None
            or stream.length < 1
            or len(stream.secret(1).shape) != 1
            or stream.secret(1).shape[0] > _MOST_VALUES
        ):
            return None
        _link_kernels()
        session: GridSession = object.__new__(cls)
        runs, length = ledger._runs, stream.length
        shape = tuple(stream.secret(1).shape)
        session._ledger = ledger
        session._runs = runs
        session._w = ledger._params.w
        session._shape = shape
        session._count = math.prod(shape)
        session._rows = rows or 1
        session._relation = relation
        session._purposes = tuple(check_label(purpose) for purpose in purposes)
        capacity = len(purposes) * length
        session._rec_t = np.zeros(capacity, dtype=np.int64)
        session._rec_purpose = np.zeros(capacity, dtype=np.int64)
        session._rec_row = np.zeros(capacity, dtype=np.int64)
        session._rec_sens = np.zeros(capacity, dtype=np.float64)
        # untouched pages cost no memory until a row is written; numpy maps 4 MiB and more in transparent huge
        # pages, which measured faster here than 4 KiB pages of an anonymous map (benchmarks/grid-fixed-cost.md)
        session._pool = np.empty((capacity, runs))
        # the noise scales of each purpose's last row only (a record's are derived again when records are read)
        session._scales = np.empty((len(purposes), runs))
        session._scales_bits = session._scales.view(np.int64)
        session._upper = np.zeros((2, runs))
        session._scratch = np.empty((2, runs))
        epsilon = ledger._epsilon
        session._bound = np.array(epsilon, dtype=np.float64).reshape(-1).copy()
        session._state = np.full(_LAST_ROW + len(purposes), -1, dtype=np.int64)
        session._state[:_LAST_ROW] = 0
        session._last_sens = np.full(len(purposes), math.nan)
        session._dis_amounts = np.full(runs, np.nan)
        session._dis_sensitivity = math.nan
        session._release_sensitivity = math.nan
        session._bin_scales = {}
        session._closed = False
        session._marker = (session.sync,)
        ledger._inflight = session._marker  # any other operation or read of the ledger takes the state first
        return session

    @property
    def closed(self) -> bool:
        """Whether the ledger holds the state again (every later operation is the ledger's own)."""
        return self._closed

    @property
    def operations(self) -> int:
        """Charged operations recorded by the session so far."""
        return int(self._state[_OPS])

    # -- the charged operations ---------------------------------------------------------------------------------
    def dissimilarity(
        self, secret: Secret, last_release: FloatArray, epsilon: ArrayLike, *, purpose: str = "dissimilarity"
    ) -> FloatArray:
        """:meth:`WindowLedger.dissimilarity`: the same charge, record, draws and doubles."""
        ledger = self._ledger
        with ledger._lock:
            p = self._purpose(purpose)
            t = self._timestamp(secret)
            amounts = _per_run(epsilon, self._runs)
            if (
                t is None
                or p < 0
                or amounts is None
                or type(last_release) is not np.ndarray
                or last_release.dtype != np.float64
                or last_release.shape != (self._runs, self._count)
            ):
                return self._delegate().dissimilarity(secret, last_release, epsilon, purpose=purpose)
            # the kernel checks the last release (finite) and that the budgets are those the sensitivity was
            # derived for, before anything is charged
            row = self._charge(t, amounts, p, self._dis_sensitivity, last_release, self._dis_amounts)
            if row == _NEW_AMOUNTS:  # the sensitivity the ledger derives for these budgets (valid: checked)
                total = _identity_sensitivity(self._relation)
                sensitivity = ledger._mean_sensitivity(total, self._count, amounts)
                if not 0.0 < sensitivity < math.inf:
                    return self._delegate().dissimilarity(secret, last_release, epsilon, purpose=purpose)
                self._dis_amounts, self._dis_sensitivity = amounts.copy(), sensitivity
                row = self._charge(t, amounts, p, sensitivity, last_release, self._dis_amounts)
            if row < 0:
                return self._delegate().dissimilarity(secret, last_release, epsilon, purpose=purpose)
            values = charged_payload(secret)  # the charge has passed; no caller code runs while it is read
            out = np.empty(self._runs)
            self._draw(
                _dissimilarity_into, self._runs, values, amounts, self._scales[p], out, last_release, self._count
            )
            return out

    def laplace(self, secret: Secret, epsilon: ArrayLike, *, purpose: str = "publication") -> FloatArray:
        """:meth:`WindowLedger.laplace` (the identity's sensitivity): the same charge, record, draws and doubles."""
        ledger = self._ledger
        with ledger._lock:
            p = self._purpose(purpose)
            t = self._timestamp(secret)
            amounts = _per_run(epsilon, self._runs)
            if t is None or p < 0 or amounts is None:
                return self._delegate().laplace(secret, epsilon, purpose=purpose)
            if self._release_sensitivity != self._release_sensitivity:  # NaN: not derived yet
                sensitivity = ledger._derive(secret, _IDENTITY, None)
                if not 0.0 < sensitivity < math.inf:
                    return self._delegate().laplace(secret, epsilon, purpose=purpose)
                self._release_sensitivity = sensitivity
            row = self._charge(t, amounts, p, self._release_sensitivity)
            if row < 0:
                return self._delegate().laplace(secret, epsilon, purpose=purpose)
            values = charged_payload(secret)
            out = np.empty((self._runs, self._count))
            self._draw(_laplace_into, self._runs * self._count, values, amounts, self._scales[p], out)
            return out.reshape((self._runs, *self._shape))

    def laplace_query(
        self, secret: Secret, query: object, epsilon: ArrayLike, *, purpose: str = "publication"
    ) -> FloatArray:
        """:meth:`WindowLedger.laplace_query` of a :class:`~budgetcheck.ledger.queries.Total` (DSAT_w's row
        count): the same charge, record, draws and doubles; any other query is the ledger's."""
        ledger = self._ledger
        with ledger._lock:
            p = self._purpose(purpose)
            t = self._timestamp(secret)
            amounts = _per_run(epsilon, self._runs)
            if t is None or p < 0 or type(query) is not Total or amounts is None:
                return self._delegate().laplace_query(secret, query, epsilon, purpose=purpose)  # type: ignore[arg-type]
            sensitivity = ledger._derive(secret, query, None)
            if not 0.0 < sensitivity < math.inf:
                return self._delegate().laplace_query(secret, query, epsilon, purpose=purpose)
            row = self._charge(t, amounts, p, sensitivity)
            if row < 0:
                return self._delegate().laplace_query(secret, query, epsilon, purpose=purpose)
            answers = np.ascontiguousarray(query.apply(charged_payload(secret)))  # the query's own sum
            out = np.empty((self._runs, 1))
            self._draw(_laplace_into, self._runs, answers, amounts, self._scales[p], out)
            return out

    def laplace_bins(self, secret: Secret, epsilon: ArrayLike, *, purpose: str = "publication") -> FloatArray:
        """:meth:`WindowLedger.laplace_bins` (a budget per run and bin, the maximum charged): the same charge,
        record (its scales per run and bin), draws and doubles."""
        ledger = self._ledger
        with ledger._lock:
            p = self._purpose(purpose)
            t = self._timestamp(secret)
            budgets = (
                np.ascontiguousarray(epsilon)
                if type(epsilon) is np.ndarray
                and epsilon.dtype == np.float64
                and epsilon.shape == (self._runs, self._count)
                else None
            )
            if t is None or p < 0 or budgets is None or not _amounts_valid(budgets.reshape(-1)):
                return self._delegate().laplace_bins(secret, epsilon, purpose=purpose)
            if self._release_sensitivity != self._release_sensitivity:  # NaN: not derived yet
                sensitivity = ledger._derive(secret, _IDENTITY, None)
                if not 0.0 < sensitivity < math.inf:
                    return self._delegate().laplace_bins(secret, epsilon, purpose=purpose)
                self._release_sensitivity = sensitivity
            amounts = np.asarray(budgets.max(axis=1), dtype=np.float64)  # what the ledger charges: the largest bin
            row = self._charge(t, amounts, p, self._release_sensitivity)
            if row < 0:
                return self._delegate().laplace_bins(secret, epsilon, purpose=purpose)
            scales = rounding.scale_up(self._release_sensitivity, budgets)  # the noise source's, per bin
            self._bin_scales[int(self._state[_OPS]) - 1] = scales
            values = charged_payload(secret)
            out = np.empty((self._runs, self._count))
            self._draw(_bins_into, self._runs * self._count, values, budgets, scales, out)
            return out

    # -- the steps --------------------------------------------------------------------------------------------
    def _purpose(self, purpose: object) -> int:
        try:
            return self._purposes.index(purpose)
        except ValueError:
            return -1

    def _timestamp(self, secret: object) -> int | None:
        """The secret's timestamp if the session may charge it (one of its stream's, in order), else None."""
        if self._closed or type(secret) is not Secret:
            return None
        t, owner, relation, shape, rows = charge_view(secret)
        if (
            not owner
            or owner[0] is not self._ledger
            or relation is not self._relation
            or shape != self._shape
            or (rows or 1) != self._rows
            or type(t) is not int
            or not (self._state[_T] <= t <= MAX_T and t >= 1)
            or self._ledger._inflight is not self._marker
        ):
            return None
        return t

    def _charge(
        self,
        t: int,
        amounts: FloatArray,
        purpose: int,
        sensitivity: float,
        last: FloatArray | None = None,
        expected: FloatArray | None = None,
    ) -> int:
        """Check every run's window and commit the operation's record, in one kernel; the row of its amounts
        and scales, or a negative code (nothing changed) where the ledger's own operation must run. A spend
        the pre-check cannot decide is checked exactly here (the ledger's multi-limb sums) and committed if
        every window stays within ε; a spend over ε is the ledger's to refuse. ``last``: a last release to
        check finite first; ``expected``: the budgets the sensitivity was derived for (_NEW_AMOUNTS if not)."""
        row = self._commit(t, amounts, purpose, sensitivity, None, last, expected)
        if row == _UNDECIDED:
            exact = self._exact_bound(t, amounts)
            if exact is not None:
                row = self._commit(t, amounts, purpose, sensitivity, exact, None, None)
        if row >= 0:
            self._ledger._t = t  # what ledger.t reads (the rest of the state waits for sync)
        return row

    def _commit(
        self,
        t: int,
        amounts: FloatArray,
        purpose: int,
        sensitivity: float,
        exact: FloatArray | None,
        last: FloatArray | None,
        expected: FloatArray | None,
    ) -> int:
        self._make_room()
        return int(
            _check_and_commit(
                t,
                self._w,
                amounts,
                purpose,
                sensitivity,
                self._state,
                self._rec_t,
                self._rec_purpose,
                self._rec_row,
                self._rec_sens,
                self._pool,
                self._scales,
                self._scales_bits,
                self._upper,
                self._scratch,
                self._bound,
                self._last_sens,
                self._upper if exact is None else exact,
                exact is not None,
                _NO_LAST if last is None else last,
                _NO_AMOUNTS if expected is None else expected,
                expected is not None,
            )
        )

    def _make_room(self) -> None:
        """Room for one more operation and one more row of amounts before the kernel runs (it writes record
        ``state[_OPS]`` and row ``state[_ROWS]`` without bounds checks): the arrays sized for ``len(purposes)``
        operations a timestamp are doubled when full (a mechanism may charge more often than that)."""
        ops, rows = int(self._state[_OPS]), int(self._state[_ROWS])
        if ops < self._rec_t.shape[0] and rows < self._pool.shape[0]:
            return
        capacity = 2 * max(self._rec_t.shape[0], self._pool.shape[0], 1)
        self._rec_t = _grown(self._rec_t, ops, capacity)
        self._rec_purpose = _grown(self._rec_purpose, ops, capacity)
        self._rec_row = _grown(self._rec_row, ops, capacity)
        self._rec_sens = _grown(self._rec_sens, ops, capacity)
        self._pool = _grown(self._pool, rows, capacity)

    def _exact_bound(self, t: int, amounts: FloatArray) -> FloatArray | None:
        """The exact check of a spend at t (:class:`ExactVector` sums of the window's spends, as the ledger's
        ``_charge`` makes them): the double-double just above the new window sums if every run stays within
        its ε, else None."""
        state = self._state
        total = ExactVector.from_floats(amounts)
        for i in range(int(state[_FIRST]), int(state[_OPS])):
            if self._rec_t[i] > t - self._w:
                total = total + ExactVector.from_floats(self._pool[self._rec_row[i]])
        if total.exceeds(self._ledger._eps_bound).any():
            return None
        return _double_double_above(total)

    def _draw(self, kernel: Any, count: int, values: FloatArray, *arguments: Any) -> None:
        """``count`` uniforms from the ledger's generator (``laplace_draws``' calls: the same doubles, zero
        uniforms skipped as numpy skips them), then the kernel's pass."""
        rng = self._ledger._rng  # the ledger's generator as it is now (never cached across operations)
        uniforms = rng.random(count)
        done = kernel(uniforms, 0, self._rows, values, *arguments)
        while done >= 0:  # uniforms[done] is zero (probability 2**-53 each): laplace_draws' refill
            rest = uniforms[done:]
            kept = rest[rest != 0.0]
            rest[: kept.size] = kept
            rest[kept.size :] = rng.random(rest.size - kept.size)
            done = kernel(uniforms, done, self._rows, values, *arguments)

    def _delegate(self) -> WindowLedger:
        """The ledger, holding the state again (:meth:`sync`), to run an operation the session does not."""
        if not self._closed and self._ledger._inflight is self._marker:
            self.sync()
        return self._ledger

    def sync(self) -> None:
        """Hand the ledger its state: every operation's record (in order), the exact windows (the last 2w
        timestamps' spends, summed exactly when first read), the latest timestamp and the charge count.
        The session is closed: later operations are the ledger's own. Idempotent."""
        ledger = self._ledger
        if self._closed:
            return
        state = self._state
        ops, t = int(state[_OPS]), int(state[_T])
        stamps, purposes, rows = self._rec_t[:ops].tolist(), self._rec_purpose[:ops].tolist(), self._rec_row[:ops]
        amounts = [self._pool[row] for row in rows.tolist()]
        if ledger._keep:
            sensitivities = self._rec_sens[:ops].tolist()
            derived: dict[tuple[int, float], FloatArray] = {}  # rounding.scale_up, as the kernel stepped them
            for i, row in enumerate(rows.tolist()):
                if (row, sensitivities[i]) not in derived:
                    derived[row, sensitivities[i]] = rounding.scale_up(sensitivities[i], amounts[i])
            scales = [derived[row, sensitivities[i]] for i, row in enumerate(rows.tolist())]
            ledger._records.extend(
                SpendRecord(
                    t=stamp,
                    purpose=self._purposes[p],
                    amounts=amounts[i],
                    sensitivity=sensitivities[i],
                    noise_scale=self._bin_scales.get(i, scales[i]),
                    sampler=NUMPY,
                )
                for i, (stamp, p) in enumerate(zip(stamps, purposes, strict=True))
            )
        kept: dict[int, list[FloatArray]] = {}
        for i in range(ops):
            if stamps[i] > t - 2 * self._w + 1:
                kept.setdefault(stamps[i], []).append(amounts[i])
        windows = ledger._windows
        assert isinstance(windows, ExactWindows)
        windows.load(t, sorted(kept.items()))
        ledger._charges += ops
        ledger._t = max(ledger._t, t)
        self._closed = True
        if ledger._inflight is self._marker:
            ledger._inflight = None


_bound_after: Any = None  # windows._bound_after's compiled kernel (see _link_kernels)


def _link_kernels() -> None:
    """Point this module's kernels at the window pre-check's own compiled ``_bound_after`` (a kernel calls only
    compiled kernels; those of another module are set up by their first call)."""
    global _bound_after
    if _bound_after is None:
        _windows._add_above(0.0, 0.0, 0.0)  # sets up windows' kernels: its namespace then holds the compiled ones
        _bound_after = _windows._bound_after


@compiled
def _check_and_commit(
    t: int,
    w: int,
    amounts: FloatArray,
    purpose: int,
    sensitivity: float,
    state: IntArray,
    rec_t: IntArray,
    rec_purpose: IntArray,
    rec_row: IntArray,
    rec_sens: FloatArray,
    pool: FloatArray,
    scales: FloatArray,
    scales_bits: IntArray,
    upper: FloatArray,
    scratch: FloatArray,
    bound: FloatArray,
    last_sens: FloatArray,
    exact_upper: FloatArray,
    decided: bool,
    last: FloatArray,
    expected: FloatArray,
    check_expected: bool,
) -> int:
    """One charged operation at t: validate the amounts, pre-check every run's window [t − w + 1, t] as
    ``windows._bound_after`` does (the double-double bound minus the spends that leave, plus the amounts,
    compared exactly with ε), and only if every run is within, commit: the record (a new row of amounts,
    and the purpose's row of ``scales`` as ``rounding.scale_up`` gives them, or the purpose's last row if
    these amounts equal it bit for bit at the same sensitivity), the bound, the window's oldest operation.
    Returns the row, or _INVALID / _UNDECIDED with nothing changed. ``decided``: the exact check has passed
    the spend, and ``exact_upper`` is the bound from its exact sums. Before anything: a ``last`` release
    (empty: none) must be finite (else _BAD_LAST), and with ``check_expected`` the amounts must equal
    ``expected`` (else _NEW_AMOUNTS, once they are known valid)."""
    runs = amounts.size
    finite = True
    for r in range(last.shape[0]):
        for j in range(last.shape[1]):
            x = last[r, j]
            finite &= (x > -math.inf) & (x < math.inf)  # no chained comparison: no branch, vectorised
    if not finite:
        return _BAD_LAST
    valid, same = True, True
    for r in range(runs):  # branch-free reductions: whole-array passes the compiler vectorises
        a = amounts[r]
        valid &= (a >= 0.0) & (a < math.inf) & ((a != 0.0) | (math.copysign(1.0, a) > 0.0))
    if not valid:
        return _INVALID
    if check_expected:
        for r in range(runs):
            same &= amounts[r] == expected[r]  # valid amounts (>= +0.0): equal doubles are equal bits
        if not same:
            return _NEW_AMOUNTS
    his, los = scratch[0], scratch[1]
    first, ops = state[_FIRST], state[_OPS]
    leaving = first
    while leaving < ops and rec_t[leaving] <= t - w:  # the spends that leave the window, one row each
        leaving += 1
    lows = np.empty((leaving - first, runs))
    for i in range(first, leaving):
        lows[i - first, :] = pool[rec_row[i]]
    within = _bound_after(upper, lows, amounts, bound, scratch)  # the window pre-check's own kernel
    if not within and not decided:
        return _UNDECIDED
    if decided:
        his[:] = exact_upper[0]
        los[:] = exact_upper[1]
    first = leaving
    # commit (nothing above changed the session's state)
    last = state[_LAST_ROW + purpose]
    same = bool(last >= 0 and last_sens[purpose] == sensitivity)
    if same:
        previous = pool[last]
        for r in range(runs):
            if amounts[r] != previous[r]:  # amounts are >= +0.0: equal doubles are equal bits
                same = False
                break
    if same:
        row = last
    else:
        row = state[_ROWS]
        pool[row, :] = amounts
        out, out_bits = scales[purpose], scales_bits[purpose]  # the purpose's row: its last row's scales
        for r in range(runs):  # rounding.scale_up: the quotient, then one double up by its bit pattern (not inf)
            out[r] = sensitivity / amounts[r]
        for r in range(runs):
            out_bits[r] += out[r] < math.inf
        state[_ROWS] = row + 1
        state[_LAST_ROW + purpose] = row
        last_sens[purpose] = sensitivity
    rec_t[ops] = t
    rec_purpose[ops] = purpose
    rec_row[ops] = row
    rec_sens[ops] = sensitivity
    upper[0, :] = his
    upper[1, :] = los
    state[_FIRST] = first
    state[_OPS] = ops + 1
    if t > state[_T]:
        state[_T] = t
    return int(row)


@compiled
def _laplace_transform(uniforms: FloatArray, start: int) -> int:
    """``noise._laplace_in_place`` at scale 1: numpy's ``random_laplace`` on each uniform from ``start`` on,
    in place; the index of the first zero uniform (numpy skips it), or −1 when there is none."""
    for i in range(start, uniforms.size):
        u = uniforms[i]
        if u == 0.0:
            return i
        magnitude = 1.0 * math.log(min(u + u, 2.0 - u - u))
        uniforms[i] = (0.0 - magnitude) if u >= 0.5 else (0.0 + magnitude)
    return -1


@compiled
def _draw_at(uniforms: FloatArray, i: int, start: int) -> float:
    """Uniform i as numpy's ``random_laplace`` at scale 1 turns it into a draw (in place from ``start`` on:
    before it, a call interrupted by a zero uniform has turned it already); NaN at a zero uniform."""
    u = float(uniforms[i])
    if i < start:
        return u
    if u == 0.0:
        return math.nan
    magnitude = 1.0 * math.log(min(u + u, 2.0 - u - u))
    draw = (0.0 - magnitude) if u >= 0.5 else (0.0 + magnitude)
    uniforms[i] = draw
    return draw


@compiled
def _laplace_into(
    uniforms: FloatArray,
    start: int,
    streams: int,
    values: FloatArray,
    amounts: FloatArray,
    scales: FloatArray,
    out: FloatArray,
) -> int:
    """The ledger's ``_noisy`` of a ``laplace``: out[r] = draw·scale[r] + the values of run r's stream (run r
    reads stream r // (runs / streams)), NaN where the run pays nothing; the draws are the uniforms turned
    into Laplace values (``noise._laplace_in_place``'s formula, from ``start`` on), in the same pass. −1
    when done, or the index of a zero uniform (numpy skips it: the caller refills from there and calls again)."""
    runs, count = out.shape[0], out.shape[1]
    per_stream = runs // streams
    flat = values.reshape(streams, count)
    for r in range(runs):
        row = flat[r // per_stream]
        paid = amounts[r] > 0.0
        scale = scales[r]
        for j in range(count):
            i = r * count + j
            draw = _draw_at(uniforms, i, start)
            if draw != draw:
                return int(i)
            out[r, j] = draw * scale + row[j] if paid else math.nan
    return -1


@compiled
def _bins_into(
    uniforms: FloatArray,
    start: int,
    streams: int,
    values: FloatArray,
    budgets: FloatArray,
    scales: FloatArray,
    out: FloatArray,
) -> int:
    """The ledger's ``_noisy`` of a ``laplace_bins``: :func:`_laplace_into` with a budget and a scale per run
    and bin (NaN where a bin's budget is 0)."""
    zero = _laplace_transform(uniforms, start)
    if zero >= 0:
        return zero
    runs, count = out.shape[0], out.shape[1]
    per_stream = runs // streams
    flat = values.reshape(streams, count)
    for r in range(runs):
        row = flat[r // per_stream]
        for j in range(count):
            out[r, j] = uniforms[r * count + j] * scales[r, j] + row[j] if budgets[r, j] > 0.0 else math.nan
    return -1


@compiled
def _dissimilarity_into(
    uniforms: FloatArray,
    start: int,
    streams: int,
    values: FloatArray,
    amounts: FloatArray,
    scales: FloatArray,
    out: FloatArray,
    last: FloatArray,
    count: int,
) -> int:
    """The ledger's ``dissimilarity`` after its charge: out[r] = draw·scale[r] + the mean absolute difference
    between run r's last release and its stream's values (``np.add.reduce`` of the differences, numpy's
    pairwise order, over ``count``), NaN where the run pays nothing. Returns as :func:`_laplace_into`."""
    runs = out.size
    per_stream = runs // streams
    flat = values.reshape(streams, count)
    differences = np.empty(count)
    for r in range(runs):
        row = flat[r // per_stream]
        if count == 1:  # np.add.reduce of one value: 0.0 + it, the value itself (abs: never −0.0)
            distance = abs(last[r, 0] - row[0]) / 1
        else:
            for j in range(count):
                differences[j] = abs(last[r, j] - row[j])
            distance = _add_reduce(differences) / count
        draw = _draw_at(uniforms, r, start)
        if draw != draw:
            return r
        out[r] = draw * scales[r] + distance if amounts[r] > 0.0 else math.nan
    return -1


@compiled
def _add_reduce(values: FloatArray) -> float:
    """``np.add.reduce`` of a contiguous row of at most 128 values: numpy's pairwise sum of the row."""
    return _pairwise(values, 0, values.size)


@compiled
def _pairwise(values: FloatArray, start: int, n: int) -> float:
    """numpy's ``pairwise_sum`` of values[start : start + n] for n <= 128 (loops_utils.h: a plain loop under 8
    values, eight accumulators up to 128; numpy halves longer rows, which sessions do not take)."""
    if n < 8:
        total = 0.0
        for i in range(start, start + n):
            total += values[i]
        return total
    if n <= 128:
        r0, r1, r2, r3 = values[start], values[start + 1], values[start + 2], values[start + 3]
        r4, r5, r6, r7 = values[start + 4], values[start + 5], values[start + 6], values[start + 7]
        i = 8
        while i < n - (n % 8):
            base = start + i
            r0 += values[base]
            r1 += values[base + 1]
            r2 += values[base + 2]
            r3 += values[base + 3]
            r4 += values[base + 4]
            r5 += values[base + 5]
            r6 += values[base + 6]
            r7 += values[base + 7]
            i += 8
        total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            total += values[start + i]
            i += 1
        return float(total)
    raise ValueError("a session's rows hold at most _MOST_VALUES values")  # numpy halves them: not here


@compiled
def _valid_amounts(amounts: FloatArray) -> bool:
    for a in amounts:
        if not (0.0 <= a < math.inf) or (a == 0.0 and math.copysign(1.0, a) < 0.0):
            return False
    return True


def _amounts_valid(amounts: FloatArray) -> bool:
    return bool(_valid_amounts(amounts if amounts.flags.c_contiguous else np.ascontiguousarray(amounts)))


def _grown(array: Any, used: int, capacity: int) -> Any:
    """A new array of ``capacity`` rows (the rest of its shape as ``array``'s) holding ``array``'s first ``used``."""
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[:used] = array[:used]
    return grown


def _per_run(epsilon: object, runs: int) -> Any:
    """Budgets as a float64 array of shape (runs,) (a double is one for every run), or None: the ledger
    checks and names whatever else was given."""
    if type(epsilon) is np.ndarray:
        return epsilon if epsilon.dtype == np.float64 and epsilon.shape == (runs,) else None
    if type(epsilon) is float or type(epsilon) is np.float64:
        return np.full(runs, float(epsilon))
    return None


def _stream_view(stream: GuardedStream) -> tuple[list[object], object, int]:
    """(the claim of the stream's secrets, its relation if a sensitivity can be derived from it, its stacked rows)."""
    from budgetcheck.stream.neighbours import usable

    if stream.length < 1:
        return [], None, 0
    _, owner, relation, _, rows = charge_view(stream.secret(1))
    try:
        usable(relation)
    except Exception:  # noqa: BLE001 - the ledger's own operation names it
        return owner, None, rows
    return owner, relation, rows


def _identity_sensitivity(relation: object) -> float:
    """‖Δ‖₁ of the identity under the stream's relation, as the ledger's ``dissimilarity`` derives it."""
    from budgetcheck.ledger.core import _identity_sensitivity as derive

    return float(derive(relation))


_IDENTITY: Final = Identity()
_NO_LAST: Final = np.zeros((0, 0))
_NO_AMOUNTS: Final = np.zeros(0)
