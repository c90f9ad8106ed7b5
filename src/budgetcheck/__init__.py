"""budgetcheck: provably right privacy accounting for differentially private streams.

Every mechanism spends privacy only through a ledger that checks the composition theorem before
any noise is drawn (w-event: Kellaris et al. 2014, Theorem 3; personalized w-event: Du et al. 2025;
Swellfish: Tex, Schäler, Böhm, Theorem 4.2).
"""

from __future__ import annotations

from budgetcheck import kernels as kernels
from budgetcheck import ops as ops
from budgetcheck import proving as proving
from budgetcheck import rounding as rounding
from budgetcheck._audit import AuditReport as AuditReport
from budgetcheck._audit import WindowFinding as WindowFinding
from budgetcheck._audit import audit_windows as audit_windows
from budgetcheck._audit import audit_windows_per_epsilon as audit_windows_per_epsilon
from budgetcheck._errors import BudgetcheckError as BudgetcheckError
from budgetcheck._errors import BudgetExceeded as BudgetExceeded
from budgetcheck._errors import InvalidArgument as InvalidArgument
from budgetcheck._errors import MeasurementFailed as MeasurementFailed
from budgetcheck._errors import MechanismContractError as MechanismContractError
from budgetcheck._errors import SecretAccess as SecretAccess
from budgetcheck._errors import TimestampOrder as TimestampOrder
from budgetcheck._audit_file import FileAudit as FileAudit
from budgetcheck._audit_file import audit_file as audit_file
from budgetcheck._durable import open_ledger as open_ledger
from budgetcheck._errors import LedgerBusy as LedgerBusy
from budgetcheck._errors import LedgerUnavailable as LedgerUnavailable
from budgetcheck._errors import LedgerCorrupt as LedgerCorrupt
from budgetcheck._ledger import WindowLedger as WindowLedger
from budgetcheck._live import LiveStream as LiveStream
from budgetcheck._ranked import RankedRows as RankedRows
from budgetcheck._publish import PublishSummary as PublishSummary
from budgetcheck._publish import publish as publish
from budgetcheck._mechanism import Execution as Execution
from budgetcheck._mechanism import PersonalizedMechanism as PersonalizedMechanism
from budgetcheck._mechanism import SwellfishMechanism as SwellfishMechanism
from budgetcheck._mechanism import execute_personalized as execute_personalized
from budgetcheck._mechanism import execute_swellfish as execute_swellfish
from budgetcheck._personalized import PersonalizedLedger as PersonalizedLedger
from budgetcheck._policies import PolicyCollection as PolicyCollection
from budgetcheck._policies import StreamPolicy as StreamPolicy
from budgetcheck._policies import calc_delta_j as calc_delta_j
from budgetcheck._policies import goal_affected_maximum as goal_affected_maximum
from budgetcheck._requirements import Requirement as Requirement
from budgetcheck._requirements import RequirementSet as RequirementSet
from budgetcheck._sampling import inclusion_probabilities as inclusion_probabilities
from budgetcheck._sampling import optimal_budget as optimal_budget
from budgetcheck._sampling import sampling_error as sampling_error
from budgetcheck._swellfish import SwellfishLedger as SwellfishLedger
from budgetcheck._mechanism import StreamMechanism as StreamMechanism
from budgetcheck._mechanism import execute as execute
from budgetcheck._params import WEventParams as WEventParams
from budgetcheck._records import LedgerHeader as LedgerHeader
from budgetcheck._records import SpendRecord as SpendRecord
from budgetcheck._records import load_lines as load_lines
from budgetcheck._secret import Secret as Secret
from budgetcheck._stream import GuardedStream as GuardedStream
from budgetcheck._stream import PersonalizedStream as PersonalizedStream
from budgetcheck._threshold import ThresholdAnswer as ThresholdAnswer
from budgetcheck._threshold import ThresholdTest as ThresholdTest
from budgetcheck._threshold import deviation as deviation
from budgetcheck._verify import Counterexample as Counterexample
from budgetcheck.ledger.queries import Clipped as Clipped
from budgetcheck.ledger.queries import Composed as Composed
from budgetcheck.ledger.queries import Differences as Differences
from budgetcheck.ledger.queries import GroupSums as GroupSums
from budgetcheck.ledger.queries import Identity as Identity
from budgetcheck.ledger.queries import Linear as Linear
from budgetcheck.ledger.queries import Query as Query
from budgetcheck.ledger.queries import Smoothing as Smoothing
from budgetcheck.ledger.queries import Total as Total
from budgetcheck.stream.neighbours import Neighbours as Neighbours
from budgetcheck._verify import VerifyResult as VerifyResult
from budgetcheck._verify import load_mechanism as load_mechanism
from budgetcheck._verify import verify_mechanism as verify_mechanism

__all__ = [
    "AuditReport",
    "BudgetExceeded",
    "BudgetcheckError",
    "Clipped",
    "Composed",
    "Counterexample",
    "Differences",
    "Execution",
    "FileAudit",
    "GroupSums",
    "GuardedStream",
    "Identity",
    "InvalidArgument",
    "LedgerBusy",
    "LedgerCorrupt",
    "LedgerHeader",
    "LedgerUnavailable",
    "Linear",
    "LiveStream",
    "MeasurementFailed",
    "MechanismContractError",
    "Neighbours",
    "PersonalizedLedger",
    "PersonalizedMechanism",
    "PersonalizedStream",
    "PolicyCollection",
    "PublishSummary",
    "Query",
    "RankedRows",
    "Requirement",
    "RequirementSet",
    "Secret",
    "SecretAccess",
    "Smoothing",
    "SpendRecord",
    "StreamMechanism",
    "StreamPolicy",
    "SwellfishLedger",
    "SwellfishMechanism",
    "ThresholdAnswer",
    "ThresholdTest",
    "TimestampOrder",
    "Total",
    "VerifyResult",
    "WEventParams",
    "WindowFinding",
    "WindowLedger",
    "audit_file",
    "audit_windows",
    "audit_windows_per_epsilon",
    "calc_delta_j",
    "deviation",
    "execute",
    "execute_personalized",
    "execute_swellfish",
    "goal_affected_maximum",
    "inclusion_probabilities",
    "kernels",
    "load_lines",
    "load_mechanism",
    "open_ledger",
    "ops",
    "optimal_budget",
    "proving",
    "publish",
    "rounding",
    "sampling_error",
    "verify_mechanism",
]
