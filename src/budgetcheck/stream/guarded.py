"""Guarded streams: hand a mechanism one opaque :class:`Secret` per timestamp.

:class:`GuardedStream` holds d-dimensional query results (w-event and Swellfish);
:class:`PersonalizedStream` holds per-user data, kept as counts per requirement class and bin
(the sufficient statistic of the Sampling Mechanism, Du et al. 2025 §4.1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.errors import InvalidArgument, SecretAccess
from budgetcheck.ledger.requirements import RequirementSet
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import check_positive_int, check_stream
from budgetcheck.stream.neighbours import DEFAULT, Neighbours, check_neighbours
from budgetcheck.stream.secret import COMPANION, Secret, StreamClaim, attach_users


class SecretSequence:
    """T secrets bound together: one ledger may read them (see ``ledger.bind``)."""

    __slots__ = ("__weakref__", "_claim", "_length", "_neighbours", "_rows", "_secrets")

    def __init__(
        self,
        payloads: NDArray[np.float64],
        *,
        rows: int = 0,
        neighbours: Neighbours = DEFAULT,
        requirements: RequirementSet | None = None,
    ) -> None:
        self._length = int(payloads.shape[0])
        integral = bool(np.array_equal(payloads, np.round(payloads)))
        # requirements: a PersonalizedStream's set (a PersonalizedLedger of another requirement set refuses it)
        self._claim = StreamClaim(self, integral=integral, rows=rows, requirements=requirements)
        self._rows = rows
        self._neighbours = check_neighbours(neighbours)
        self._secrets = tuple(
            Secret(t + 1, payloads[t], self._claim, rows=rows, neighbours=self._neighbours) for t in range(self._length)
        )

    @property
    def length(self) -> int:
        """T, the number of timestamps."""
        return self._length

    def __len__(self) -> int:
        return self._length

    @property
    def neighbours(self) -> Neighbours:
        """The neighbouring relation every sensitivity of this stream's releases is derived from."""
        return self._neighbours

    def __iter__(self) -> Iterator[Secret]:
        return iter(self._secrets)

    def secret(self, t: int) -> Secret:
        """The secret of timestamp t (1-based)."""
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= self._length:
            raise InvalidArgument(f"t={t!r} must be an integer timestamp in [1, {self._length}]")
        return self._secrets[t - 1]

    def _bind(self, ledger: object, *, integral: bool = False, runs: int = 1, stacking: bool = False) -> None:
        """Bind every secret of this stream to ``ledger`` (:meth:`StreamClaim.bind`)."""
        self._claim.bind(ledger, integral=integral, runs=runs, stacking=stacking)

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        raise SecretAccess(f"a {type(self).__name__} cannot be pickled: it holds the true stream")


@final
class GuardedStream(SecretSequence):
    """A finite stream of d-dimensional true query results Q(D_1), ..., Q(D_T).

    ``data`` has shape (T, d) (or (T,) for d = 1), finite values only; ragged rows, NaN and
    infinities are refused. Iterating yields ``Secret`` objects for t = 1..T in order; the
    length T and dimension d are public system parameters. ``neighbours`` is the neighbouring
    relation (default: one person added or removed, in one bin per timestamp); every release's
    sensitivity is derived from it (see :mod:`budgetcheck.stream.neighbours`).
    """

    __slots__ = ("_dimensions",)

    def __init__(self, data: ArrayLike, *, neighbours: Neighbours = DEFAULT) -> None:
        self._setup(check_stream(data), rows=0, neighbours=neighbours)

    def _setup(self, payloads: NDArray[np.float64], *, rows: int, neighbours: Neighbours = DEFAULT) -> None:
        self._dimensions = int(payloads.shape[-1])
        super().__init__(payloads, rows=rows, neighbours=neighbours)

    @classmethod
    def stacked(cls, streams: Sequence[ArrayLike], *, neighbours: Neighbours = DEFAULT) -> GuardedStream:
        """S streams of one shape (T, d) read by one ledger as S blocks of runs (the benchmark's batches).

        With R runs, runs [s·R/S, (s+1)·R/S) read stream s (R must be a multiple of S); every
        charged operation reads each run's own stream. Mechanisms see an ordinary (T, d) stream.
        """
        checked = [check_stream(data) for data in streams]
        if not checked:
            raise InvalidArgument("streams must hold at least one stream, got none")
        shapes = sorted({values.shape for values in checked})
        if len(shapes) > 1:
            raise InvalidArgument(f"stacked streams must share one shape (T, d), got {shapes}")
        stream = cls.__new__(cls)
        stream._setup(np.stack(checked, axis=1), rows=len(checked), neighbours=neighbours)  # payload at t: (S, d)
        return stream

    @property
    def dimensions(self) -> int:
        """d, the number of counts released per timestamp."""
        return self._dimensions

    @property
    def streams(self) -> int:
        """How many streams are stacked (1 for an ordinary stream)."""
        return self._rows or 1

    def __repr__(self) -> str:
        stacked = f", streams={self._rows}" if self._rows else ""
        return f"GuardedStream(length={self._length}, dimensions={self._dimensions}{stacked})"


# The data model is fixed when the stream is made (issue 43, item 3): its relation, secrets, claim and shape
# are set once (a second __init__ is refused too), and the stream classes cannot be subclassed.
seal(GuardedStream, "_dimensions")

_COMPARED_BINS = 16  # up to this d, counting by comparisons (d passes over a row) beats one bincount


@final
class PersonalizedStream(SecretSequence):
    """Per-user data: at every timestamp each user sits in one bin of d (or in none).

    ``bins`` has shape (T, n), column i for the i-th user of ``requirements``; entries are
    integers in [0, d) or -1 (the user reports nothing at t). The secret of timestamp t holds the
    counts per requirement class and bin, shape (classes, d), which is all the Sampling Mechanism
    needs: sampling each user of class c with probability p_c and counting per bin has the same
    distribution as drawing Binomial(count[c, b], p_c) per cell. The data format makes its
    neighbouring relation one user, one bin per timestamp (``Neighbours.one_bin()``).
    """

    __slots__ = ("_dimensions", "_requirements", "_users")

    def __init__(self, requirements: RequirementSet, bins: ArrayLike, *, dimensions: int) -> None:
        if not isinstance(requirements, RequirementSet):
            raise InvalidArgument(f"requirements must be a RequirementSet, got {type(requirements).__name__}")
        d = check_positive_int(dimensions, "dimensions")
        data = _check_bins(bins, requirements.n_users, d)
        counts = class_counts(requirements.user_classes, data, requirements.n_classes, d, requirements.class_ranges)
        self._requirements = requirements
        self._dimensions = d
        super().__init__(counts, requirements=requirements)
        # per-user bins in their checked integer dtype, for population division (ledger.local_report_groups);
        # bound to the same ledger
        companions = StreamClaim(self, kind=COMPANION)  # never bound: no ledger operation reads them by claim
        self._users = tuple(Secret(t + 1, row, companions, integer=True) for t, row in enumerate(data))
        for secret, users in zip(self._secrets, self._users, strict=True):
            attach_users(secret, users)

    @classmethod
    def from_events(
        cls, requirements: RequirementSet, events: Iterable[tuple[int, object, int]], *, length: int, dimensions: int
    ) -> PersonalizedStream:
        """From (t, user id, bin) triples, t in 1..length; unknown users and repeats are refused."""
        T = check_positive_int(length, "length")
        bins = np.full((T, requirements.n_users), -1, dtype=np.int64)
        for t, user, b in events:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 1 <= t <= T:
                raise InvalidArgument(f"event ({t!r}, {user!r}, {b!r}): t must be an integer in [1, {T}]")
            column = requirements.index_of(user)
            if bins[t - 1, column] != -1:
                raise InvalidArgument(f"event ({t!r}, {user!r}, {b!r}): user {user!r} already has a bin at t={t}")
            if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b < dimensions:
                raise InvalidArgument(f"event ({t!r}, {user!r}, {b!r}): bin must be an integer in [0, {dimensions})")
            bins[t - 1, column] = b
        return cls(requirements, bins, dimensions=dimensions)

    @property
    def requirements(self) -> RequirementSet:
        return self._requirements

    @property
    def dimensions(self) -> int:
        """d, the number of bins released per timestamp."""
        return self._dimensions

    def __repr__(self) -> str:
        r = self._requirements
        return (
            f"PersonalizedStream(length={self._length}, dimensions={self._dimensions}, users={r.n_users}, "
            f"classes={r.n_classes})"
        )


def class_counts(
    user_classes: NDArray[np.int64],
    bins: NDArray[np.integer[Any]],
    classes: int,
    d: int,
    ranges: tuple[tuple[int, int], ...] | None = None,
) -> NDArray[np.float64]:
    """Counts per (timestamp, class, bin), shape (T, classes, d), of checked ``bins`` (T, n) in [-1, d).

    Du et al. 2025 §4.1: the class counts are the Sampling Mechanism's whole input. When each class's
    users are adjacent columns (``ranges``, :attr:`RequirementSet.class_ranges`) and d <= _COMPARED_BINS:
    per row and bin one comparison over the row, its matches counted per class's columns (d passes over
    the row's bytes, no index array). Otherwise one ``np.bincount`` per row over the combined index
    class·(d + 1) + bin + 1: the absent (-1) land in each class's slot 0, which is dropped.
    """
    counts = np.empty((bins.shape[0], classes, d))
    if ranges is not None and d <= _COMPARED_BINS:
        for t, row in enumerate(bins):
            for b in range(d):
                matches = row == b
                for c, (start, end) in enumerate(ranges):
                    counts[t, c, b] = np.count_nonzero(matches[start:end])
        return counts
    slots = user_classes * (d + 1) + 1
    for t, row in enumerate(bins):
        counts[t] = np.bincount(slots + row, minlength=classes * (d + 1)).reshape(classes, d + 1)[:, 1:]
    return counts


def _check_bins(bins: ArrayLike, users: int, d: int) -> NDArray[np.integer[Any]]:
    try:
        raw = np.asarray(bins)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"bins must be an integer array of shape (T, {users}): {exc}") from exc
    if raw.dtype == object and raw.ndim == 2:  # numpy keeps Python ints beyond 64 bits (or mixed types) as objects
        raise InvalidArgument(
            "bins must hold integer bins in [0, d) or -1 (absent) that fit in 64 bits, got entries numpy keeps as "
            "Python objects"
        )
    if raw.dtype == object or raw.ndim != 2 or raw.shape[1] != users or raw.shape[0] < 1:
        raise InvalidArgument(f"bins must have shape (T, {users}) (one column per user, T >= 1), got shape {raw.shape}")
    if raw.dtype.kind not in "iuf":  # strings, booleans, …: not bin numbers
        raise InvalidArgument(f"bins must hold integer bins (-1: absent), got an array of dtype {raw.dtype}")
    if raw.dtype.kind == "f":
        bad = ~np.isfinite(raw) | (raw != np.round(raw))
        if bad.any():
            t, i = (int(x) for x in np.argwhere(bad)[0])
            raise InvalidArgument(f"bins[t={t + 1}, user {i}]={raw[t, i]!r} must be an integer bin or -1")
    if raw.min() < -1 or raw.max() >= d:  # before the cast: values beyond int64 are refused, not wrapped
        t, i = (int(x) for x in np.argwhere((raw < -1) | (raw >= d))[0])
        raise InvalidArgument(f"bins[t={t + 1}, user {i}]={raw[t, i].item()!r} must be in [0, {d}) or -1 (absent)")
    # integers that int64 holds exactly stay as they are (class_counts adds them to int64 slots); the rest are cast
    return raw if raw.dtype.kind == "i" or (raw.dtype.kind == "u" and raw.dtype.itemsize < 8) else raw.astype(np.int64)


seal(PersonalizedStream, "_dimensions", "_requirements", "_users")
seal(SecretSequence, "_claim", "_length", "_neighbours", "_rows", "_secrets")  # after its two subclasses
