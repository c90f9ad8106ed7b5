"""An independent checker of the w-event condition over exported spend records.

It shares no arithmetic with the ledger: amounts become ``fractions.Fraction`` values, totals per
timestamp are summed, and every window [s, s+w-1] that meets the stream (those starting before
timestamp 1 count only their part inside it) is checked by a sweep over the charged timestamps
(:class:`StreamingWindows`, also the file auditor's, there on exact integer units).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import attrs
import numpy as np

from budgetcheck import rounding
from budgetcheck.ledger.errors import LedgerCorrupt
from budgetcheck.ledger.intrusions import EXPOSURE
from budgetcheck.ledger.records import SpendRecord, snapshot
from budgetcheck.ledger.validation import check_epsilon, check_positive_int


@attrs.frozen
class WindowFinding:
    """The heaviest (or first violating) window of one run."""

    run: int
    start: int
    end: int
    total: Fraction

    def describe(self, epsilon: float) -> str:
        """One line. The sum is the shortest decimal at or above the exact sum, within one ulp of it:
        rounding never shows a sum over ε as less than it is, nor as 0.7999999999999999.

        >>> eight_shares = Fraction(0.09999999999999999) * 8  # rounding.share(1.0, 10), spent 8 times
        >>> WindowFinding(run=0, start=1, end=8, total=eight_shares).describe(0.7)
        'run 0: window [1, 8] sums to 0.8 (1.142857 of epsilon=0.7)'
        """
        return (
            f"run {self.run}: window [{self.start}, {self.end}] sums to {shortest_up(self.total)!r} "
            f"({float(self.total / Fraction(epsilon)):.6f} of epsilon={epsilon!r})"
        )


def shortest_up(total: Fraction) -> float:
    """The double with the shortest decimal form that is >= ``total`` and within one ulp above it.

    >>> shortest_up(Fraction(0.1) + Fraction(0.2))  # 0.3000000000000000166...: 0.3 would be below it
    0.30000000000000004
    """
    if total <= 0:
        return float(total)
    ulp = Fraction(math.ulp(float(total)))
    magnitude = math.floor(math.log10(total))
    for digits in range(1, 18):
        scale = Fraction(10) ** (digits - 1 - magnitude)
        candidate = float(Fraction(math.ceil(total * scale)) / scale)
        if Fraction(candidate) >= total and Fraction(candidate) - total <= ulp:
            return candidate
    near = float(total)
    return near if Fraction(near) >= total else math.nextafter(near, math.inf)


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
    violating_windows: int = 0  # every (run, window) over epsilon; ``violations`` lists the first ones

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def worst_ratio(self) -> Fraction:
        """max over runs and windows of (window sum / epsilon); 0 for an empty ledger."""
        if self.worst is None:
            return Fraction(0)
        return self.worst.total / Fraction(self.epsilon)


@attrs.define
class StreamingWindows:
    """Σ of every window of w timestamps per run, exactly (integer units of :mod:`rounding`), fed
    records in order; a record may charge a timestamp up to w − 1 before the latest (footprint
    charges), so a window ending at e is final once the latest timestamp passes e + w − 1.

    The sums are swept over events, not timestamps: a window's sum changes only where a charged
    timestamp enters it or leaves it, and is constant in between, so the cost is the number of
    records, never the largest t (a file charging t = 2^53 is checked as fast as one charging t = 2),
    and every window over ε is still reported (up to ``max_violations``)."""

    w: int
    eps_units: Any  # the budget in the units of the sums: int units of rounding, or a Fraction
    runs: int
    max_violations: int = 10
    as_fraction: Callable[[Any], Fraction] = rounding.units_to_fraction
    totals: dict[int, list[Any]] = attrs.field(factory=dict)
    latest: int = 0
    done: int = 0  # windows ending at 1..done are final and checked
    window: list[Any] = attrs.field(factory=list)
    history: collections.deque[tuple[int, list[Any]]] = attrs.field(factory=collections.deque)
    checked: int = 0
    worst: WindowFinding | None = None
    worst_units: Any = -1
    violations: list[WindowFinding] = attrs.field(factory=list)
    violating: int = 0  # every (run, window) over the budget, listed or not

    def add(self, t: int, units: list[Any]) -> None:
        if t <= self.done:
            raise LedgerCorrupt(f"a record charges t={t}, more than w - 1 = {self.w - 1} before a later record")
        slot = self.totals.get(t)
        self.totals[t] = units if slot is None else [a + b for a, b in zip(slot, units, strict=True)]
        if t > self.latest:
            self.latest = t
            if t - self.w > self.done + 4096:  # finalize in chunks (a record may still charge t − w + 1.. t)
                self._finalize(t - self.w)

    def finish(self) -> None:
        self._finalize(self.latest)

    def _finalize(self, until: int) -> None:
        """Check every window ending at done+1..until, one constant stretch at a time."""
        w, history = self.w, self.history
        window = self.window or [0] * self.runs
        entering = sorted(t for t in self.totals if t <= until)
        position, index = self.done + 1, 0
        while position <= until:
            while history and history[0][0] + w <= position:  # left the window ending at `position`
                window = [s - b for s, b in zip(window, history.popleft()[1], strict=True)]
            if index < len(entering) and entering[index] == position:
                units = self.totals.pop(position)
                history.append((position, units))
                window = [s + a for s, a in zip(window, units, strict=True)]
                index += 1
            following = min(
                entering[index] if index < len(entering) else until + 1,
                history[0][0] + w if history else until + 1,
                until + 1,
            )
            self._note(window, position, following - 1)
            position = following
        self.checked += self.runs * max(0, until - self.done)
        self.window, self.done = window, max(self.done, until)

    def _note(self, window: list[Any], first: int, last: int) -> None:
        """The windows ending at first..last all sum to ``window`` (per run)."""
        for run, total in enumerate(window):
            if total > self.worst_units:
                self.worst_units = total
                self.worst = WindowFinding(
                    run=run, start=max(1, first - self.w + 1), end=first, total=self.as_fraction(total)
                )
        if max(window) <= self.eps_units:
            return
        self.violating += (last - first + 1) * sum(1 for total in window if total > self.eps_units)
        for end in range(first, last + 1):
            for run, total in enumerate(window):
                if len(self.violations) >= self.max_violations:
                    return
                if total > self.eps_units:
                    self.violations.append(
                        WindowFinding(run=run, start=max(1, end - self.w + 1), end=end, total=self.as_fraction(total))
                    )


def audit_windows(
    records: Sequence[SpendRecord], *, epsilon: float, w: int, runs: int, max_violations: int = 10
) -> AuditReport:
    """Re-check Σ_{k=s}^{s+w-1} ε_k <= ε for every run and every window, exactly."""
    epsilon = check_epsilon(epsilon)
    w = check_positive_int(w, "w")
    runs = check_positive_int(runs, "runs")
    records = snapshot(records)  # checked as they are now: nothing changes them under the audit
    if any(record.purpose == EXPOSURE for record in records):
        worst, violations, checked, violating = _exposed_windows(records, epsilon, w, runs, max_violations)
    else:
        windows = StreamingWindows(w, Fraction(epsilon), runs, max_violations, as_fraction=Fraction)
        for record in sorted(records, key=lambda r: r.t):  # sums do not depend on the order
            windows.add(record.t, [Fraction(float(v)) for v in np.broadcast_to(record.amounts, (runs,))])
        windows.finish()
        worst, violations, checked, violating = windows.worst, windows.violations, windows.checked, windows.violating
    return AuditReport(
        epsilon=epsilon,
        w=w,
        runs=runs,
        records=len(records),
        windows_checked=checked,
        worst=worst,
        violations=tuple(violations),
        violating_windows=violating,
    )


def _exposed_windows(
    records: Sequence[SpendRecord], epsilon: float, w: int, runs: int, max_violations: int
) -> tuple[WindowFinding | None, list[WindowFinding], int, int]:
    """Pan-private records (single unannounced intrusion, Kellaris et al. 2014 §4.5): every window
    [e−w+1, e] is checked for Σ spends + max exposure <= ε by brute force over every end e that
    meets a record (exposure records are potential charges, not spends:
    :mod:`budgetcheck.ledger.intrusions`)."""
    spends: dict[int, list[Fraction]] = {}
    exposures: dict[int, list[Fraction]] = {}
    for record in records:
        table = exposures if record.purpose == EXPOSURE else spends
        row = table.setdefault(record.t, [Fraction(0)] * runs)
        for run, value in enumerate(np.broadcast_to(record.amounts, (runs,))):
            row[run] += Fraction(float(value))
    bound = Fraction(epsilon)
    worst: WindowFinding | None = None
    violations: list[WindowFinding] = []
    violating = 0
    ends = sorted({t + k for t in (*spends, *exposures) for k in range(w)})
    for end in ends:
        start = max(1, end - w + 1)
        for run in range(runs):
            total = sum((spends[t][run] for t in range(start, end + 1) if t in spends), Fraction(0))
            total += max((exposures[t][run] for t in range(start, end + 1) if t in exposures), default=Fraction(0))
            finding = WindowFinding(run=run, start=start, end=end, total=total)
            if worst is None or total > worst.total:
                worst = finding
            if total > bound:
                violating += 1
                if len(violations) < max_violations:
                    violations.append(finding)
    return worst, violations, len(ends) * runs, violating


def audit_windows_per_epsilon(
    records: Sequence[SpendRecord], *, epsilons: Sequence[float], w: int
) -> dict[float, AuditReport]:
    """:func:`audit_windows` for a ledger of several ε (``WindowLedger.with_epsilons``): the runs
    held to each distinct ε, audited under it (each record restricted to those runs)."""
    budgets = np.array([check_epsilon(e, "epsilons") for e in epsilons], dtype=np.float64)
    kept = snapshot(records)
    reports = {}
    for epsilon in sorted(set(budgets.tolist())):
        runs = np.flatnonzero(budgets == epsilon)
        mine = [record.evolve(amounts=record.amounts[runs], noise_scale=None) for record in kept]
        reports[epsilon] = audit_windows(mine, epsilon=epsilon, w=w, runs=runs.size)
    return reports
