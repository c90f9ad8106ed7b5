"""The store under a ledger journal: what an SQLite file and a PostgreSQL database do differently.

The journal (:class:`budgetcheck.durable.journal.Journal`) keeps the hash chain, the catch-up, the
rollback state and the row decoding in one place; a store only connects (creating the schema
whole, once), runs statements with ``?`` placeholders, takes the write lock, opens a read
snapshot, and turns its driver's errors into :class:`LedgerBusy` (the lock was held past
``lock_timeout``) or :class:`LedgerCorrupt` (naming the store and the step). Both stores hold the
same tables (``meta``, ``records``, ``head``), the same append-only triggers and the same bytes, so
a chain copied row by row from one to the other ends at the same head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class Cursor(Protocol):
    """The rows of one statement (a DB-API cursor)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Store(Protocol):
    """One connection to a ledger store (an SQLite file or a PostgreSQL schema)."""

    @property
    def name(self) -> str:
        """The path or URL (never a password) that messages name."""

    @property
    def operation_key(self) -> str:
        """The SQL expression of a row's operation id (the ``operation`` field of its detail JSON)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement (``?`` placeholders) in the open transaction, or on its own."""

    def begin_write(self) -> None:
        """Start a transaction holding the ledger's write lock (waits up to ``lock_timeout``, then LedgerBusy):
        every later statement of it sees every transaction committed before."""

    def begin_read(self) -> None:
        """Start a read-only transaction that sees one snapshot throughout."""

    def commit(self, *, durable: bool = False) -> None:
        """Commit the open transaction. ``durable``: return only once it is on the store's disk (the
        write-ahead log synced) even under durability "process"; that also makes every earlier commit
        of the store durable (the log is written in order)."""

    def rollback(self) -> None:
        """Undo the open transaction, if any; never raises."""

    def in_transaction(self) -> bool: ...

    def guard(self, what: str) -> AbstractContextManager[None]:
        """Turn the driver's errors inside the block into LedgerBusy or LedgerCorrupt naming ``what``."""

    def duplicate(self, exc: BaseException | None) -> bool:
        """Whether ``exc`` is a unique-index violation (a timestamp published twice, an operation id reused)."""

    def close(self) -> None: ...

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (or the connection was lost)."""

    def interpose(self, wrap: Callable[[Any], Any]) -> None:
        """Replace the driver connection with ``wrap(connection)``, which must offer the methods the store
        calls (``execute``, ...): the load campaign and the concurrency tests let other writers commit
        between the store's statements this way."""
