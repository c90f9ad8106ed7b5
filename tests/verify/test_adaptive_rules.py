"""The allocation rules of the data-adaptive mechanisms are proved; a rule one sample too generous is refuted."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from budgetcheck import (
    GuardedStream,
    WEventParams,
    WindowLedger,
)
from budgetcheck.proving import Verdict, prove_range
from mechanisms import AdaPub, DSATw, FASTw, PeGaSus, RescueDP
from mechanisms.rules import BlockRule, DistanceTestRule, RemainingFractionRule, SplitUniformRule

ADAPTIVE = [
    FASTw(),
    FASTw(sampling_ratio=0.075),
    DSATw(),
    DSATw(sample_rate=0.15),
    RescueDP(),
    RescueDP(grouping=False),
    AdaPub(),
    AdaPub(grouping=False),
    PeGaSus(),
    PeGaSus(smoother="james-stein"),
]


def _ledger(epsilon: float = 1.0, w: int = 4, runs: int = 1, data: object = None) -> tuple[WindowLedger, list[object]]:
    ledger = WindowLedger(WEventParams(epsilon, w), runs=runs, seed=3, sampler="numpy-laplace", keep_records=True)
    stream = GuardedStream(np.arange(24.0).reshape(8, 3) if data is None else data)
    ledger.bind(stream)
    return ledger, list(stream)


def _windows(records: object, w: int, runs: int) -> list[Fraction]:
    """The largest window sum per run, brute force over every window."""
    totals: dict[int, list[Fraction]] = {}
    for record in records:  # type: ignore[attr-defined]
        row = totals.setdefault(record.t, [Fraction(0)] * runs)
        for r in range(runs):
            row[r] += Fraction(float(record.amounts[r]))
    horizon = max(totals, default=0)
    return [
        max(
            (
                sum((totals.get(s, [Fraction(0)] * runs)[r] for s in range(e - w + 1, e + 1)), Fraction(0))
                for e in range(1, horizon + 1)
            ),
            default=Fraction(0),
        )
        for r in range(runs)
    ]


# -- rules ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rule",
    [
        BlockRule(),
        BlockRule(0.5),
        DistanceTestRule(),
        DistanceTestRule(0.3),
        RemainingFractionRule(),
        RemainingFractionRule(1.0, 1),
        SplitUniformRule(),
    ],
)
def test_adaptive_rules_are_proved(rule: object) -> None:
    assert prove_range(rule, range(1, 9)).verdict is Verdict.PROVED  # type: ignore[arg-type]


class _OneSampleTooMany(DistanceTestRule):
    """Budgets for C samples per window, cap at C + 1 (the harness's window sum one short)."""

    def grants(self, ops: Any, env: Any, state: Any, decision: Any) -> Any:
        return ops.both(decision, ops.count(state[1]) < self.samples(env) + 1)


def test_a_rule_that_allows_one_more_sample_per_window_is_refuted() -> None:
    verdict = prove_range(_OneSampleTooMany(0.3), range(1, 6))
    assert verdict.verdict is Verdict.REFUTED
