"""Z3 proofs of the built-in rules over the whole range the README claims (w = 1..128)."""

from __future__ import annotations

import pytest

from budgetcheck.proving import Verdict, prove_range
from mechanisms.rules import BARule, BDRule, PeriodicRule

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("rule", [PeriodicRule(every=1), PeriodicRule(), BDRule(), BARule()])
def test_full_range_proofs(rule: object) -> None:
    assert prove_range(rule, range(1, 129)).verdict is Verdict.PROVED  # type: ignore[arg-type]
