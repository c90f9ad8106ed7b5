"""Independent brute-force checkers for personalized and Swellfish ledgers (exact Fractions).

Personalized: every class's column of the records is re-checked as a w_c-event ledger with ε_c by
:func:`budgetcheck.ledger.audit.audit_windows`. Swellfish: for every policy and run, the worst privacy
loss over the timestamps neighbouring streams can differ on inside J; for small collections that is
the maximum over every placement of every overlapping policy's pattern (the true goal-affected
sets), otherwise the δ(J) largest budgets in J (Theorem 4.2 with CalcDeltaJ).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import attrs

from budgetcheck.ledger.audit import audit_windows
from budgetcheck.ledger.errors import InvalidArgument
from budgetcheck.ledger.notion import Notion, check_notion
from budgetcheck.ledger.policies import PolicyCollection, StreamPolicy, goal_affected_sets, placements
from budgetcheck.ledger.records import LedgerHeader, SpendRecord, snapshot

_PLACEMENTS_LIMIT = 4096


@attrs.frozen
class NotionAudit:
    """Constraints checked, the worst (sum / budget) found, and descriptions of violations."""

    checked: int
    worst_ratio: Fraction
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def audit_personalized(
    records: Sequence[SpendRecord], classes: Sequence[tuple[int, float]], *, runs: int
) -> NotionAudit:
    """Σ over every window of w_c timestamps <= ε_c, for every class c, group and run, exactly.

    A record of shape (runs, classes) charges every user of a class; one of shape (runs, classes, k)
    (``local_report_groups``) charges group g of class c its own amount."""
    records = snapshot(records)  # checked as they are now: nothing changes them under the audit
    checked, worst, violations = 0, Fraction(0), []
    k = max((r.amounts.shape[2] for r in records if r.amounts.ndim == 3), default=1)
    for c, (w, eps) in enumerate(classes):
        for g in range(k):
            column = [
                SpendRecord(
                    t=r.t, purpose=r.purpose, amounts=r.amounts[:, c, g] if r.amounts.ndim == 3 else r.amounts[:, c]
                )
                for r in records
            ]
            report = audit_windows(column, epsilon=eps, w=w, runs=runs)
            checked += report.windows_checked
            worst = max(worst, report.worst_ratio)
            where = f"class (w={w}, epsilon={eps!r})" + (f" group {g}" if k > 1 else "")
            violations += [f"{where} {v.describe(eps)}" for v in report.violations]
    return NotionAudit(checked=checked, worst_ratio=worst, violations=tuple(violations))


def audit_swellfish(
    records: Sequence[SpendRecord], policies: PolicyCollection, *, epsilon: float, runs: int
) -> NotionAudit:
    """For every policy and run: the worst goal-affected loss inside J <= ε, exactly."""
    eps = Fraction(epsilon)
    records = snapshot(records)
    checked, worst, violations = 0, Fraction(0), []
    for run in range(runs):
        totals: dict[int, Fraction] = {}
        for record in records:
            totals[record.t] = totals.get(record.t, Fraction(0)) + Fraction(float(record.amounts[run]))
        for index, policy in enumerate(policies.policies):
            loss = _worst_loss(policies, index, totals)
            checked += 1
            worst = max(worst, loss / eps)
            if loss > eps:
                violations.append(
                    f"run {run}: policy {index} J=[{policy.start}, {policy.end}] loses {float(loss)!r} > "
                    f"epsilon={epsilon!r}"
                )
    return NotionAudit(checked=checked, worst_ratio=worst, violations=tuple(violations))


def audit_records(
    records: Sequence[SpendRecord],
    notion: Notion | str,
    *,
    runs: int,
    epsilon: float = 1.0,
    w: int = 1,
    classes: Sequence[tuple[int, float]] = (),
    policies: PolicyCollection | Sequence[tuple[int, int, Sequence[float]]] = (),
) -> NotionAudit:
    """The audit ``notion`` calls for, exactly: every w-window of every run against ``epsilon``
    (w-event), every class's w_c-windows against ε_c (personalized: ``classes`` as (w_c, ε_c)), or
    every policy's goal-affected sets against ``epsilon`` (Swellfish: ``policies`` as a collection
    or (start, end, thresholds) triples). The one notion dispatch of an audit: the CLI and the file
    audit reach it through :func:`audit_by_header`, verify's replay and exploration directly."""
    found = check_notion(notion)
    if found == Notion.PERSONALIZED:
        return audit_personalized(records, classes, runs=runs)
    if found == Notion.SWELLFISH:
        collection = policies if isinstance(policies, PolicyCollection) else _collection(policies)
        return audit_swellfish(records, collection, epsilon=epsilon, runs=runs)
    report = audit_windows(records, epsilon=epsilon, w=w, runs=runs)
    violations = tuple(v.describe(epsilon) for v in report.violations)
    return NotionAudit(checked=report.windows_checked, worst_ratio=report.worst_ratio, violations=violations)


def audit_by_header(records: Sequence[SpendRecord], header: LedgerHeader) -> NotionAudit:
    """The audit a personalized or Swellfish ledger's header calls for (every class's windows, or
    every policy's goal-affected sets), by :func:`audit_records`: used by the CLI and the file audit,
    whose w-event ledgers are checked window by window with a fuller report (``audit_windows``) or
    streamed from the file."""
    if header.notion == Notion.W_EVENT:
        raise InvalidArgument(f"notion={header.notion!r}: a w-event ledger is audited window by window (audit_windows)")
    return audit_records(
        records,
        header.notion,
        runs=header.runs,
        epsilon=header.epsilon,
        w=header.w,
        classes=[(w, eps) for w, eps, _ in header.classes],
        policies=header.policies,
    )


def _collection(policies: Sequence[tuple[int, int, Sequence[float]]]) -> PolicyCollection:
    return PolicyCollection([StreamPolicy(a, b, theta) for a, b, theta in policies])


def _worst_loss(policies: PolicyCollection, index: int, totals: dict[int, Fraction]) -> Fraction:
    owner = policies.policies[index]
    if placements(policies.policies, index) > _PLACEMENTS_LIMIT:
        inside = sorted((totals.get(t, Fraction(0)) for t in range(owner.start, owner.end + 1)), reverse=True)
        return sum(inside[: policies.delta(index)], Fraction(0))
    return max(
        sum((totals.get(t, Fraction(0)) for t in touched), Fraction(0))
        for touched in goal_affected_sets(policies.policies, index)
    )
