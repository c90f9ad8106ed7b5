"""The one exception tree of budgetcheck; every leaf also subclasses a builtin."""

from __future__ import annotations


class BudgetcheckError(Exception):
    """Base class of every error budgetcheck raises on purpose."""


class InvalidArgument(BudgetcheckError, ValueError):
    """An argument at the public boundary is out of its domain (message names it and its value)."""


class BudgetExceeded(BudgetcheckError, ValueError):
    """A spend would break the composition theorem; the ledger is left exactly as it was.

    Attributes give the offending run, window (inclusive, 1-based timestamps; a Swellfish policy's
    interval J), the window sum the spend would have made (a float: the exact sum rounded to the
    nearest double) and epsilon.
    """

    def __init__(
        self,
        message: str,
        *,
        run: int,
        window: tuple[int, int],
        window_sum: float,
        epsilon: float,
    ) -> None:
        super().__init__(message)
        self.run = run
        self.window = window
        self.window_sum = window_sum
        self.epsilon = epsilon


class SecretAccess(BudgetcheckError, TypeError):
    """A true stream value was touched outside a charged ledger operation (benchmark M-R4)."""


class TimestampOrder(InvalidArgument):
    """A timestamp went backwards: ledgers and streams only move forward."""


class MechanismContractError(BudgetcheckError, RuntimeError):
    """A mechanism broke its contract with the harness (e.g. wrong output shape, non-finite output)."""


class MeasurementFailed(MechanismContractError):
    """No longer raised by ``measure``, ``measure_footprint`` or a threshold test (issue 43): a measured
    function's failure gives the call's declared default and is recorded in ``ledger.failures``, since
    whether it failed may follow the data. Kept so that code catching it still imports."""


class DataUnavailable(BudgetcheckError, RuntimeError):
    """A data set needs an optional extra (``pip install budgetcheck[data]``) or a user's file."""


class MissingExtra(BudgetcheckError, ImportError):
    """A command needs an optional extra that is not installed (``pip install 'budgetcheck[verify]'``):
    the core install runs the ledgers and the publisher only (:mod:`budgetcheck.extras`)."""


class LedgerCorrupt(BudgetcheckError, RuntimeError):
    """A ledger file is truncated, edited, of an unknown version, or not a ledger file at all."""


class LedgerBusy(BudgetcheckError, TimeoutError):
    """Another writer held a ledger's lock longer than the lock timeout; nothing was charged."""


class LedgerUnavailable(BudgetcheckError, ConnectionError):
    """A ledger store cannot be reached: the database server refused or dropped the connection, or the
    driver of its extra (``pip install 'budgetcheck[postgres]'``) is missing; nothing was charged."""


class BadRow(InvalidArgument):
    """A publisher's input row is malformed; ``row`` is its 1-based line number."""

    def __init__(self, message: str, *, row: int) -> None:
        super().__init__(f"row {row}: {message}")
        self.row = row


class NotAllowed(InvalidArgument):
    """A mechanism asked a ledger for what only the ledger's owner can allow: in-process user code
    (``isolation='trusted'``) or a vouched sensitivity (``measure``, a threshold test's own statistic),
    on a ledger built without ``trusted_code=True`` / ``allow_vouched=True``. Raised before anything is
    charged, bound or read."""


class Fixed(BudgetcheckError, AttributeError):
    """A value fixed when it was set (a ledger owner's choice, a stream's data model) was to be changed
    or deleted afterwards; nothing changed."""
