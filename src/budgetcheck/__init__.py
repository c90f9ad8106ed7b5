"""budgetcheck: provably right privacy accounting for differentially private streams.

Every mechanism spends privacy only through a ledger that checks the composition theorem before
any noise is drawn (w-event: Kellaris et al. 2014, Theorem 3).
"""

from __future__ import annotations

from budgetcheck import ops as ops
from budgetcheck import proving as proving
from budgetcheck import rounding as rounding
from budgetcheck._audit import AuditReport as AuditReport
from budgetcheck._audit import WindowFinding as WindowFinding
from budgetcheck._audit import audit_windows as audit_windows
from budgetcheck._errors import BudgetcheckError as BudgetcheckError
from budgetcheck._errors import BudgetExceeded as BudgetExceeded
from budgetcheck._errors import InvalidArgument as InvalidArgument
from budgetcheck._errors import MechanismContractError as MechanismContractError
from budgetcheck._errors import SecretAccess as SecretAccess
from budgetcheck._errors import TimestampOrder as TimestampOrder
from budgetcheck._ledger import WindowLedger as WindowLedger
from budgetcheck._mechanism import Execution as Execution
from budgetcheck._mechanism import StreamMechanism as StreamMechanism
from budgetcheck._mechanism import execute as execute
from budgetcheck._params import WEventParams as WEventParams
from budgetcheck._records import LedgerHeader as LedgerHeader
from budgetcheck._records import SpendRecord as SpendRecord
from budgetcheck._records import load_lines as load_lines
from budgetcheck._secret import Secret as Secret
from budgetcheck._stream import GuardedStream as GuardedStream
from budgetcheck._verify import Counterexample as Counterexample
from budgetcheck._verify import VerifyResult as VerifyResult
from budgetcheck._verify import load_mechanism as load_mechanism
from budgetcheck._verify import verify_mechanism as verify_mechanism

__all__ = [
    "AuditReport",
    "BudgetExceeded",
    "BudgetcheckError",
    "Counterexample",
    "Execution",
    "GuardedStream",
    "InvalidArgument",
    "LedgerHeader",
    "MechanismContractError",
    "Secret",
    "SecretAccess",
    "SpendRecord",
    "StreamMechanism",
    "TimestampOrder",
    "VerifyResult",
    "WEventParams",
    "WindowFinding",
    "WindowLedger",
    "audit_windows",
    "execute",
    "load_lines",
    "load_mechanism",
    "ops",
    "proving",
    "rounding",
    "verify_mechanism",
]
