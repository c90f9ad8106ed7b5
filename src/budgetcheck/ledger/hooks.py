"""What may wrap a ledger's charged operations, and the ledger's side of that bargain.

A ledger runs every charged operation (``laplace``, ``spend``, an AboveThreshold query, ...) through
its hook chain, if one is installed: the durable transaction (:mod:`budgetcheck.durable.transaction`:
lock, catch up, append, commit, replay) and the verifier's tap (:mod:`budgetcheck.verify.tap`: sees
and may replace each operation's output). This module defines the interface in the ledger layer,
so that the ledger imports neither: each layer above installs its own hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.records import SpendRecord


class OperationHook:
    """One link of a ledger's hook chain; every method passes to ``inner`` (the link installed before)
    or, at the end of the chain, does what a plain in-memory ledger does."""

    __slots__ = ("inner",)

    def __init__(self, inner: OperationHook | None = None) -> None:
        self.inner = inner

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one charged operation ``fn(*args, **kwargs)`` and return its output."""
        return fn(*args, **kwargs) if self.inner is None else self.inner.run(fn, args, kwargs)

    def take(self, record: SpendRecord) -> bool:
        """A spend the ledger just committed in memory: True if a hook keeps it (so the ledger need not)."""
        return self.inner is not None and self.inner.take(record)

    @property
    def replaying(self) -> bool:
        """Whether operations are being replayed (their outputs come from a store: draw no noise)."""
        return self.inner is not None and self.inner.replaying

    def refresh(self) -> None:
        """Before a read of the accounting (``remaining``): catch up with spends committed elsewhere."""
        if self.inner is not None:
            self.inner.refresh()

    def mark(self) -> int:
        """A point that :meth:`rollback_to` can return the kept spends to (all-or-nothing series)."""
        return 0 if self.inner is None else self.inner.mark()

    def rollback_to(self, mark: int) -> None:
        """Forget the spends kept since ``mark`` (a series refused part way)."""
        if self.inner is not None:
            self.inner.rollback_to(mark)

    def stored_records(self) -> tuple[SpendRecord, ...] | None:
        """Every accepted spend, if a store keeps them (None: the ledger's memory is the record)."""
        return None if self.inner is None else self.inner.stored_records()

    @property
    def store(self) -> object | None:
        """The durable store behind the ledger (a :class:`~budgetcheck.durable.journal.Journal`), if any."""
        return None if self.inner is None else self.inner.store

    def idempotent(self, operation_id: str) -> contextlib.AbstractContextManager[None]:
        """The context of :meth:`LedgerCore.idempotent`: only a store can keep an operation's id."""
        if self.inner is None:
            raise InvalidArgument(
                f"idempotent(operation_id={operation_id!r}) needs a ledger kept in a store (open_ledger)"
            )
        return self.inner.idempotent(operation_id)

    def close(self) -> None:
        """Close whatever the chain holds open (a ledger file)."""
        if self.inner is not None:
            self.inner.close()
