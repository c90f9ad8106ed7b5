"""AboveThreshold with footprint accounting: the sparse-vector test of PeGaSus's grouper and AdaPub.

Dwork & Roth 2014, Algorithm 1 (AboveThreshold), as used by PeGaSus (Chen et al. 2017, §4.2):
an *instance* draws a noisy threshold offset ρ ~ Lap(2Δ/ε) when it opens, then answers queries
q_k + ν_k >= θ_k + ρ with ν_k ~ Lap(4Δ/ε) until the first positive answer, which closes it. One
instance is ε-DP when every query changes by at most Δ.

Footprint accounting (accounting rules §3): an instance's queries may read the true values of
every timestamp since it opened (PeGaSus: the deviation of the open group). A change at k of
those timestamps moves a query by up to kΔ, so the instance costs kε by group privacy; charging
ε at each timestamp of its footprint, once, pays exactly that. Footprints only grow by the current
timestamp, so a query at t charges ε at t and nothing else. Instances are kept per run and per
cell (e.g. per histogram bin); in the one-bin-per-person model the charge at t is the maximum
over cells, which is ε.
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Callable
from fractions import Fraction
from typing import cast, final

import attrs
import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck import rounding
from budgetcheck.kernels import compiled
from budgetcheck.ledger.access import LedgerAccess
from budgetcheck.ledger.core import LaplaceReleases
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.isolation import (
    DEFAULT_DEADLINE,
    FORK,
    check_answer_fits,
    check_deadline,
    check_default,
    check_isolation,
)
from budgetcheck.ledger.noise import DISCRETE, discrete_laplace, granularity, laplace_draws
from budgetcheck.ledger.queries import Identity, LinearQuery, Relation, check_query
from budgetcheck.ledger.ranked import RankedRows
from budgetcheck.ledger.recent import RecentRows
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.validation import check_label, check_positive_int, check_query_epsilon, check_sensitivity
from budgetcheck.stream.secret import Secret, charged, is_placeholder, neighbours_of, stacked_rows

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


@attrs.frozen(eq=False)
class ThresholdAnswer:
    """One query's outcome per (run, *cells): ``above`` (tested and positive: the instance closed
    at t) and ``opened`` (an instance opened at t and was not tested: t starts a new footprint)."""

    above: BoolArray
    opened: BoolArray


def deviation(values: FloatArray) -> FloatArray:
    """PeGaSus's group deviation Σ_i |c_i − mean| along axis 1, NaN entries ignored (sensitivity < 2)."""
    inside = ~np.isnan(values)
    filled = np.where(inside, values, 0.0)
    mean = filled.sum(axis=1, keepdims=True) / np.maximum(inside.sum(axis=1, keepdims=True), 1)
    spread = np.abs(np.subtract(filled, mean, out=filled), out=filled)
    return np.asarray(np.where(inside, spread, 0.0).sum(axis=1), dtype=np.float64)


def _thresholds_of(thresholds: object, shape: tuple[int, ...]) -> FloatArray:
    """θ as finite doubles broadcast to ``shape`` and flattened, refused (before the charge) when they are not
    numbers (a string is not parsed) or do not broadcast to the runs and cells."""
    try:
        raw = np.asarray(thresholds)
        if raw.dtype.kind not in "biufO" or (
            raw.dtype.kind == "O" and not all(isinstance(item, numbers.Real) for item in raw.flat)
        ):
            raise TypeError(raw.dtype)
        given = np.asarray(raw, dtype=np.float64)
        theta = given if given.shape == shape or given.ndim == 0 else np.broadcast_to(given, shape)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgument(
            f"thresholds={reprlib.repr(thresholds)} must be numbers that broadcast to (runs, *cells) = {shape}"
        ) from None
    if not np.isfinite(given).all():
        raise InvalidArgument(f"thresholds must be finite, got {given!r}")
    return theta.reshape(-1)


def _check_deviation_sensitivity(declared: float, secret: Secret, query: LinearQuery | None = None) -> None:
    """:func:`deviation` per cell moves by less than 2·|Δ_j| when cell j changes by Δ_j, so the cells'
    deviations move by less than 2·‖Δ‖₁ together: the test's sensitivity must be at least twice the
    identity's under the stream's relation (2 for one person in one bin), as a release's is. For
    cells that are a linear query's answers A·x (e.g. the nodes of a tree) the cells change by AΔ
    together: at least twice the query's L1 sensitivity (2h for a tree of h levels, one bin)."""
    relation = cast(Relation, neighbours_of(secret))
    d = int(secret.shape[0]) if secret.shape else 1
    base = Identity().sensitivity(relation, 2) if query is None else query.sensitivity(relation, d)
    if declared < 2 * base:
        raise InvalidArgument(
            f"sensitivity={declared!r} is below {2 * base!r}, the L1 sensitivity of deviation over "
            f"the cells under the stream's relation {neighbours_of(secret)}: a mechanism may ask for "
            "more noise, never less"
        )


@final
class ThresholdTest:
    """AboveThreshold instances per run and cell on one :class:`~budgetcheck.ledger.wevent.WindowLedger` (see the
    module docstring).

    Made by ``ledger.above_threshold``. ``max_footprint`` caps an instance's footprint: an instance
    that would read more timestamps is closed (a public decision) and a new one opens at t.
    """

    __slots__ = (
        "_amounts",
        "_cells",
        "_epsilon",
        "_grid",
        "_groups",
        "_last_t",
        "_access",
        "_ledger",
        "_max",
        "_offset_scale",
        "_offsets",
        "_purpose",
        "_query_scale",
        "_reads",
        "_recent",
        "_restarted",
        "_sensitivity",
        "_starts",
    )

    def __init__(
        self,
        ledger: LaplaceReleases,
        *,
        epsilon: float | FloatArray,
        sensitivity: float,
        cells: tuple[int, ...],
        max_footprint: int | None,
        purpose: str,
        query: LinearQuery | None = None,
    ) -> None:
        self._ledger = ledger
        self._access = LedgerAccess(ledger)  # charges, randomness and per-run reads: no private member
        if query is not None and (not isinstance(check_query(query), LinearQuery) or len(cells) != 1):
            raise InvalidArgument(
                f"query={query!r} must be a linear query with cells=(m,), its m answers (got cells={cells!r})"
            )
        self._reads = query
        self._epsilon = check_query_epsilon(epsilon, ledger.runs)
        self._sensitivity = check_sensitivity(sensitivity)
        if not isinstance(cells, tuple) or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cells):
            raise InvalidArgument(
                f"cells={cells!r} must be a tuple of positive ints (the shape of one timestamp's cells)"
            )
        self._cells = cells
        self._max = None if max_footprint is None else check_positive_int(max_footprint, "max_footprint")
        self._purpose = check_label(purpose)
        shape = (ledger.runs, *cells)
        self._starts: IntArray = np.zeros(shape, dtype=np.int64)  # 0: no open instance
        self._offsets: FloatArray = np.zeros(shape)
        self._recent = RecentRows()  # the true values of the open footprints
        self._restarted = False  # replayed queries since the last live one
        self._groups: RankedRows | None = None  # the same, sorted per run and cell, when the statistic is `deviation`
        self._last_t = 0
        # Every query charges ε (per run) with the same noise scales: computed once, read-only.
        self._amounts = np.array(np.broadcast_to(self._epsilon, (ledger.runs,)), dtype=np.float64)
        # The discrete test works on the grid γ·Z (see _answer_on_grid): its noise covers Δ + γ.
        self._grid: Fraction | None = (
            granularity(self._sensitivity, integral=False) if ledger.sampler == DISCRETE else None
        )
        covered = self._sensitivity if self._grid is None else float(Fraction(self._sensitivity) + self._grid)
        self._query_scale = rounding.scale_up(covered * 4.0, self._amounts)
        self._offset_scale: float | FloatArray = (
            float(rounding.scale_up(covered * 2.0, np.array([self._epsilon]))[0])
            if isinstance(self._epsilon, float)
            else rounding.scale_up(covered * 2.0, self._amounts).reshape((-1,) + (1,) * len(cells))
        )
        self._amounts.setflags(write=False)
        self._query_scale.setflags(write=False)

    @property
    def epsilon(self) -> float | FloatArray:
        """What every query charges: a float, or one per run (shape (runs,))."""
        return self._epsilon

    @property
    def starts(self) -> IntArray:
        """The first timestamp of each cell's open instance (0 where none is open); a copy."""
        return self._starts.copy()

    def query(
        self,
        secret: Secret,
        statistic: Callable[[FloatArray], ArrayLike],
        thresholds: ArrayLike,
        *,
        isolation: str = FORK,
        default: ArrayLike = 0.0,
        deadline: float = DEFAULT_DEADLINE,
    ) -> ThresholdAnswer:
        """Charge ε at the secret's t and test (one charged operation of the ledger; see :meth:`_query`)."""
        outcome = np.asarray(
            self._access.run(
                self._query, secret, statistic, thresholds, isolation=isolation, default=default, deadline=deadline
            )
        )
        self._starts = outcome[2].astype(np.int64)  # the instances that go with the answer
        return ThresholdAnswer(above=outcome[0] != 0.0, opened=outcome[1] != 0.0)

    def _query(
        self,
        secret: Secret,
        statistic: Callable[[FloatArray], ArrayLike],
        thresholds: ArrayLike,
        isolation: str = FORK,
        default: ArrayLike = 0.0,
        deadline: float = DEFAULT_DEADLINE,
    ) -> FloatArray:
        """Charge ε at the secret's t; open an instance where none is open; test the others.

        Returns (above, opened, starts) stacked as one float array: the output a ledger file
        stores, a restarted publisher replays (a replayed timestamp reads and draws nothing; the
        first live query after it opens every instance afresh, since the open instances' noisy
        thresholds and footprints are not in the file) and the verifier's tap sees.

        ``statistic`` gets the true values of the cells' footprints as shape (n, L, *cells) for a
        group of n runs (oldest first, NaN before each cell's instance opened and for cells not
        tested) and must return (n, *cells), each run and cell computed from its own column only,
        with sensitivity Δ per changed timestamp. It is called once per group of runs whose
        footprints have similar lengths (L is the group's longest, rounded up to 8, 16, 32, …).
        ``thresholds`` (public, broadcast to (runs, *cells)) are the θ_k of the tested cells.
        When ``statistic`` is :func:`deviation` on a test with ``max_footprint`` from its first
        query on, the footprints are kept sorted per run and cell instead (:class:`RankedRows`),
        the deviation comes from them (the same value to rounding, without re-reading the
        footprints), and every later query must be a deviation too.

        Any other ``statistic`` is the caller's code on true values: it runs as ``measure``'s fn does, as a
        predictable transaction (``isolation='fork'``: a sandboxed process forked per group of runs, held to
        ``deadline`` seconds; only finite values of the tested cells come back, and a failure gives ``default``,
        the statistic's declared value per cell, recorded in ``ledger.failures``), or here with
        ``isolation='trusted'``, for code you trust. Its sensitivity is the caller's word, so the
        ledger's owner must have allowed vouched sensitivities (``allow_vouched=True``; and
        ``trusted_code=True`` for ``isolation='trusted'``): otherwise the query is refused
        (:class:`~budgetcheck.ledger.errors.NotAllowed`) before anything is charged.
        """
        fallback = check_default(default, self._cells)
        seconds = check_deadline(deadline)
        if statistic is not deviation:  # the library's own statistic needs no process of its own
            isolation = check_isolation(isolation)
            # the caller's statistic is vouched for (and in this process if trusted): the owner's to allow
            self._access.require_owner("query with a statistic of its own", isolation=isolation, vouched=True)
            self._access.check_confined(isolation)
            if isolation == FORK:  # all runs in one bucket answer (runs, *cells): refused unless that fits
                check_answer_fits((self._ledger.runs, *self._cells), 1, name="cells")
        ledger = self._ledger
        if not isinstance(secret, Secret):
            raise InvalidArgument(f"secret must be a Secret from a guarded stream, got {type(secret).__name__}")
        if self._reads is None and tuple(secret.shape) != self._cells:
            raise InvalidArgument(f"secret of shape {secret.shape} does not match cells={self._cells}")
        if self._reads is not None:
            answers = self._reads.matrix(int(secret.shape[0])).shape[0] if len(secret.shape) == 1 else None
            if answers != self._cells[0]:
                raise InvalidArgument(
                    f"secret of shape {secret.shape}: query={self._reads!r} gives {answers} answers, "
                    f"cells={self._cells}"
                )
        if secret.t <= self._last_t:
            raise InvalidArgument(
                f"query at t={secret.t} after a query at t={self._last_t}: one query per timestamp, in order"
            )
        if self._groups is not None and statistic is not deviation:
            raise InvalidArgument(
                "this test keeps its footprints as sorted groups (its first query was deviation): query it with "
                "deviation"
            )
        shape = (ledger.runs, *self._cells)
        theta = _thresholds_of(thresholds, shape)
        t = secret.t
        vouched = statistic is not deviation
        if not vouched:
            _check_deviation_sensitivity(self._sensitivity, secret, self._reads)
        amounts, query_scale = self._amounts, self._query_scale
        record = SpendRecord(
            t=t,
            purpose=self._purpose,
            amounts=amounts,
            sensitivity=self._sensitivity,
            noise_scale=query_scale,
            sampler=ledger.sampler,
            vouched=vouched,
        )
        self._access.charge(secret, record)  # raises, changing nothing, before anything is read
        first, self._last_t = self._last_t == 0, t
        if first and statistic is deviation and self._max is not None:
            self._groups = RankedRows(self._max)  # sees every query from the first on
        if is_placeholder(secret):  # replayed from a ledger file, which holds the outcome (query() gets it)
            self._restarted = True
            return np.zeros((3, *shape))
        rng = self._access.rng
        opened = np.empty(shape, dtype=np.bool_)
        fresh, tested_cells = _open_instances(
            self._starts.reshape(-1), t, self._max or 0, self._restarted, opened.reshape(-1)
        )
        self._restarted = False  # the first live query after a replay opened every instance afresh
        with charged(secret) as read:
            values = read if self._reads is None else self._reads.apply(read)
            if self._groups is not None:  # the groups are the footprints
                self._groups.insert(self._access.per_run(secret, values), opened)
            else:
                self._recent.append(t, values)
            del read, values  # nothing of the data stays in this frame, which a raised error's traceback shows
        tested = ~opened
        if self._groups is None:
            self._recent.keep_from(int(self._starts[tested].min()) if tested_cells else t)
        outcome = np.empty((3, *shape))
        flat = outcome.reshape(3, -1)
        if tested_cells:
            if self._groups is not None:
                result = self._groups.deviation()  # the footprints' deviation, kept up to date
            else:
                result = self._statistic(secret, statistic, tested, t, isolation, fallback, seconds)
            if not np.isfinite(result).all() and not np.isfinite(result.reshape(shape)[tested]).all():
                raise InvalidArgument("statistic returned non-finite values for tested cells")
            if self._grid is None:
                _answer(
                    opened.reshape(-1),
                    np.ascontiguousarray(result).reshape(-1),
                    laplace_draws(rng, shape).reshape(-1),
                    query_scale,
                    theta,
                    self._offsets.reshape(-1),
                    flat[0],
                )
            else:
                _answer_on_grid(
                    opened.reshape(-1),
                    np.ascontiguousarray(result).reshape(-1),
                    query_scale,
                    theta,
                    self._offsets.reshape(-1),
                    flat[0],
                    self._grid,
                )
        else:
            flat[0] = 0.0
        if self._grid is not None:  # the offsets ρ on the grid, already scaled
            draws, scales = _grid_offsets(opened.reshape(-1), self._offset_scale, ledger.runs, self._grid), _NO_SCALES
        elif isinstance(self._offset_scale, float):
            draws, scales = laplace_draws(rng, fresh, self._offset_scale), _NO_SCALES
        else:  # one scale per run
            draws, scales = laplace_draws(rng, fresh), self._offset_scale.reshape(-1)
        _close_instances(
            opened.reshape(-1), t, draws, scales, self._starts.reshape(-1), self._offsets.reshape(-1), flat
        )
        return outcome

    def _statistic(
        self,
        secret: Secret,
        statistic: Callable[[FloatArray], ArrayLike],
        tested: BoolArray,
        t: int,
        isolation: str,
        default: FloatArray,
        deadline: float,
    ) -> FloatArray:
        """The statistic of every run's tested cells, (runs, *cells) (0 where not tested; ``default`` for the
        tested cells of a group of runs where it failed); the footprints it read leave with this frame.
        :func:`deviation` is the library's and runs here; any other statistic runs as ``measure``'s fn, under
        ``isolation``, held to ``deadline`` seconds per group."""
        result = np.zeros(tested.shape)
        lengths = np.where(tested, t - self._starts + 1, 0).reshape(self._ledger.runs, -1).max(axis=1)
        for rows, width in _buckets(lengths):
            masked = self._footprints(secret, tested, rows, width)
            if statistic is deviation:
                result[rows] = np.broadcast_to(deviation(masked), (len(rows), *self._cells))
                continue
            fallback = np.where(tested[rows], default, 0.0)
            outcome = self._access.call_measured(
                _on_tested(statistic, tested[rows]),
                [masked],
                isolation,
                tested[rows].shape,
                fallback,
                deadline,
                "query",
            )
            result[rows] = outcome[0]
        return result

    def _footprints(self, secret: Secret, tested: BoolArray, rows: IntArray, width: int) -> FloatArray:
        """The true values of the footprints of the tested cells of ``rows`` (runs whose longest
        footprint is at most ``width``): shape (len(rows), width, *cells), NaN outside; read-only.

        A stacked stream's payload (L, streams, *cells) is read per stream, (streams, L, *cells)."""
        stamps, values = self._recent.view()  # (L, *payload)
        stamps, values = stamps[-width:], values[-width:]
        extra = (1,) * len(self._cells)
        inside = (stamps.reshape((1, -1) + extra) >= self._starts[rows][:, None]) & tested[rows][:, None]
        footprints = np.moveaxis(values, 1, 0) if stacked_rows(secret) else values
        masked = np.where(inside, self._access.per_run(secret, footprints, rows), np.nan)
        masked.setflags(write=False)
        return np.asarray(masked, dtype=np.float64)


def _on_tested(statistic: Callable[[FloatArray], ArrayLike], tested: BoolArray) -> Callable[[FloatArray], FloatArray]:
    """``statistic`` kept to the tested cells (0 elsewhere, whatever it gives there: the footprints of cells
    not tested are all NaN), broadcast to their shape; run where the statistic runs (a forked child)."""

    def on_tested(footprints: FloatArray) -> FloatArray:
        return np.where(tested, np.asarray(statistic(footprints), dtype=np.float64), 0.0)

    return on_tested


def _buckets(lengths: IntArray) -> list[tuple[IntArray, int]]:
    """Runs grouped by footprint length (0: nothing tested) into widths 8, 16, 32, …: (rows, width).

    A statistic over a group reads len(rows) × width values instead of runs × the longest footprint
    (footprints are mostly short: PeGaSus averages 9 timestamps where the longest is near w)."""
    _, bits = np.frexp(np.maximum(lengths, 1) - 1)  # bits of L − 1: 2^bits is the least power of 2 >= L, exactly
    width = np.maximum(8, np.left_shift(1, bits.astype(np.int64)))
    width[lengths == 0] = 0
    return [(np.flatnonzero(width == value), int(min(value, lengths.max()))) for value in np.unique(width[width > 0])]


_NO_SCALES = np.empty(0)


@compiled
def _open_instances(
    starts: IntArray, t: int, max_footprint: int, restart_all: bool, opened: BoolArray
) -> tuple[int, int]:
    """opened[i]: cell i has no open instance, or (``restart_all``, after a replay) it has one, or
    its footprint would grow beyond ``max_footprint`` (0: no cap), so it opens anew at t.
    Returns how many cells open and how many are tested."""
    fresh = 0
    for i in range(starts.size):
        start = starts[i]
        capped = start > 0 and (restart_all or (max_footprint > 0 and t - start + 1 > max_footprint))
        opened[i] = start == 0 or capped
        fresh += opened[i]
    return fresh, starts.size - fresh


@compiled
def _answer(
    opened: BoolArray,
    result: FloatArray,
    noise: FloatArray,
    scale: FloatArray,
    theta: FloatArray,
    offsets: FloatArray,
    above: FloatArray,
) -> None:
    """above[i] (1.0 or 0.0): a tested cell's q + ν >= θ + ρ, ν = noise · the run's scale, in numpy's
    order of operations (``scale`` has one entry per run; ``theta`` one per cell or a single value)."""
    per_run = opened.size // scale.size
    for i in range(opened.size):
        above[i] = (not opened[i]) and result[i] + noise[i] * scale[i // per_run] >= theta[
            i if theta.size > 1 else 0
        ] + offsets[i]


def _answer_on_grid(
    opened: BoolArray,
    result: FloatArray,
    scale: FloatArray,
    theta: FloatArray,
    offsets: FloatArray,
    above: FloatArray,
    grid: Fraction,
) -> None:
    """:func:`_answer` with the exact discrete Laplace (Canonne, Kamath, Steinke 2020) on the grid γ·Z,
    noise from the OS CSPRNG: q and θ are rounded to the grid, ν_k has scale 4(Δ+γ)/ε, the offset ρ
    2(Δ+γ)/ε (drawn by :func:`_grid_offsets`), and q + ν >= θ + ρ is decided in exact integers.

    Rounded queries of neighbouring inputs differ by a multiple of γ of size at most Δ + γ, and the
    discrete Laplace of scale b changes by at most e^{k/b} under a shift by k on its grid, so the
    proof of AboveThreshold (Dwork & Roth 2014, Theorem 3.23; Lyu et al. 2017, Theorem 2) goes
    through with Δ + γ in place of Δ: each instance is ε-DP."""
    per_run = opened.size // scale.size
    for i in range(opened.size):
        if opened[i]:
            above[i] = 0.0
            continue
        query = round(Fraction(float(result[i])) / grid)
        threshold = round(Fraction(float(theta[i if theta.size > 1 else 0])) / grid)
        offset = Fraction(float(offsets[i])) / grid  # an integer: drawn on the grid
        noise = discrete_laplace(Fraction(float(scale[i // per_run])) / grid)
        above[i] = 1.0 if query + noise >= threshold + offset else 0.0


def _grid_offsets(opened: BoolArray, offset_scale: float | FloatArray, runs: int, grid: Fraction) -> FloatArray:
    """ρ for every cell that opens an instance, on the grid γ·Z (exact multiples of γ as floats)."""
    scales = np.broadcast_to(np.asarray(offset_scale, dtype=np.float64).reshape(-1), (runs,))
    per_run = opened.size // runs
    units = [discrete_laplace(Fraction(float(scales[i // per_run])) / grid) for i in np.flatnonzero(opened)]
    return np.array([float(k * grid) for k in units], dtype=np.float64)


@compiled
def _close_instances(
    opened: BoolArray,
    t: int,
    draws: FloatArray,
    scales: FloatArray,
    starts: IntArray,
    offsets: FloatArray,
    outcome: FloatArray,
) -> None:
    """Open the instances of the ``opened`` cells at t (their offsets ρ the next ``draws``, times the
    run's scale when ``scales`` has one per run), close those that answered above (outcome[0]), and
    write opened and the starts into outcome[1] and outcome[2]."""
    per_run = opened.size // scales.size if scales.size else 1
    k = 0
    for i in range(opened.size):
        if opened[i]:
            offsets[i] = draws[k] * scales[i // per_run] if scales.size else draws[k]
            k += 1
            starts[i] = t
        if outcome[0, i] != 0.0:
            starts[i] = 0
        outcome[1, i] = opened[i]
        outcome[2, i] = starts[i]
