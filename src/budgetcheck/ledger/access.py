"""The named interface of a ledger for budgetcheck's own code outside the ledger classes.

The durable transaction (:mod:`budgetcheck.durable.transaction`), the verifier's tap
(:mod:`budgetcheck.verify.tap`) and operations defined beside the ledger (AboveThreshold's
:class:`~budgetcheck.ledger.threshold.ThresholdTest`) reach a ledger only through this interface,
never through its private members. It is not for mechanisms: they spend through the ledger's public
operations, whose sensitivity the library derives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, final

import numpy as np
from numpy.typing import ArrayLike, NDArray

from budgetcheck.ledger.core import LaplaceReleases, LedgerCore
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.hooks import OperationHook
from budgetcheck.ledger.records import SpendRecord
from budgetcheck.stream.secret import Secret

FloatArray = NDArray[np.float64]
H = TypeVar("H", bound=OperationHook)


@final
class LedgerAccess:
    """What a hook or an operation beside the ledger may do with one ledger."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: LedgerCore) -> None:
        if not isinstance(ledger, LedgerCore):
            raise InvalidArgument(
                f"ledger must be a WindowLedger, PersonalizedLedger or SwellfishLedger, got {type(ledger).__name__}"
            )
        self._ledger = ledger

    @property
    def ledger(self) -> LedgerCore:
        return self._ledger

    # -- hooks ------------------------------------------------------------------------------------
    @property
    def hook(self) -> OperationHook | None:
        """The outermost installed hook (its ``inner`` links lead to the rest), or None."""
        return self._ledger._hook

    def install(self, make: Callable[[OperationHook | None], H]) -> H:
        """Install ``make(current outermost hook)`` as the new outermost hook, and return it."""
        hook = make(self._ledger._hook)
        self._ledger._hook = hook
        return hook

    def uninstall(self, hook: OperationHook) -> None:
        """Remove the outermost hook ``hook`` (the one installed last), restoring the one before it."""
        if self._ledger._hook is not hook:
            raise InvalidArgument(f"{hook!r} is not the outermost hook of {self._ledger!r}")
        self._ledger._hook = hook.inner

    def fresh(self) -> bool:
        """Whether the ledger is unused: nothing charged, kept or refused, and no hook installed."""
        ledger = self._ledger
        return not (ledger.t or ledger._records or ledger.refusals) and ledger._hook is None

    # -- accounting -------------------------------------------------------------------------------
    def account(self, record: SpendRecord) -> None:
        """Account for a stored record (checked and committed before); LedgerCorrupt if it breaks the theorem."""
        self._ledger._apply_row(record)

    def rebuild(self, records: Iterable[SpendRecord]) -> None:
        """Forget all accounting and account for ``records`` in order."""
        self._ledger._rebuild(records)

    def lookback(self) -> int:
        """How far before the latest timestamp a stored record can still affect a check."""
        return self._ledger._lookback()

    def reseed(self, session: Sequence[int]) -> None:
        """Draw the ledger's noise from a generator of its own for a store's session (its entropy)."""
        self._ledger._reseed(session)

    # -- operations beside the ledger ---------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` as one charged operation of the ledger (through its hooks)."""
        return self._ledger._run_operation(fn, args, kwargs)

    def charge(self, secret: Secret, record: SpendRecord) -> int:
        """Charge ``record.amounts`` at the secret's timestamp (checked: its type, order and stream);
        raises, changing nothing, before anything is read. Returns the timestamp."""
        ledger = self._ledger
        if record.vouched:
            ledger._require_owner("a vouched charge", vouched=True)
        t = ledger._check_secret(secret)
        ledger._charge(t, record.amounts, record)
        ledger._vouched += record.vouched
        return t

    def require_owner(self, what: str, *, isolation: str | None = None, vouched: bool = False) -> None:
        """Refuse (:class:`~budgetcheck.ledger.errors.NotAllowed`, before any charge) what the ledger's owner did
        not allow: ``isolation='trusted'`` without ``trusted_code``, a vouched sensitivity without ``allow_vouched``."""
        self._ledger._require_owner(what, isolation=isolation, vouched=vouched)

    @property
    def rng(self) -> np.random.Generator:
        """The ledger's generator of other randomness (see :func:`budgetcheck.ledger.core.generator`)."""
        return self._ledger._randomness()

    def call_measured(
        self,
        fn: Callable[[FloatArray], ArrayLike],
        payloads: list[FloatArray],
        isolation: str,
        shape: tuple[int, ...],
        default: FloatArray,
        deadline: float,
        operation: str,
    ) -> list[FloatArray]:
        """Run the caller's ``fn`` on true values as ``measure`` does (counted in ``ledger.in_process`` if here):
        its results, or ``default`` for each payload when it failed (recorded in ``ledger.failures``)."""
        return self._ledger._call_measured(fn, payloads, isolation, shape, default, deadline, operation)

    def check_confined(self, isolation: str) -> None:
        """Refuse, before any charge, a forked call the machine cannot sandbox (unless the owner allowed it)."""
        self._ledger._check_confined(isolation)

    def per_run(self, secret: Secret, values: FloatArray, runs: NDArray[np.int64] | None = None) -> FloatArray:
        """What every run (or the runs indexed by ``runs``) reads of ``values``, shape (runs, ...)."""
        if not isinstance(self._ledger, LaplaceReleases):
            raise InvalidArgument(f"{type(self._ledger).__name__} does not read per-run values")
        return self._ledger._per_run(secret, values, runs)

    # -- an intruder (pan-privacy) ----------------------------------------------------------------
    def intrude(self, t: int) -> None:
        """Place an unannounced intrusion at t (Kellaris et al. 2014, §4.5): every value the WindowLedger
        holds at t (``held_laplace``, published or not) is kept for :meth:`intruder_read`. The run is
        otherwise unchanged: nothing is drawn, charged or published for the intruder."""
        from budgetcheck.ledger.wevent import WindowLedger  # wevent imports this module (via threshold)

        if not isinstance(self._ledger, WindowLedger):
            raise InvalidArgument(
                f"an intrusion reads a WindowLedger's held values, not a {type(self._ledger).__name__}"
            )
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise InvalidArgument(f"t={t!r} must be a timestamp (an integer >= 1)")
        self._ledger._intruder = (t, [])

    def intruder_read(self) -> list[FloatArray]:
        """What the intrusion placed with :meth:`intrude` read: the values held at its t, in the order
        they were held, each of shape (runs, *secret shape) (empty: nothing held there)."""
        from budgetcheck.ledger.wevent import WindowLedger

        intruder = self._ledger._intruder if isinstance(self._ledger, WindowLedger) else None
        if intruder is None:
            raise InvalidArgument("no intrusion was placed on this ledger (LedgerAccess.intrude)")
        return list(intruder[1])
