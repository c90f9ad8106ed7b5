"""Replaying a ledger file: a restarted publisher's mechanism spends the stored operations again.

Each replayed call must spend exactly what the file recorded, in order, and gets the stored output
instead of fresh noise (accounting rules §8); used by :class:`~budgetcheck.durable.transaction.Transaction`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from budgetcheck.ledger.errors import LedgerCorrupt
from budgetcheck.ledger.records import SpendRecord

if TYPE_CHECKING:
    from budgetcheck.durable.journal import JournalRow

FloatArray = NDArray[np.float64]


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
                f"replay diverged at record {row.seq}: the file has t={stored.t}, {stored.purpose!r}, amounts "
                f"{stored.amounts.tolist()}; "
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
