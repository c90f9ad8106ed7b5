"""budgetcheck: provably right privacy accounting for differentially private streams.

Every mechanism spends privacy only through a ledger that checks the composition theorem before
any noise is drawn (w-event: Kellaris et al. 2014, Theorem 3; personalized w-event: Du et al. 2025;
Swellfish: Tex, Schäler, Böhm, Theorem 4.2).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from budgetcheck import kernel_ops as kernel_ops
from budgetcheck import kernels as kernels
from budgetcheck import libm as libm
from budgetcheck import ops as ops
from budgetcheck import rounding as rounding
from budgetcheck.durable.audit_file import FileAudit as FileAudit
from budgetcheck.durable.audit_file import audit_file as audit_file
from budgetcheck.durable.checkpoint import CheckpointReport as CheckpointReport
from budgetcheck.durable.checkpoint import generate_keys as generate_keys
from budgetcheck.durable.checkpoint import sign_ledger as sign_ledger
from budgetcheck.durable.checkpoint import verify_checkpoints as verify_checkpoints
from budgetcheck.durable.ledger_file import open_ledger as open_ledger
from budgetcheck.durable.publish import PublishSummary as PublishSummary
from budgetcheck.durable.publish import publish as publish
from budgetcheck.ledger.audit import AuditReport as AuditReport
from budgetcheck.ledger.audit import WindowFinding as WindowFinding
from budgetcheck.ledger.audit import audit_windows as audit_windows
from budgetcheck.ledger.audit import audit_windows_per_epsilon as audit_windows_per_epsilon
from budgetcheck.ledger.errors import BudgetcheckError as BudgetcheckError
from budgetcheck.ledger.errors import BudgetExceeded as BudgetExceeded
from budgetcheck.ledger.errors import Fixed as Fixed
from budgetcheck.ledger.errors import InvalidArgument as InvalidArgument
from budgetcheck.ledger.errors import LedgerBusy as LedgerBusy
from budgetcheck.ledger.errors import LedgerCorrupt as LedgerCorrupt
from budgetcheck.ledger.errors import LedgerUnavailable as LedgerUnavailable
from budgetcheck.ledger.errors import MeasurementFailed as MeasurementFailed
from budgetcheck.ledger.errors import MechanismContractError as MechanismContractError
from budgetcheck.ledger.errors import NotAllowed as NotAllowed
from budgetcheck.ledger.errors import SecretAccess as SecretAccess
from budgetcheck.ledger.errors import TimestampOrder as TimestampOrder
from budgetcheck.ledger.params import WEventParams as WEventParams
from budgetcheck.ledger.personalized import PersonalizedLedger as PersonalizedLedger
from budgetcheck.ledger.policies import PolicyCollection as PolicyCollection
from budgetcheck.ledger.policies import StreamPolicy as StreamPolicy
from budgetcheck.ledger.policies import calc_delta_j as calc_delta_j
from budgetcheck.ledger.policies import goal_affected_maximum as goal_affected_maximum
from budgetcheck.ledger.queries import Clipped as Clipped
from budgetcheck.ledger.queries import Composed as Composed
from budgetcheck.ledger.queries import Differences as Differences
from budgetcheck.ledger.queries import GroupSums as GroupSums
from budgetcheck.ledger.queries import Identity as Identity
from budgetcheck.ledger.queries import Linear as Linear
from budgetcheck.ledger.queries import Query as Query
from budgetcheck.ledger.queries import Smoothing as Smoothing
from budgetcheck.ledger.queries import Total as Total
from budgetcheck.ledger.queries import TreeSums as TreeSums
from budgetcheck.ledger.ranked import RankedRows as RankedRows
from budgetcheck.ledger.records import LedgerHeader as LedgerHeader
from budgetcheck.ledger.records import SpendRecord as SpendRecord
from budgetcheck.ledger.records import load_lines as load_lines
from budgetcheck.ledger.requirements import Requirement as Requirement
from budgetcheck.ledger.requirements import RequirementSet as RequirementSet
from budgetcheck.ledger.sampling import inclusion_probabilities as inclusion_probabilities
from budgetcheck.ledger.sampling import optimal_budget as optimal_budget
from budgetcheck.ledger.sampling import sampling_error as sampling_error
from budgetcheck.ledger.swellfish import SwellfishLedger as SwellfishLedger
from budgetcheck.ledger.threshold import ThresholdAnswer as ThresholdAnswer
from budgetcheck.ledger.threshold import ThresholdTest as ThresholdTest
from budgetcheck.ledger.threshold import deviation as deviation
from budgetcheck.ledger.wevent import WindowLedger as WindowLedger
from budgetcheck.mechanism.execute import Execution as Execution
from budgetcheck.mechanism.execute import PersonalizedMechanism as PersonalizedMechanism
from budgetcheck.mechanism.execute import StreamMechanism as StreamMechanism
from budgetcheck.mechanism.execute import SwellfishMechanism as SwellfishMechanism
from budgetcheck.mechanism.execute import execute as execute
from budgetcheck.mechanism.execute import execute_personalized as execute_personalized
from budgetcheck.mechanism.execute import execute_swellfish as execute_swellfish
from budgetcheck.mechanism.loading import load_mechanism as load_mechanism
from budgetcheck.stream.guarded import GuardedStream as GuardedStream
from budgetcheck.stream.guarded import PersonalizedStream as PersonalizedStream
from budgetcheck.stream.hierarchy import Hierarchy as Hierarchy
from budgetcheck.stream.live import LiveStream as LiveStream
from budgetcheck.stream.neighbours import Neighbours as Neighbours
from budgetcheck.stream.secret import Secret as Secret

if TYPE_CHECKING:
    from budgetcheck import proving as proving
    from budgetcheck.verify.stages import Counterexample as Counterexample
    from budgetcheck.verify.stages import VerifyResult as VerifyResult
    from budgetcheck.verify.stages import verify_mechanism as verify_mechanism

# Verification loads hypothesis, z3 and scipy: it is imported when one of its names is first used,
# so a publisher or a benchmark worker never loads the prover (issue: layout).
_LAZY = {
    "Counterexample": "budgetcheck.verify.stages",
    "VerifyResult": "budgetcheck.verify.stages",
    "verify_mechanism": "budgetcheck.verify.stages",
    "proving": "budgetcheck.proving",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'budgetcheck' has no attribute {name!r}")
    from budgetcheck.extras import require_extra

    require_extra("verify", f"budgetcheck.{name}")  # one line naming the extra on the core install
    loaded = importlib.import_module(module)
    value = loaded if module.endswith(name) else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names, the lazily loaded ones included (not this module's own helpers)."""
    return sorted((set(globals()) - {"importlib", "TYPE_CHECKING", "Any"}) | set(_LAZY))


__all__ = [
    "AuditReport",
    "BudgetExceeded",
    "BudgetcheckError",
    "CheckpointReport",
    "Clipped",
    "Composed",
    "Counterexample",
    "Differences",
    "Execution",
    "FileAudit",
    "Fixed",
    "GroupSums",
    "GuardedStream",
    "Hierarchy",
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
    "NotAllowed",
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
    "TreeSums",
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
    "generate_keys",
    "goal_affected_maximum",
    "inclusion_probabilities",
    "kernel_ops",
    "kernels",
    "libm",
    "load_lines",
    "load_mechanism",
    "open_ledger",
    "ops",
    "optimal_budget",
    "proving",
    "publish",
    "rounding",
    "sampling_error",
    "sign_ledger",
    "verify_checkpoints",
    "verify_mechanism",
]

# `from budgetcheck import *` takes every name in __all__; on the core install (no verify extra) the
# verification names would raise MissingExtra there, so the star import takes the core's names only
# (using one of them by name still raises the one line naming the extra)
from budgetcheck.extras import require_extra as _require_extra  # noqa: E402
from budgetcheck.ledger.errors import MissingExtra as _MissingExtra  # noqa: E402

try:
    _require_extra("verify")
except _MissingExtra:
    __all__ = [name for name in __all__ if name not in _LAZY]
del _require_extra, _MissingExtra
