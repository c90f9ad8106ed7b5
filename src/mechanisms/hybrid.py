"""The Uniform–Sample hybrid (Schäler et al. 2022, §6: the recommendation to practitioners)."""

from __future__ import annotations

import attrs
import numpy as np
from numpy.typing import NDArray

from budgetcheck import GuardedStream, InvalidArgument, WindowLedger
from budgetcheck.ops import FLOAT
from budgetcheck.proving import RuleEnv
from mechanisms._common import empty_releases, filtered
from mechanisms.rules import PeriodicRule


def _every(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"every={value!r} must be an integer >= 1")
    return value


@attrs.frozen
class Hybrid:
    """Samples every x-th timestamp with ε/ceil(w/x) and repeats the last release in between.

    x = 1 is Uniform and x = w is Sample. Budget arithmetic: :class:`mechanisms.rules.PeriodicRule`.
    """

    every: int = attrs.field(default=2, converter=_every)
    filtering: bool = False
    name: str = attrs.field(default="Hybrid", init=False)

    def allocation_rule(self) -> PeriodicRule:
        return PeriodicRule(self.every)

    def run(self, stream: GuardedStream, ledger: WindowLedger) -> NDArray[np.float64]:
        rule, env = self.allocation_rule(), RuleEnv(ledger.params.epsilon, ledger.params.w)
        state = rule.initial(FLOAT, env)
        releases = empty_releases(ledger.runs, stream.length, stream.dimensions)
        last = np.zeros((ledger.runs, stream.dimensions))
        for secret in stream:
            (budget,) = rule.charges(FLOAT, env, state, True)
            if budget > 0:
                last = filtered(ledger.laplace(secret, float(budget), purpose="publication"), self.filtering)
            state = rule.advance(FLOAT, env, state, True, (budget,))
            releases[:, secret.t - 1] = last
        return releases
