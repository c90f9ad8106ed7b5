"""A live stream: rows that arrive one at a time (a publisher's input), each handed out as a Secret.

Unlike :class:`GuardedStream` its length is unknown and nothing but the current row is held, so a
mechanism written as a generator of releases (``mechanism.releases(stream, ledger)``) runs over
an unbounded stream in constant memory. Timestamps must increase; a publisher restarted from a
ledger file first hands out stand-ins for the timestamps it already published (replayed from the
file: the ledger answers them with the stored outputs, and refuses to read them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.errors import InvalidArgument, SecretAccess, TimestampOrder
from budgetcheck.ledger.sealed import seal
from budgetcheck.ledger.validation import MAX_T, MAX_VALUE, check_positive_int, check_timestamp
from budgetcheck.stream.neighbours import DEFAULT, Neighbours, check_neighbours
from budgetcheck.stream.secret import LIVE, Secret, StreamClaim, live_secret, take

_FEW = 16  # up to this many values a row is checked in plain Python (cheaper than two numpy calls)


def _bounded(row: NDArray[np.float64]) -> bool:
    """Every value finite with |value| <= 2^53 (NaN fails both comparisons)."""
    if row.size <= _FEW:
        for value in row.reshape(-1).tolist():
            if not -MAX_VALUE <= value <= MAX_VALUE:
                return False
        return True
    return bool((np.abs(row) <= MAX_VALUE).all())


def _unbounded(row: NDArray[np.float64]) -> NDArray[np.bool_]:
    return np.asarray(~(np.abs(row) <= MAX_VALUE))


def _negative(row: NDArray[np.float64]) -> NDArray[np.bool_]:
    return np.asarray(row < 0)


def _fractional(row: NDArray[np.float64]) -> NDArray[np.bool_]:
    return np.asarray(row != np.round(row))


def _first(row: NDArray[np.float64], bad: Callable[[NDArray[np.float64]], NDArray[np.bool_]]) -> str:
    """The position of the first entry ``bad`` marks (a position, not a count)."""
    return f"entry {tuple(int(i) for i in np.argwhere(bad(row))[0])}"


@final
class LiveStream:
    """(t, d counts) rows, t strictly increasing; ``replayed`` timestamps come first, as stand-ins.

    With ``classes`` = C each row holds (C, d) counts: users per requirement class and bin, as a
    :class:`PersonalizedStream`'s secrets do (for a live personalized publisher).
    """

    __slots__ = (
        "__weakref__",
        "_claim",
        "_class_sizes",
        "_current",
        "_dimensions",
        "_integral",
        "_neighbours",
        "_replayed",
        "_rows",
        "_shape",
        "_used",
    )

    def __init__(
        self,
        rows: Iterable[tuple[int, ArrayLike]],
        *,
        dimensions: int,
        classes: int | None = None,
        replayed: Sequence[int] = (),
        neighbours: Neighbours = DEFAULT,
    ) -> None:
        self._dimensions = check_positive_int(dimensions, "dimensions")
        self._shape = (
            (self._dimensions,) if classes is None else (check_positive_int(classes, "classes"), self._dimensions)
        )
        if not isinstance(rows, Iterable) or isinstance(rows, (str, bytes)):
            raise InvalidArgument(f"rows must be an iterable of (t, counts) pairs, got {type(rows).__name__}")
        self._rows = rows
        self._neighbours = check_neighbours(neighbours)  # the relation every sensitivity is derived from
        self._replayed = tuple(replayed)
        self._claim = StreamClaim(self, kind=LIVE)  # bound by ledger.bind only (see StreamClaim)
        self._integral = False
        self._class_sizes: NDArray[np.float64] | None = None  # see _limit_classes
        self._used = False
        self._current = 0

    @property
    def dimensions(self) -> int:
        """d, the number of counts per timestamp."""
        return self._dimensions

    @property
    def neighbours(self) -> Neighbours:
        """The neighbouring relation of this stream (see :mod:`budgetcheck.stream.neighbours`)."""
        return self._neighbours

    @property
    def current(self) -> int:
        """The timestamp of the latest secret handed out (0 before the first)."""
        return self._current

    def __iter__(self) -> Iterator[Secret]:
        if self._used:
            raise InvalidArgument("a LiveStream can be iterated once (its rows are consumed)")
        self._used = True
        return self._secrets()

    def _secrets(self) -> Iterator[Secret]:
        last = 0
        nothing = np.zeros(self._shape)
        for t in self._replayed:
            last = self._check_t(t, last)
            self._current = t
            yield Secret(t, nothing, self._claim, stand_in=True, neighbours=self._neighbours)
        for item in self._rows:
            try:
                t, values = item
            except (TypeError, ValueError):
                raise InvalidArgument(
                    f"each row of a LiveStream must be a pair (t, counts); the one after t={last} is a "
                    f"{type(item).__name__} that is not"
                ) from None
            last = self._check_t(t, last)
            secret = self._secret(t, values)
            del item, values  # while the mechanism holds the secret, this frame holds nothing of the row
            self._current = t
            yield secret

    def _secret(self, t: int, values: object) -> Secret:
        """The secret of row t: the row copied once, checked, frozen and handed to the vault as it is.
        A refused row's message names its shape or one offending position, never the row's counts."""
        try:
            row = np.array(values, dtype=np.float64)  # the one copy: the caller's array is never the payload
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgument(
                f"row t={t} must be real numbers in shape {self._shape}, got a {type(values).__name__} that is not"
            ) from None
        if type(values) is not list and type(values) is not np.ndarray and type(values) is not tuple:
            # numpy trusts an object's __array__ with copy=True: one that ignores it hands back an array the
            # caller keeps, which would be frozen under the caller and could change after these checks
            row = row.copy()
        if row.shape != self._shape:
            raise InvalidArgument(f"row t={t} must have shape {self._shape}, got shape {row.shape}")
        if not _bounded(row):
            raise InvalidArgument(
                f"row t={t} must hold finite values of at most 2^53, not at {_first(row, _unbounded)}"
            )
        if (self._integral or self._class_sizes is not None) and not np.array_equal(row, np.round(row)):
            raise InvalidArgument(f"row t={t} must hold integer counts, not at {_first(row, _fractional)}")
        if self._class_sizes is not None:
            if (row < 0).any():
                raise InvalidArgument(f"row t={t} must hold counts >= 0, not at {_first(row, _negative)}")
            over = np.flatnonzero(row.sum(axis=1) > self._class_sizes)
            if over.size:
                c = int(over[0])
                raise InvalidArgument(
                    f"row t={t}: class {c} counts more users than the {int(self._class_sizes[c])} it has"
                )
        row.setflags(write=False)
        return live_secret(t, row, self._claim, self._neighbours)

    def _limit_classes(self, sizes: Sequence[int], *, check_only: bool = False) -> None:
        """Check every (C, d) row against the requirement set's class sizes (a PersonalizedLedger binds it):
        counts are integers >= 0 and a class's row sums to at most its users."""
        if len(self._shape) != 2 or self._shape[0] != len(sizes):
            raise InvalidArgument(
                f"{self!r} must hold (classes, d) = ({len(sizes)}, {self._dimensions}) counts per row for a "
                "PersonalizedLedger (LiveStream(..., classes=...))"
            )
        if not check_only:
            self._class_sizes = np.array(sizes, dtype=np.float64)

    @staticmethod
    def _check_t(t: object, last: int) -> int:
        if type(t) is int and last < t <= MAX_T:  # the common case: no calls (last >= 0)
            return t
        t = check_timestamp(t, "t")
        if t <= last:
            raise TimestampOrder(f"t={t} after t={last}: timestamps of a live stream must increase")
        return t

    def _bind(self, ledger: object, *, integral: bool = False, runs: int = 1, stacking: bool = False) -> None:
        if not self._claim and self._used:  # a row handed out before was not checked for this ledger's sampler
            raise InvalidArgument(
                f"bind the ledger before iterating {self!r}: its rows are checked for the ledger when handed out"
            )
        take(self._claim, ledger, self)  # refused if another ledger has it: then nothing here changed
        self._integral = self._integral or integral

    def __repr__(self) -> str:
        return f"LiveStream(shape={self._shape}, replayed={len(self._replayed)})"

    def __reduce_ex__(self, protocol: object) -> tuple[object, ...]:
        raise SecretAccess("a LiveStream cannot be pickled: it holds the true stream")


# The data model is fixed when the stream is made (issue 43, item 3): its relation, rows, claim and shape are
# set once (a second __init__ on a bound stream is refused); what binding and rows change stays free.
seal(LiveStream, "_claim", "_dimensions", "_neighbours", "_replayed", "_rows", "_shape")
