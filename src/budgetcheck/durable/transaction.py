"""A ledger kept in a store: every charged operation is one transaction of its journal (accounting rules §8).

:func:`attach` installs a :class:`Transaction` as the ledger's innermost hook
(:mod:`budgetcheck.ledger.hooks`). Each charged operation then: takes the store's write lock, applies
the spends other writers committed, runs (check, commit in memory, draw the noise), appends its records
and output to the hash chain, commits — and only then returns the value. A refusal appends nothing; an
operation that fails after charging (its data was read) is still recorded; if the store fails, the
ledger's accounting is rebuilt from what the store holds. A restarted publisher's ledger replays the
stored operations first (:class:`~budgetcheck.durable.replay.Replay`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any, final

import numpy as np
from numpy.typing import NDArray

from budgetcheck.durable.journal import Journal, JournalRow
from budgetcheck.durable.replay import Replay
from budgetcheck.ledger.access import LedgerAccess
from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.errors import BudgetExceeded, InvalidArgument, LedgerCorrupt
from budgetcheck.ledger.hooks import OperationHook
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.ledger.validation import is_utf8
from budgetcheck.stream.secret import Secret, is_placeholder

FloatArray = NDArray[np.float64]


def attach(ledger: LedgerCore, journal: Journal, *, replay: list[JournalRow] | None = None) -> Transaction:
    """Keep every later spend of the fresh ``ledger`` in ``journal``: load the store's state (its whole
    chain verified), or queue its operations for replay by a restarted publisher."""
    access = LedgerAccess(ledger)
    if not access.fresh():
        raise InvalidArgument(f"{ledger!r} has already been used: open a ledger file with a fresh ledger")
    journal.claim("sampler", ledger.sampler)  # a file keeps the noise source it was opened with
    access.reseed(journal.session_entropy)  # never the same noise twice (see Journal.session_entropy)
    stored = None if replay is None else Replay(replay, released={t for t, _ in journal.releases()})
    transaction = access.install(lambda inner: Transaction(access, journal, stored))
    if replay is None:
        try:
            transaction.load()
        except BaseException:
            access.uninstall(transaction)
            raise
    return transaction


def transaction_of(ledger: LedgerCore) -> Transaction | None:
    """The transaction hook of a ledger kept in a store, or None."""
    hook = LedgerAccess(ledger).hook
    while hook is not None and not isinstance(hook, Transaction):
        hook = hook.inner
    return hook


def store_release(ledger: LedgerCore, t: int, values: FloatArray) -> None:
    """Append to the ledger's store that ``values`` was published for t (a publisher's release, in the
    hash chain; once per t), in a transaction of its own, durable on return whatever the ledger's
    durability: the release and every spend before it survive a crash of the server or the host."""
    transaction = transaction_of(ledger)
    if transaction is None:
        raise InvalidArgument("only a ledger kept in a file (open_ledger) stores its releases")
    transaction.store_release(t, values)


@final
class Transaction(OperationHook):
    """The durable transaction of one ledger: its journal, the spends of the operation in progress, the
    operation id of an idempotent block and the replay of a restarted publisher."""

    __slots__ = ("_access", "_depth", "_journal", "_operation_id", "_pending", "_replay")

    def __init__(self, access: LedgerAccess, journal: Journal, replay: Replay | None) -> None:
        super().__init__(None)  # the innermost hook: it ends the chain
        self._access = access
        self._journal = journal
        self._replay = replay
        self._depth = 0  # inside an operation: a nested one runs as part of it
        self._pending: list[SpendRecord] = []
        self._operation_id: list[Any] | None = None  # [id, used] inside idempotent()

    # -- the hook -------------------------------------------------------------------------------
    def take(self, record: SpendRecord) -> bool:
        if self._replay is not None:
            self._replay.match(record)
        else:
            self._pending.append(record)
        return True

    @property
    def replaying(self) -> bool:
        return self._replay is not None

    def refresh(self) -> None:
        """Outside an operation or a replay: apply what other writers have committed, so that a read
        counts every commit made before the call (a charge still re-checks under the lock)."""
        if self._depth or self._replay is not None:
            return
        caught = self._journal.peek()
        try:
            for row in caught:
                self._access.account(row.record)
        except BaseException:
            self.load()  # memory may be ahead of the file: rebuild from what is on disk
            raise

    def mark(self) -> int:
        return len(self._pending)

    def rollback_to(self, mark: int) -> None:
        del self._pending[mark:]

    def stored_records(self) -> tuple[SpendRecord, ...]:
        return tuple(row.record for row in self._journal.rows())

    @property
    def store(self) -> Journal:
        return self._journal

    @contextlib.contextmanager
    def idempotent(self, operation_id: str) -> Iterator[None]:
        if (
            not isinstance(operation_id, str)
            or not 0 < len(operation_id) <= 256
            or "\x00" in operation_id
            or not is_utf8(operation_id)
        ):
            raise InvalidArgument(
                f"operation_id={operation_id!r} must be a string of 1 to 256 characters, without NUL or a lone "
                "surrogate (a PostgreSQL text field cannot hold them, nor UTF-8 a lone surrogate)"
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

    def close(self) -> None:
        self._journal.close()

    # -- the store --------------------------------------------------------------------------------
    def load(self) -> None:
        """Rebuild the ledger's accounting from the store: the records that can still matter."""
        self._access.rebuild(row.record for row in self._journal.load(self._access.lookback()))

    def store_release(self, t: int, values: FloatArray) -> None:
        """See :func:`store_release`."""

        def store(journal: Journal) -> None:
            journal.append_release(t, values)
            journal.commit(durable=True)  # on disk before it is written out, in every durability mode

        self._locked(store)

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One charged operation: replayed, or one transaction of the store (see the module docstring)."""
        if self._depth:
            return fn(*args, **kwargs)
        if self._replay is not None:
            self._replay.charge_unreleased_before(_timestamp_of(args, kwargs), self._access.account)
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

    def _locked(self, work: Callable[[Journal], None]) -> None:
        """One write transaction: take the lock, apply what other writers committed, then ``work``
        (which commits or rolls back). Everything ``work`` decides on is read under the lock, and a
        rollback returns the journal to exactly what the lock showed. If anything fails after the
        lock was taken, the in-memory state is rebuilt from what the file holds."""
        journal = self._journal
        caught = journal.begin()  # raises with nothing changed (e.g. LedgerBusy)
        try:
            for row in caught:
                self._access.account(row.record)
            work(journal)
        except BaseException:
            journal.rollback()
            self._pending = []
            self.load()  # memory may be ahead of (or behind) the file: rebuild from what is on disk
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
