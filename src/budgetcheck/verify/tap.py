"""The verifier's tap: it sees, and may replace, the output of every charged operation of a ledger.

Non-interference (:mod:`budgetcheck.verify.interference`) records a run's outputs and hands them back
to a second run on other data; exploration (:mod:`budgetcheck.verify.explore`) chooses them. The tap
is an operation hook (:mod:`budgetcheck.ledger.hooks`) that verification installs on the ledgers it
makes; the ledger itself knows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

from budgetcheck.ledger.access import LedgerAccess
from budgetcheck.ledger.core import LedgerCore
from budgetcheck.ledger.hooks import OperationHook


@final
class Tap(OperationHook):
    """Pass each charged operation's output through ``see``, once: an operation called inside another
    is part of it and is not tapped."""

    __slots__ = ("_busy", "_see")

    def __init__(self, inner: OperationHook | None, see: Callable[[Any], Any]) -> None:
        super().__init__(inner)
        self._see = see
        self._busy = False

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self._busy:
            return super().run(fn, args, kwargs)
        self._busy = True
        try:
            result = super().run(fn, args, kwargs)
        finally:
            self._busy = False
        return self._see(result)


def install_tap(ledger: LedgerCore, see: Callable[[Any], Any]) -> Tap:
    """Pass every charged operation of ``ledger`` through ``see`` from now on (outermost hook)."""
    return LedgerAccess(ledger).install(lambda inner: Tap(inner, see))
