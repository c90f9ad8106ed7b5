"""The allocation rules of the data-adaptive mechanisms are proved; a rule one sample too generous is refuted."""

from __future__ import annotations

from typing import Any

import pytest

from budgetcheck.proving import Verdict, prove_range
from mechanisms.rules import BlockRule, DistanceTestRule, RemainingFractionRule, SplitUniformRule


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
