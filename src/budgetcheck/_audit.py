"""An independent brute-force checker of the w-event condition over exported spend records.

It shares no arithmetic with the ledger: amounts become ``fractions.Fraction`` values, totals per
timestamp are summed, and every window [s, s+w-1] that meets the stream (those starting before
timestamp 1 count only their part inside it) is summed via exact prefix sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

import attrs
import numpy as np

from budgetcheck._records import SpendRecord
from budgetcheck._validation import check_epsilon, check_positive_int


@attrs.frozen
class WindowFinding:
    """The heaviest (or first violating) window of one run."""

    run: int
    start: int
    end: int
    total: Fraction

    def describe(self, epsilon: float) -> str:
        return (
            f"run {self.run}: window [{self.start}, {self.end}] sums to {float(self.total)!r} "
            f"({float(self.total / Fraction(epsilon)):.6f} of epsilon={epsilon!r})"
        )


@attrs.frozen
class AuditReport:
    """The verdict of :func:`audit_windows` (``ok`` is False iff some window exceeds epsilon)."""

    epsilon: float
    w: int
    runs: int
    records: int
    windows_checked: int
    worst: WindowFinding | None
    violations: tuple[WindowFinding, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def worst_ratio(self) -> Fraction:
        """max over runs and windows of (window sum / epsilon); 0 for an empty ledger."""
        if self.worst is None:
            return Fraction(0)
        return self.worst.total / Fraction(self.epsilon)


def audit_windows(
    records: Sequence[SpendRecord], *, epsilon: float, w: int, runs: int, max_violations: int = 10
) -> AuditReport:
    """Re-check Σ_{k=s}^{s+w-1} ε_k <= ε for every run and every window, exactly."""
    epsilon = check_epsilon(epsilon)
    w = check_positive_int(w, "w")
    runs = check_positive_int(runs, "runs")
    eps_exact = Fraction(epsilon)
    horizon = max((r.t for r in records), default=0)
    worst: WindowFinding | None = None
    violations: list[WindowFinding] = []
    checked = 0
    for run in range(runs):
        totals = [Fraction(0)] * (horizon + 1)
        for record in records:
            totals[record.t] += Fraction(float(record.amounts[run]))
        prefix = _prefix_sums(totals)
        for end in range(1, horizon + 1):
            start = max(1, end - w + 1)
            total = prefix[end] - prefix[start - 1]
            checked += 1
            if worst is None or total > worst.total:
                worst = WindowFinding(run=run, start=start, end=end, total=total)
            if total > eps_exact and len(violations) < max_violations:
                violations.append(WindowFinding(run=run, start=start, end=end, total=total))
    return AuditReport(
        epsilon=epsilon,
        w=w,
        runs=runs,
        records=len(records),
        windows_checked=checked,
        worst=worst,
        violations=tuple(violations),
    )


def audit_windows_per_epsilon(records: Sequence[SpendRecord], *, epsilons: Sequence[float], w: int) -> dict[float, AuditReport]:
    """:func:`audit_windows` for a ledger of several ε (``WindowLedger.with_epsilons``): the runs
    held to each distinct ε, audited under it (each record restricted to those runs)."""
    budgets = np.array([check_epsilon(e, "epsilons") for e in epsilons], dtype=np.float64)
    reports = {}
    for epsilon in sorted(set(budgets.tolist())):
        runs = np.flatnonzero(budgets == epsilon)
        mine = [attrs.evolve(record, amounts=record.amounts[runs], noise_scale=None) for record in records]
        reports[epsilon] = audit_windows(mine, epsilon=epsilon, w=w, runs=runs.size)
    return reports


def _prefix_sums(values: Iterable[Fraction]) -> list[Fraction]:
    prefix = []
    running = Fraction(0)
    for value in values:
        running += value
        prefix.append(running)
    return prefix
